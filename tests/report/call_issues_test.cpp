// The known issues a stored call matches, from the store's facts alone: the cuDNN padding-mask dQ
// NaN as the H200 records it matches pytorch#196678; without the GPU's name it is only possible;
// a float32 overflow on the CPU and an injected fault match nothing.
#include "report/call_issues.h"

#include <gtest/gtest.h>

#include "replay/known_issues.h"

namespace nanprov::report {
namespace {

TensorHealth tensor(Role role, const char* dtype, std::vector<int64_t> dims, int64_t nan = 0) {
  TensorHealth t;
  t.role = role;
  t.dtype = DtypeName::intern(dtype);
  t.shape = TensorShape::of(dims.data(), static_cast<int>(dims.size()));
  t.numel = 1;
  for (int64_t d : dims) t.numel *= d;
  t.nan = nan;
  return t;
}

// The backward of a cuDNN call with a bool padding mask hiding one query row, S=64, head_dim 128.
CallRecord cudnnMaskedRowsBackward() {
  CallRecord c;
  c.op = "aten::_scaled_dot_product_cudnn_attention_backward";
  c.backend = "cudnn";
  c.phase = Phase::kBackward;
  c.device = Device::cuda(0);
  for (Role r : {Role::kQ, Role::kK, Role::kV, Role::kO, Role::kdO})
    c.tensors.push_back(tensor(r, "BFloat16", {4, 2, 64, 128}));
  TensorHealth mask = tensor(Role::kMask, "Bool", {4, 1, 64, 64});
  mask.masked_rows = 2;
  c.tensors.push_back(mask);
  c.tensors.push_back(tensor(Role::kdQ, "BFloat16", {4, 2, 64, 128}, /*nan=*/1024));
  c.tensors.push_back(tensor(Role::kdK, "BFloat16", {4, 2, 64, 128}));
  c.tensors.push_back(tensor(Role::kdV, "BFloat16", {4, 2, 64, 128}));
  return c;
}

const std::map<std::string, std::string> kH200 = {
    {"torch", "2.11.0+cu130"}, {"cudnn", "91900"}, {"gpu", "NVIDIA H200 (sm_90)"}, {"cuda_build", "13.0"}};

std::vector<std::string> ids(const std::vector<IssueMatchNote>& matches) {
  std::vector<std::string> out;
  for (const IssueMatchNote& m : matches) out.push_back(m.issue.id);
  return out;
}

std::vector<std::string> ids(const std::vector<PossibleIssueNote>& possible) {
  std::vector<std::string> out;
  for (const PossibleIssueNote& m : possible) out.push_back(m.id);
  return out;
}

TEST(CallIssues, FactsComeFromTheStoredShapesDtypesAndMask) {
  replay::IssueFacts f = factsOfCall(cudnnMaskedRowsBackward(), kH200);
  EXPECT_EQ(f.dtype, "bfloat16");
  EXPECT_EQ(f.mask_dtype, "bool");
  EXPECT_EQ(f.s_q, 64);
  EXPECT_EQ(f.s_kv, 64);
  EXPECT_EQ(f.head_dim, 128);
  EXPECT_EQ(f.fully_masked_rows, 2);
  EXPECT_EQ(f.nonfinite, std::set<std::string>{"dQ"});
  EXPECT_EQ(f.arch, "sm_90");
  EXPECT_EQ(f.versions["cudnn"], "9.19.0");
  EXPECT_FALSE(f.min_row_lse.has_value()) << "only a replay measures it";
}

TEST(CallIssues, CudnnPaddingMaskDqNaNMatchesItsReport) {
  CallIssues found = knownIssuesOfCall(cudnnMaskedRowsBackward(), kH200);
  EXPECT_EQ(ids(found.matches), std::vector<std::string>{"pytorch#196678"});
  ASSERT_FALSE(found.matches.empty());
  EXPECT_NE(found.matches[0].issue.fix.find("this run has 9.19.0"), std::string::npos) << found.matches[0].issue.fix;
}

TEST(CallIssues, WhatTheStoreDoesNotSayLeavesAPossibleMatchNotAMatch) {
  // No fully masked row: the row LSE condition needs a replay.
  CallRecord c = cudnnMaskedRowsBackward();
  for (TensorHealth& t : c.tensors) {
    if (t.role == Role::kMask) t.masked_rows = 0;
  }
  CallIssues found = knownIssuesOfCall(c, kH200);
  EXPECT_TRUE(found.matches.empty());
  ASSERT_EQ(ids(found.possible), std::vector<std::string>{"pytorch#196678"});
  EXPECT_EQ(found.possible[0].undecided, std::vector<std::string>{"row_lse_below"});
  EXPECT_NE(found.possible[0].sentence.find("the store does not say row_lse_below"), std::string::npos);
  // A store from before nanprov kept the CUDA build: the cuDNN illegal-access report on CUDA < 12.9
  // (pytorch#169849) is possible too, and says what it lacks.
  std::map<std::string, std::string> no_build = kH200;
  no_build.erase("cuda_build");
  CallIssues older = knownIssuesOfCall(c, no_build);
  ASSERT_EQ(ids(older.possible), (std::vector<std::string>{"pytorch#196678", "pytorch#169849"}));
  EXPECT_EQ(older.possible[1].undecided, std::vector<std::string>{"cuda version"});
  // A rank that never said which GPU it ran on: the architecture is undecided too.
  std::map<std::string, std::string> no_gpu = kH200;
  no_gpu.erase("gpu");
  EXPECT_TRUE(knownIssuesOfCall(cudnnMaskedRowsBackward(), no_gpu).matches.empty());
}

// The review's false matches: a dQ that only overflowed to Inf is not the NaN bug; a mask whose
// dtype the store spells oddly is not "no mask"; for a plain softmax, rows hidden by a finite
// bias (uniform weights, not NaN) are not fully masked.
TEST(CallIssues, InfIsNotNaNAndWhatTheStoreCannotSayStaysUnknown) {
  CallRecord inf = cudnnMaskedRowsBackward();
  for (TensorHealth& t : inf.tensors) {
    if (t.role == Role::kdQ) t.posinf = t.nan, t.nan = 0;
  }
  EXPECT_TRUE(knownIssuesOfCall(inf, kH200).matches.empty());
  CallRecord odd = cudnnMaskedRowsBackward();
  for (TensorHealth& t : odd.tensors) {
    if (t.role == Role::kMask) t.dtype = DtypeName::intern("Float9000");
  }
  EXPECT_FALSE(factsOfCall(odd, kH200).mask_dtype.has_value());
  CallRecord mha;
  mha.op = "multi_head_attention_forward";
  mha.backend = "plain_softmax";
  mha.tensors.push_back(tensor(Role::kQ, "Float", {4, 16, 64}));
  TensorHealth finite_bias = tensor(Role::kMask, "Float", {16, 16});
  finite_bias.masked_rows = 3;  // rows of -3.4e38 (finfo.min), as Hugging Face builds them
  mha.tensors.push_back(finite_bias);
  mha.tensors.push_back(tensor(Role::kO, "Float", {4, 16, 64}, /*nan=*/64));
  EXPECT_FALSE(factsOfCall(mha, {}).fully_masked_rows.has_value());
  mha.tensors[1].neginf = 48;  // rows of -inf: a plain softmax makes them NaN
  EXPECT_EQ(factsOfCall(mha, {}).fully_masked_rows, 3);
}

TEST(CallIssues, AnOverflowOnTheCpuAndAnInjectedFaultMatchNothing) {
  CallRecord cpu;
  cpu.op = "aten::_scaled_dot_product_flash_attention_for_cpu";
  cpu.backend = "flash_cpu";
  for (Role r : {Role::kQ, Role::kK, Role::kV}) cpu.tensors.push_back(tensor(r, "Float", {4, 4, 32, 16}));
  cpu.tensors.push_back(tensor(Role::kO, "Float", {4, 4, 32, 16}, /*nan=*/64));
  CallIssues found = knownIssuesOfCall(cpu, {{"torch", "2.13.0"}});
  EXPECT_TRUE(found.matches.empty()) << ids(found.matches).size();
  EXPECT_TRUE(found.possible.empty()) << ids(found.possible).front();
  CallRecord injected = cudnnMaskedRowsBackward();
  injected.injected = "dQ";
  CallIssues none = knownIssuesOfCall(injected, kH200);
  EXPECT_TRUE(none.matches.empty() && none.possible.empty());
}

}  // namespace
}  // namespace nanprov::report
