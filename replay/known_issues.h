// Known issues: public attention bugs (replay/known_issues.json, built into nanprov), and which of
// them a call's facts match. A false match is worse than none: an entry matches only when every
// condition it lists holds for facts that are known, its backend, phase and symptom are the call's,
// and the run's versions are among those it affects. A fact nanprov does not know fails the
// condition that needs it.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace nanprov::replay {

struct KnownIssue {
  std::string id, url, title;
  // op: "sdpa" (PyTorch's scaled-dot-product ops), "mha" (nn.MultiheadAttention's own softmax
  // path) or a backend's name (fa4); backend and phase as nanprov names them; "any" matches all.
  std::string op, backend, phase;
  nlohmann::json conditions;  // see knownConditions()
  nlohmann::json symptom;     // {"kind": nan|wrong|zeros|wrong-or-nan, "tensors": [...], "only": bool}
  nlohmann::json affected;    // {"torch": ">=2.11", "cudnn": "<9.26"}: every constraint must hold
  nlohmann::json fixed_in;    // {"cudnn": "9.26"} or null
  std::string status;         // fixed | open | closed
  std::string workaround;
  // A special case of another entry (the same mechanism under more conditions): where it matches,
  // that one does too, and both are named.
  std::string narrower_than;
};

// What nanprov knows of one call: its replay's conditions, the verdicts of its outputs and the
// versions it ran with. Unset optionals and empty strings are unknown.
struct IssueFacts {
  std::string op;                         // as recorded: "aten::_scaled_dot_product_cudnn_attention_backward"
  std::string backend, phase;             // "cudnn", "bwd"
  std::string dtype;                      // the query's, as torch names it: "bfloat16"
  std::optional<std::string> mask_dtype;  // "" without a mask
  std::optional<int64_t> s_q, s_kv, head_dim, q_heads, kv_heads;
  std::optional<bool> causal;
  std::optional<double> dropout_p;
  std::optional<int64_t> fully_masked_rows;
  std::optional<double> min_row_lse;
  std::set<std::string> nonfinite, wrong, zero;  // outputs by what is wrong with them
  bool judged = false;                           // against a reference: wrong and zero are facts (non-finite always is)
  std::string arch;                              // "sm_90"; empty: unknown or the CPU
  std::optional<int64_t> qkv_alignment;          // bytes: the least aligned of Q, K and V's data pointers
  std::optional<bool> packed;                    // packed sequences (cu_seqlens, layout "thd")
  std::optional<std::string> flex_backend;       // FlexAttention's kernel_options["BACKEND"]
  // "torch" -> "2.11.0+cu130", "cudnn" -> "9.19.0" (the loaded library's where known), "cuda"
  // (torch.version.cuda), "triton", "ptxas", "flash_attn_4". A version an entry's `affected`
  // names that is unknown leaves it undecided ("ptxas version"), never matched.
  std::map<std::string, std::string> versions;
};

// The database, parsed once. Fails only if the built-in data is malformed (a test guards it).
const StatusOr<std::vector<KnownIssue>>& knownIssues();
// The condition names the matcher understands; an entry naming another never matches.
const std::set<std::string>& knownConditions();

struct IssueMatch {
  const KnownIssue* issue = nullptr;
  std::string fix;                     // "fixed in cuDNN 9.26, this run has 9.19.0" / "open" / ...
  std::vector<std::string> undecided;  // possible matches only: the conditions facts lack
};
std::vector<IssueMatch> matchKnownIssues(const IssueFacts& facts);
bool matches(const KnownIssue& issue, const IssueFacts& facts);
// Entries every known fact agrees with, but which need facts these lack (a row's log-sum-exp, a
// verdict against the reference): what a replay of the call would decide. nullopt: a known fact
// rules the entry out; empty: it matches.
std::optional<std::vector<std::string>> undecidedConditions(const KnownIssue& issue, const IssueFacts& facts);
std::vector<IssueMatch> possibleKnownIssues(const IssueFacts& facts);

// "matches pytorch#196678 (title); fixed in cuDNN 9.26, this run has 9.19.0; workaround: ..."
std::string matchText(const IssueMatch& m);
// "may match pytorch#196678 (title); the store does not say row_lse_below", where `source` ("the
// store", "the capture") is what lacks the facts.
std::string possibleText(const IssueMatch& m, const std::string& source);
nlohmann::json possibleJson(const std::vector<IssueMatch>& possible);
nlohmann::json issueJson(const KnownIssue& issue);
nlohmann::json matchesJson(const std::vector<IssueMatch>& matches);

// Compares dotted versions numerically ("2.11.0+cu130" < "2.12"); a constraint is ">=V", "<V",
// "==V" (V's components only: "==9.12" holds for 9.12.3), or several joined by commas.
bool versionSatisfies(const std::string& version, const std::string& constraint);
// cuDNN's integer version (91900) as text ("9.19.0"); empty for 0.
std::string cudnnVersionText(long long version);
// "sm_90" from a GPU description such as "NVIDIA H200 (sm_90)"; empty when it names none.
std::string archOf(const std::string& gpu);
// The architecture and versions an environment names (the "torch", "cudnn" and "gpu" entries a
// capture's metadata or a rank store's meta hold) into the facts.
void addEnvironment(const std::map<std::string, std::string>& environment, IssueFacts& facts);

}  // namespace nanprov::replay
