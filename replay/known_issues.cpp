#include "replay/known_issues.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <string_view>

#include "base/numbers.h"

namespace nanprov::replay {

extern const char* const kKnownIssuesJson;  // generated from known_issues.json (CMake)

namespace {

// The display names of the components a fix or a version names.
std::string componentName(const std::string& key) {
  if (key == "cudnn") return "cuDNN";
  if (key == "cudnn-frontend") return "cudnn-frontend";
  if (key == "torch") return "torch";
  if (key == "cuda") return "CUDA";
  if (key == "flash_attn_4") return "flash-attn-4";
  return key;
}

std::vector<long long> versionParts(const std::string& text) {
  std::vector<long long> parts;
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    size_t end = i;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    // Digits only, so the one way to fail is a component too long for 64 bits: it counts as the
    // largest, as a version that outgrew every constraint.
    constexpr int64_t kLargest = std::numeric_limits<int64_t>::max();
    parts.push_back(parseInteger(std::string_view(text).substr(i, end - i), 0, kLargest).value_or(kLargest));
    if (end >= text.size() || text[end] != '.') break;  // "+cu130", "a0", "rc1": the rest is a build tag
    i = end + 1;
  }
  return parts;
}

// -1, 0, 1 over the components both name ("9.12" and "9.12.3" compare equal when `prefix`).
int compareVersions(const std::vector<long long>& a, const std::vector<long long>& b, bool prefix) {
  const size_t n = prefix ? std::min(a.size(), b.size()) : std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const long long x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

// The op an entry names against the op the call recorded.
bool opMatches(const std::string& wanted, const IssueFacts& f) {
  if (wanted == "any") return true;
  if (f.op.empty()) return false;
  if (wanted == "mha") return f.op.find("multi_head_attention") != std::string::npos;
  if (wanted == "sdpa") return f.op.rfind("aten::", 0) == 0 && f.op.find("multi_head") == std::string::npos;
  return wanted == f.backend;  // a library's own kernels: fa4, flex
}

bool listHas(const nlohmann::json& list, const nlohmann::json& value) {
  return list.is_array() && std::find(list.begin(), list.end(), value) != list.end();
}

// One condition of an entry against the facts; false when the fact it needs is unknown.
bool conditionHolds(const std::string& name, const nlohmann::json& want, const IssueFacts& f) {
  auto integer = [](const std::optional<int64_t>& v, const nlohmann::json& w) {
    return v && w.is_number_integer() && *v == w.get<int64_t>();
  };
  if (name == "dtype") return !f.dtype.empty() && listHas(want, f.dtype);
  if (name == "mask") {
    if (!f.mask_dtype) return false;
    return want == "present" ? !f.mask_dtype->empty() : want == "none" && f.mask_dtype->empty();
  }
  if (name == "mask_dtype") return f.mask_dtype && !f.mask_dtype->empty() && listHas(want, *f.mask_dtype);
  if (name == "s_q") return integer(f.s_q, want);
  if (name == "s_kv") return integer(f.s_kv, want);
  if (name == "s_kv_mod_128") return f.s_kv && want.is_number_integer() && *f.s_kv % 128 == want.get<int64_t>();
  if (name == "s_kv_mod_32") return f.s_kv && want.is_number_integer() && *f.s_kv % 32 == want.get<int64_t>();
  if (name == "s_kv_mod_128_nonzero") return f.s_kv && want.is_boolean() && (*f.s_kv % 128 != 0) == want.get<bool>();
  if (name == "row_lse_below") {
    // A row with no visible key has a log-sum-exp of log(0) = -inf, below any bound.
    if (f.fully_masked_rows && *f.fully_masked_rows > 0 && want.is_number()) return true;
    return f.min_row_lse && want.is_number() && *f.min_row_lse < want.get<double>();
  }
  if (name == "head_dim") return f.head_dim && listHas(want, *f.head_dim);
  if (name == "causal") return f.causal && want.is_boolean() && *f.causal == want.get<bool>();
  if (name == "dropout") return f.dropout_p && want.is_boolean() && (*f.dropout_p > 0) == want.get<bool>();
  if (name == "fully_masked_rows") {
    return f.fully_masked_rows && want.is_boolean() && (*f.fully_masked_rows > 0) == want.get<bool>();
  }
  if (name == "gqa")
    return f.q_heads && f.kv_heads && want.is_boolean() && (*f.kv_heads < *f.q_heads) == want.get<bool>();
  if (name == "kv_heads_below") return f.kv_heads && want.is_number_integer() && *f.kv_heads < want.get<int64_t>();
  if (name == "arch") return !f.arch.empty() && listHas(want, f.arch);
  if (name == "qkv_aligned_16")
    return f.qkv_alignment && want.is_boolean() && (*f.qkv_alignment >= 16) == want.get<bool>();
  if (name == "packed") return f.packed && want.is_boolean() && *f.packed == want.get<bool>();
  if (name == "flex_backend") return f.flex_backend && listHas(want, *f.flex_backend);
  return false;  // a condition the matcher does not know: never a match
}

// Conditions no fact nanprov records can decide: the form of a mask_mod's code, or whether a
// build predates a fix that no release number names. An entry listing one is at most a possible
// match, and says what would decide it.
bool neverRecorded(const std::string& name) {
  return name == "mask_mod_abs_difference" || name == "build_predates_fix";
}

// Whether the facts say anything about what a condition needs.
bool factKnown(const std::string& name, const IssueFacts& f) {
  if (name == "dtype") return !f.dtype.empty();
  if (name == "mask" || name == "mask_dtype") return f.mask_dtype.has_value();
  if (name == "s_q") return f.s_q.has_value();
  if (name == "s_kv" || name.rfind("s_kv_mod_", 0) == 0) return f.s_kv.has_value();
  if (name == "row_lse_below") return f.min_row_lse || (f.fully_masked_rows && *f.fully_masked_rows > 0);
  if (name == "head_dim") return f.head_dim.has_value();
  if (name == "causal") return f.causal.has_value();
  if (name == "dropout") return f.dropout_p.has_value();
  if (name == "fully_masked_rows") return f.fully_masked_rows.has_value();
  if (name == "gqa") return f.q_heads && f.kv_heads;
  if (name == "kv_heads_below") return f.kv_heads.has_value();
  if (name == "arch") return !f.arch.empty();
  if (name == "qkv_aligned_16") return f.qkv_alignment.has_value();
  if (name == "packed") return f.packed.has_value();
  if (name == "flex_backend") return f.flex_backend.has_value();
  if (neverRecorded(name)) return false;
  return true;  // a condition the matcher does not know is decided: it fails
}

// The symptom's tensors are faulty the way it says; with "only", no other output is.
bool symptomHolds(const nlohmann::json& symptom, const IssueFacts& f) {
  const std::string kind = symptom.value("kind", "");
  std::set<std::string> faulty;
  if (kind == "nan") faulty = f.nonfinite;
  else if (kind == "wrong") faulty = f.wrong;
  else if (kind == "zeros") faulty = f.zero;
  else if (kind == "wrong-or-nan") {
    faulty = f.nonfinite;
    faulty.insert(f.wrong.begin(), f.wrong.end());
  } else {
    return false;
  }
  if (faulty.empty()) return false;
  std::set<std::string> listed;
  for (const auto& t : symptom.value("tensors", nlohmann::json::array())) listed.insert(t.get<std::string>());
  for (const std::string& t : listed) {
    if (!faulty.count(t)) return false;
  }
  return !symptom.value("only", false) || faulty == listed;
}

// False when a known version is outside an entry's range; the components whose version is
// unknown go to `unknown` ("ptxas version"): they leave the entry undecided.
bool versionsHold(const nlohmann::json& affected, const IssueFacts& f, std::vector<std::string>* unknown) {
  if (!affected.is_object()) return true;
  for (const auto& [component, constraint] : affected.items()) {
    if (!constraint.is_string()) return false;
    auto have = f.versions.find(component);
    if (have == f.versions.end() || have->second.empty()) {
      unknown->push_back(component + " version");
      continue;
    }
    if (!versionSatisfies(have->second, constraint.get<std::string>())) return false;
  }
  return true;
}

std::string fixText(const KnownIssue& issue, const IssueFacts& f) {
  if (issue.fixed_in.is_object() && !issue.fixed_in.empty()) {
    std::string out;
    for (const auto& [component, version] : issue.fixed_in.items()) {
      out += (out.empty() ? "fixed in " : ", ") + componentName(component) + " " + version.get<std::string>();
      auto have = f.versions.find(component);
      if (have != f.versions.end() && !have->second.empty()) out += ", this run has " + have->second;
    }
    return out;
  }
  return issue.status == "open" ? "no fix released" : issue.status + ", no fixed version named";
}

StatusOr<std::vector<KnownIssue>> parse() {
  nlohmann::json doc = nlohmann::json::parse(kKnownIssuesJson, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_array()) return Status::Error("the built-in known-issue database is not a JSON array");
  std::vector<KnownIssue> out;
  for (const nlohmann::json& e : doc) {
    if (!e.is_object() || !e.contains("id") || !e["id"].is_string()) {
      return Status::Error("a known-issue entry has no id");
    }
    KnownIssue k;
    k.id = e["id"];
    auto text = [&e](const char* key) {
      return e.contains(key) && e[key].is_string() ? e[key].get<std::string>() : "";
    };
    k.url = text("url"), k.title = text("title"), k.op = text("op"), k.backend = text("backend"),
    k.phase = text("phase");
    k.status = text("status"), k.workaround = text("workaround"), k.narrower_than = text("narrower_than");
    k.conditions = e.value("conditions", nlohmann::json::object());
    k.symptom = e.value("symptom", nlohmann::json::object());
    k.affected = e.value("affected", nlohmann::json::object());
    k.fixed_in = e.contains("fixed_in") ? e["fixed_in"] : nlohmann::json();
    out.push_back(std::move(k));
  }
  return out;
}

}  // namespace

const StatusOr<std::vector<KnownIssue>>& knownIssues() {
  static const StatusOr<std::vector<KnownIssue>> issues = parse();
  return issues;
}

const std::set<std::string>& knownConditions() {
  static const std::set<std::string> names = {"arch",
                                              "build_predates_fix",
                                              "causal",
                                              "dropout",
                                              "dtype",
                                              "flex_backend",
                                              "fully_masked_rows",
                                              "gqa",
                                              "head_dim",
                                              "kv_heads_below",
                                              "mask",
                                              "mask_dtype",
                                              "mask_mod_abs_difference",
                                              "packed",
                                              "qkv_aligned_16",
                                              "row_lse_below",
                                              "s_kv",
                                              "s_kv_mod_128",
                                              "s_kv_mod_128_nonzero",
                                              "s_kv_mod_32",
                                              "s_q"};
  return names;
}

bool matches(const KnownIssue& issue, const IssueFacts& f) {
  auto undecided = undecidedConditions(issue, f);
  return undecided && undecided->empty();
}

std::optional<std::vector<std::string>> undecidedConditions(const KnownIssue& issue, const IssueFacts& f) {
  if (!opMatches(issue.op, f)) return std::nullopt;
  if (issue.backend != "any" && issue.backend != f.backend) return std::nullopt;
  if (issue.phase != "any" && issue.phase != f.phase) return std::nullopt;
  if (!issue.conditions.is_object()) return std::nullopt;
  std::vector<std::string> undecided;
  for (const auto& [name, want] : issue.conditions.items()) {
    if (!factKnown(name, f)) undecided.push_back(name);
    else if (!conditionHolds(name, want, f)) return std::nullopt;
  }
  // Without a reference only non-finite outputs are facts: a finite wrong or zero output is
  // undecided, and a call whose outputs went non-finite is not the silent kind of fault.
  const std::string kind = issue.symptom.value("kind", "");
  if (!f.judged && (kind == "wrong" || kind == "zeros")) {
    if (!f.nonfinite.empty()) return std::nullopt;
    undecided.push_back("symptom");
  } else if (!symptomHolds(issue.symptom, f)) {
    return std::nullopt;
  }
  if (!versionsHold(issue.affected, f, &undecided)) return std::nullopt;
  return undecided;
}

namespace {

// The entries whose undecided conditions `keep` accepts (none: a match; some: a possible one), in
// the database's order.
std::vector<IssueMatch> issuesWhere(const IssueFacts& facts, bool (*keep)(const std::vector<std::string>&)) {
  std::vector<IssueMatch> out;
  const auto& issues = knownIssues();
  if (!issues.ok()) return out;
  for (const KnownIssue& k : issues.value()) {
    auto undecided = undecidedConditions(k, facts);
    if (undecided && keep(*undecided)) out.push_back({&k, fixText(k, facts), std::move(*undecided)});
  }
  return out;
}

}  // namespace

std::vector<IssueMatch> possibleKnownIssues(const IssueFacts& facts) {
  return issuesWhere(facts, [](const std::vector<std::string>& undecided) { return !undecided.empty(); });
}

std::vector<IssueMatch> matchKnownIssues(const IssueFacts& facts) {
  return issuesWhere(facts, [](const std::vector<std::string>& undecided) { return undecided.empty(); });
}

std::string matchText(const IssueMatch& m) {
  std::string out = "matches " + m.issue->id + " (" + m.issue->title + "); " + m.fix;
  if (!m.issue->workaround.empty()) out += "; workaround: " + m.issue->workaround;
  return out + " " + m.issue->url;
}

std::string possibleText(const IssueMatch& m, const std::string& source) {
  std::string undecided;
  for (const std::string& c : m.undecided) undecided += (undecided.empty() ? "" : ", ") + c;
  // Which of these a replay measures depends on the backend; the text promises no more.
  return "may match " + m.issue->id + " (" + m.issue->title + "); " + source + " does not say " + undecided;
}

nlohmann::json possibleJson(const std::vector<IssueMatch>& possible) {
  nlohmann::json out = nlohmann::json::array();
  for (const IssueMatch& m : possible) {
    out.push_back({{"id", m.issue->id}, {"url", m.issue->url}, {"title", m.issue->title}, {"undecided", m.undecided}});
  }
  return out;
}

nlohmann::json issueJson(const KnownIssue& k) {
  return {{"id", k.id},
          {"url", k.url},
          {"title", k.title},
          {"op", k.op},
          {"backend", k.backend},
          {"phase", k.phase},
          {"conditions", k.conditions},
          {"symptom", k.symptom},
          {"affected", k.affected},
          {"fixed_in", k.fixed_in},
          {"status", k.status},
          {"workaround", k.workaround},
          {"narrower_than", k.narrower_than.empty() ? nlohmann::json(nullptr) : nlohmann::json(k.narrower_than)}};
}

nlohmann::json matchesJson(const std::vector<IssueMatch>& matches) {
  nlohmann::json out = nlohmann::json::array();
  for (const IssueMatch& m : matches) {
    out.push_back({{"id", m.issue->id},
                   {"url", m.issue->url},
                   {"title", m.issue->title},
                   {"fix", m.fix},
                   {"status", m.issue->status},
                   {"workaround", m.issue->workaround}});
  }
  return out;
}

bool versionSatisfies(const std::string& version, const std::string& constraint) {
  const std::vector<long long> have = versionParts(version);
  if (have.empty()) return false;
  size_t begin = 0;
  while (begin <= constraint.size()) {
    size_t end = constraint.find(',', begin);
    if (end == std::string::npos) end = constraint.size();
    std::string one = constraint.substr(begin, end - begin);
    one.erase(std::remove(one.begin(), one.end(), ' '), one.end());
    bool ok;
    if (one.rfind(">=", 0) == 0) ok = compareVersions(have, versionParts(one.substr(2)), false) >= 0;
    else if (one.rfind("==", 0) == 0) ok = compareVersions(have, versionParts(one.substr(2)), true) == 0;
    else if (one.rfind("<", 0) == 0) ok = compareVersions(have, versionParts(one.substr(1)), false) < 0;
    else ok = false;  // a constraint this reader does not know holds for nothing
    if (!ok) return false;
    begin = end + 1;
  }
  return true;
}

std::string cudnnVersionText(long long v) {
  if (v <= 0) return "";
  // cuDNN 9 counts major * 10000 + minor * 100 + patch; cuDNN 8 counted major * 1000.
  if (v < 10000) return std::to_string(v / 1000) + "." + std::to_string(v / 100 % 10) + "." + std::to_string(v % 100);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string archOf(const std::string& gpu) {
  const size_t at = gpu.find("(sm_");
  if (at == std::string::npos) return "";
  const size_t end = gpu.find(')', at);
  return end == std::string::npos ? "" : gpu.substr(at + 1, end - at - 1);
}

void addEnvironment(const std::map<std::string, std::string>& environment, IssueFacts& f) {
  auto entry = [&](const char* key) {
    auto it = environment.find(key);
    return it == environment.end() ? std::string() : it->second;
  };
  f.arch = archOf(entry("gpu"));
  if (std::string torch = entry("torch"); !torch.empty()) f.versions["torch"] = torch;
  // The cuDNN library the process loaded, where the bootstrap read it: a system cuDNN can shadow
  // the one torch was built against ("cudnn").
  std::string cudnn = entry("cudnn_loaded");
  if (cudnn.empty()) cudnn = entry("cudnn");
  // cudnnGetVersion()'s integer as text (91900); anything else is an unknown version.
  if (!cudnn.empty()) {
    f.versions["cudnn"] = cudnnVersionText(parseInteger(cudnn, 0, std::numeric_limits<int64_t>::max()).value_or(0));
  }
  for (const auto& [key, component] : {std::pair{"cuda_build", "cuda"}, std::pair{"triton", "triton"},
                                       std::pair{"ptxas", "ptxas"}, std::pair{"flash_attn_4", "flash_attn_4"}}) {
    if (std::string v = entry(key); !v.empty()) f.versions[component] = v;
  }
}

}  // namespace nanprov::replay
