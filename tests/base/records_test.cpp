// The vocabulary's closed sets: each name function and its parser agree, and text nanprov never
// writes is refused rather than guessed.
#include <gtest/gtest.h>

#include "base/records/call_record.h"
#include "base/records/device.h"
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

TEST(CaptureTrigger, EveryNameParsesBack) {
  for (CaptureTrigger t : {CaptureTrigger::kFirstSourceEdge, CaptureTrigger::kSelector, CaptureTrigger::kEvery,
                           CaptureTrigger::kAudit}) {
    EXPECT_EQ(captureTriggerNamed(captureTriggerName(t)), t);
  }
  EXPECT_FALSE(captureTriggerNamed("sometimes").has_value());
}

TEST(EngineRequest, ArgvNamesEveryFieldAndOutputsParseBack) {
  using replay::EngineOutput;
  for (EngineOutput o : {EngineOutput::kText, EngineOutput::kJson, EngineOutput::kKernels, EngineOutput::kAudit,
                         EngineOutput::kAuditJson, EngineOutput::kAuditServe}) {
    EXPECT_EQ(replay::engineOutputNamed(replay::engineOutputName(o)), o);
  }
  EXPECT_FALSE(replay::engineOutputNamed("1").has_value()) << "the old positional mode is gone";
  auto argv = replay::engineArgv("/bin/engine", {.capture = "c.safetensors", .device = "cuda", .backends = "math,cudnn",
                                                 .output = EngineOutput::kJson, .emit_repro = "out"});
  EXPECT_EQ(argv, (std::vector<std::string>{"/bin/engine", "--output", "json", "--device", "cuda", "--capture",
                                            "c.safetensors", "--backends", "math,cudnn", "--emit-repro", "out"}));
  EXPECT_EQ(replay::engineArgv("e", {.output = EngineOutput::kAuditServe}),
            (std::vector<std::string>{"e", "--output", "audit-serve", "--device", "auto"}));
}

}  // namespace
}  // namespace nanprov
