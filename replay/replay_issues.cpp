#include "replay/replay_issues.h"

#include <algorithm>
#include <cstdlib>

namespace nanprov::replay {

IssueFacts factsOf(const ReplayResult& r) {
  IssueFacts f;
  f.op = r.op;
  f.backend = r.backend;
  f.phase = r.phase;
  f.dtype = r.conditions.query_dtype;
  f.mask_dtype = r.conditions.mask_dtype;
  const Conditions& c = r.conditions;
  if (c.s_q > 0) f.s_q = c.s_q;
  if (c.s_kv > 0) f.s_kv = c.s_kv;
  if (c.q_heads > 0) f.q_heads = c.q_heads, f.kv_heads = c.kv_heads;
  // head_dim 0 is a real (degenerate) call only when the capture had its tensors.
  if (c.head_dim > 0 || (c.s_q > 0 && c.s_kv > 0)) f.head_dim = c.head_dim;
  f.causal = c.causal;
  // PyTorch's own attention ops and the plain-softmax probes put dropout_p in their capture; for
  // the others (FlashAttention, FlexAttention) the replay's 0 is a default, not a fact.
  if (c.dropout_recorded) f.dropout_p = c.dropout_p;
  f.fully_masked_rows = c.fully_masked_rows;
  f.min_row_lse = c.min_row_lse;
  // What the run itself produced, judged against the reference: a replay's other backends say
  // whether the fault is the backend's, not what the run saw.
  if (r.captured) {
    f.judged = true;
    for (const Comparison& t : r.captured->tensors) {
      if (t.verdict == Verdict::kNonFinite) f.nonfinite.insert(t.role);
      else if (t.verdict == Verdict::kSilentWrong) f.wrong.insert(t.role);
      else if (t.verdict == Verdict::kAllZero) f.zero.insert(t.role);
    }
  }
  // The least aligned of Q, K and V as the run had them; unknown unless all three were recorded.
  int known = 0;
  for (const LayoutReport& l : r.layouts) {
    if ((l.role == "Q" || l.role == "K" || l.role == "V") && l.recorded.alignment) {
      ++known;
      f.qkv_alignment = std::min(f.qkv_alignment.value_or(*l.recorded.alignment), *l.recorded.alignment);
    }
  }
  if (known < 3) f.qkv_alignment.reset();
  if (!r.layout.empty()) f.packed = r.layout == "thd";
  if (r.op == "flex_attention" && !r.flex_backend.empty()) f.flex_backend = r.flex_backend;
  addEnvironment(r.environment, f);
  return f;
}

namespace {

// The facts the matcher may judge a replay by; nullopt when it judges nothing: an invalid
// reference judges nothing, and a fault --inject planted is nobody's bug.
std::optional<IssueFacts> judgeableFacts(const ReplayResult& r) {
  if (!r.reference_problem.empty() || !r.injected.empty()) return std::nullopt;
  IssueFacts f = factsOf(r);
  // A capture that lacks part of the call (a score_mod, a softcap) makes the reference differ on
  // purpose: only non-finite outputs, which the reference does not decide, still count.
  if (!r.incomplete.empty()) f.wrong.clear(), f.zero.clear();
  return f;
}

}  // namespace

std::vector<IssueMatch> knownIssuesOf(const ReplayResult& r) {
  auto f = judgeableFacts(r);
  return f ? matchKnownIssues(*f) : std::vector<IssueMatch>{};
}

std::vector<IssueMatch> possibleKnownIssuesOf(const ReplayResult& r) {
  auto f = judgeableFacts(r);
  return f ? possibleKnownIssues(*f) : std::vector<IssueMatch>{};
}

}  // namespace nanprov::replay
