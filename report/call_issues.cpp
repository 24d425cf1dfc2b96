#include "report/call_issues.h"

#include <cstdlib>

#include "base/records/dtype.h"
#include "base/records/roles.h"
#include "replay/known_issues.h"

namespace nanprov::report {
namespace {

const TensorHealth* tensorOf(const CallRecord& call, Role role) {
  for (const TensorHealth& t : call.tensors) {
    if (t.role == role) return &t;
  }
  return nullptr;
}

std::string torchDtype(const TensorHealth& t) {
  const DtypeInfo* d = dtypeOfCppName(t.dtype.c_str());
  return d ? d->torch : "";
}

// PyTorch's own scaled-dot-product ops take Q as [B, H, S_q, D] and K as [B, H_kv, S_kv, D], and
// name their mask when they have one. Other ops (MHA's, FlashAttention's packed layouts) keep
// their shapes' meaning to themselves.
bool isSdpaOp(const std::string& op) { return op.rfind("aten::_scaled_dot_product", 0) == 0; }

}  // namespace

replay::IssueFacts factsOfCall(const CallRecord& call, const std::map<std::string, std::string>& rank_meta) {
  replay::IssueFacts f;
  f.op = call.op;
  f.backend = call.backend;
  f.phase = phaseName(call.phase);
  const TensorHealth* q = tensorOf(call, Role::kQ);
  const TensorHealth* k = tensorOf(call, Role::kK);
  const TensorHealth* mask = tensorOf(call, Role::kMask);
  if (q) f.dtype = torchDtype(*q);
  if (mask) {
    // A dtype the table does not name is unknown, not "no mask".
    if (std::string dtype = torchDtype(*mask); !dtype.empty()) f.mask_dtype = dtype;
    // The probes count a row as fully masked when every key's bias is at or below -65504, which
    // is how SDPA hands cuDNN a bool mask. A plain softmax over a row of equal finite biases
    // gives uniform weights, not NaN: there only a mask holding -inf (or a bool one) says so.
    const bool plain_softmax = call.backend == "plain_softmax";
    const bool infinite = f.mask_dtype == "bool" || mask->neginf > 0;
    if (mask->masked_rows >= 0 && (!plain_softmax || infinite || mask->masked_rows == 0)) {
      f.fully_masked_rows = mask->masked_rows;
    }
  } else if (isSdpaOp(call.op)) {
    f.mask_dtype = "";
  }
  if (isSdpaOp(call.op) && q && k && q->shape.ndim == 4 && k->shape.ndim == 4) {
    f.q_heads = q->shape.dims[1], f.s_q = q->shape.dims[2], f.head_dim = q->shape.dims[3];
    f.kv_heads = k->shape.dims[1], f.s_kv = k->shape.dims[2];
  }
  f.dropout_p = call.dropout_p;
  // The entries this matcher reads describe NaN: an output that only overflowed to Inf is
  // another fault, so it does not count (the store keeps NaN apart from Inf).
  for (const TensorHealth& t : call.tensors) {
    if (isOutputRole(call.phase, t.role) && t.nan > 0) f.nonfinite.insert(roleName(t.role));
  }
  // Written by the probes once the rank ran on a GPU (Probes::describeEnvironment).
  replay::addEnvironment(rank_meta, f);
  return f;
}

CallIssues knownIssuesOfCall(const CallRecord& call, const std::map<std::string, std::string>& rank_meta) {
  if (!call.injected.empty()) return {};
  const replay::IssueFacts facts = factsOfCall(call, rank_meta);
  CallIssues out;
  for (const replay::IssueMatch& m : replay::matchKnownIssues(facts)) {
    const replay::KnownIssue& k = *m.issue;
    out.matches.push_back({{k.id, k.url, k.title, m.fix, k.status, k.workaround}, replay::matchText(m)});
  }
  for (const replay::IssueMatch& m : replay::possibleKnownIssues(facts)) {
    const replay::KnownIssue& k = *m.issue;
    out.possible.push_back({k.id, k.url, k.title, m.undecided, replay::possibleText(m, "the store")});
  }
  return out;
}

}  // namespace nanprov::report
