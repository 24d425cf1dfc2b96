// The vocabulary's closed sets: each name function and its parser agree, and text nanprov never
// writes is refused rather than guessed.
#include <gtest/gtest.h>

#include "base/records/call_record.h"
#include "base/records/device.h"
#include "base/text.h"
#include "replay/engine_request.h"

namespace nanprov {
namespace {

TEST(Device, NamesAndParsesPyTorchsForm) {
  EXPECT_EQ(Device::cpu().name(), "cpu");
  EXPECT_EQ(Device::cuda(3).name(), "cuda:3");
  EXPECT_EQ(Device::fromIndex(-1), Device::cpu());
  EXPECT_EQ(Device::fromIndex(1), Device::cuda(1));
  for (Device d : {Device::cpu(), Device::cuda(0), Device::cuda(12)}) EXPECT_EQ(Device::parse(d.name()), d);
  for (const char* bad : {"", "gpu", "cuda", "cuda:", "cuda:-1", "cuda:1x", "cuda: 1", "CPU", "mps:0"}) {
    EXPECT_FALSE(Device::parse(bad).has_value()) << bad;
  }
}

TEST(TensorShape, TextParsesBackAndJunkIsRefused) {
  const int64_t sizes[] = {2, 4, 64, 32};
  TensorShape s = TensorShape::of(sizes, 4);
  EXPECT_EQ(s.text(), "[2,4,64,32]");
  EXPECT_EQ(TensorShape::parse(s.text()), s);
  EXPECT_EQ(TensorShape::parse("[]")->ndim, 0) << "a 0-dim tensor";
  for (const char* bad : {"", "[", "2,4", "[2,,4]", "[2,4,]", "[-1]", "[2, 4]", "[a]", "[1,2,3,4,5,6,7,8,9]"}) {
    EXPECT_FALSE(TensorShape::parse(bad).has_value()) << bad;
  }
  const int64_t deep[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  TensorShape folded = TensorShape::of(deep, 10);
  EXPECT_EQ(folded.text(), "[1,2,3,4,5,6,7,720]") << "the dims past the eighth fold into the last: numel stays";
}

TEST(DtypeName, InternedNamesCompareByText) {
  static const char kFloat[] = "Float";
  EXPECT_EQ(DtypeName::ofStatic(kFloat), DtypeName::intern(std::string("Float")));
  EXPECT_EQ(DtypeName::intern("BFloat16").c_str(), DtypeName::intern(std::string("BFloat16")).c_str());
  EXPECT_FALSE(DtypeName::intern("Half") == DtypeName::intern("Float"));
  EXPECT_TRUE(DtypeName().empty());
}

TEST(Role, EveryNameParsesBack) {
  for (int i = 0; i < kRoleCount; ++i) EXPECT_EQ(parseRole(roleName(static_cast<Role>(i))), static_cast<Role>(i));
  EXPECT_FALSE(parseRole("q").has_value());
}

TEST(CaptureTrigger, EveryNameParsesBack) {
  for (CaptureTrigger t :
       {CaptureTrigger::kFirstSourceEdge, CaptureTrigger::kSelector, CaptureTrigger::kEvery, CaptureTrigger::kAudit}) {
    EXPECT_EQ(captureTriggerNamed(captureTriggerName(t)), t);
  }
  EXPECT_FALSE(captureTriggerNamed("sometimes").has_value());
}

TEST(SentinelTensor, EveryNameParsesBack) {
  for (SentinelTensor t : {SentinelTensor::kGrad, SentinelTensor::kParam})
    EXPECT_EQ(sentinelTensorNamed(sentinelTensorName(t)), t);
  EXPECT_STREQ(sentinelTensorName(SentinelTensor::kGrad), "grad");  // the store's text, unchanged
  EXPECT_STREQ(sentinelTensorName(SentinelTensor::kParam), "param");
  EXPECT_FALSE(sentinelTensorNamed("weight").has_value());
}

TEST(EngineRequest, ArgvNamesEveryFieldAndOutputsParseBack) {
  using replay::EngineOutput;
  for (EngineOutput o : {EngineOutput::kText, EngineOutput::kJson, EngineOutput::kKernels, EngineOutput::kAudit,
                         EngineOutput::kAuditJson, EngineOutput::kAuditServe}) {
    EXPECT_EQ(replay::engineOutputNamed(replay::engineOutputName(o)), o);
  }
  EXPECT_FALSE(replay::engineOutputNamed("1").has_value()) << "the old positional mode is gone";
  auto argv = replay::engineArgv("/bin/engine", {.capture = "c.safetensors",
                                                 .device = "cuda",
                                                 .backends = "math,cudnn",
                                                 .output = EngineOutput::kJson,
                                                 .emit_repro = "out"});
  EXPECT_EQ(argv, (std::vector<std::string>{"/bin/engine", "--output", "json", "--device", "cuda", "--capture",
                                            "c.safetensors", "--backends", "math,cudnn", "--emit-repro", "out"}));
  EXPECT_EQ(replay::engineArgv("e", {.output = EngineOutput::kAuditServe}),
            (std::vector<std::string>{"e", "--output", "audit-serve", "--device", "auto"}));
  EXPECT_EQ(replay::engineArgv("e", {.reruns = 20}),
            (std::vector<std::string>{"e", "--output", "text", "--device", "auto", "--reruns", "20"}));
}

}  // namespace
}  // namespace nanprov

namespace nanprov {
namespace {

// A path the report tells the user to paste reaches nanprov as one word and runs nothing.
TEST(ShellWord, PlainWordsStayAndOthersAreSingleQuoted) {
  EXPECT_EQ(shellWord("runs/nan-hunt/captures/rank0-layer1-call3-fwd-seq7.safetensors"),
            "runs/nan-hunt/captures/rank0-layer1-call3-fwd-seq7.safetensors");
  EXPECT_EQ(shellWord("my runs"), "'my runs'");
  EXPECT_EQ(shellWord("$(rm -rf ~)"), "'$(rm -rf ~)'");
  EXPECT_EQ(shellWord("it's"), "'it'\\''s'");
  EXPECT_EQ(shellWord(""), "''");
}

}  // namespace
}  // namespace nanprov
