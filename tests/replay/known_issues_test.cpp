// The known-issue database and its matcher: the built-in data is well formed, every entry matches
// the facts its own conditions describe and no other entry matches them, a fact nanprov does not
// know never counts as a match, and a replay's result reaches the matcher with its versions.
#include "replay/known_issues.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "replay/replay_issues.h"

namespace nanprov::replay {
namespace {

using nlohmann::json;

const std::vector<KnownIssue>& database() {
  const auto& issues = knownIssues();
  EXPECT_TRUE(issues.ok()) << issues.status().message();
  static const std::vector<KnownIssue> empty;
  return issues.ok() ? issues.value() : empty;
}

// The lowest version a constraint such as ">=2.11" or "<9.26,>=9.15" allows.
std::string versionWithin(const std::string& constraint) {
  std::string low = "9.0", below;
  for (size_t begin = 0; begin <= constraint.size();) {
    size_t end = std::min(constraint.find(',', begin), constraint.size());
    std::string one = constraint.substr(begin, end - begin);
    if (one.rfind(">=", 0) == 0 || one.rfind("==", 0) == 0) low = one.substr(2);
    else if (one.rfind("<", 0) == 0) below = one.substr(1);
    begin = end + 1;
  }
  if (constraint.find(">=") == std::string::npos && constraint.find("==") == std::string::npos && !below.empty()) {
    low = below.substr(0, below.find('.')) + ".0";  // "<9.26": 9.0
  }
  return low;
}

// The facts an entry describes, as a replay knows them: exactly what it lists, nothing more.
IssueFacts factsFor(const KnownIssue& k) {
  IssueFacts f;
  f.judged = true;
  f.op = k.op == "sdpa" || k.op == "any" ? "aten::_scaled_dot_product_attention_math"
         : k.op == "mha"                 ? "multi_head_attention_forward"
                                         : k.op;
  f.backend = k.backend == "any" ? "math" : k.backend;
  f.phase = k.phase == "any" ? "fwd" : k.phase;
  const json& c = k.conditions;
  if (c.contains("dtype")) f.dtype = c["dtype"][0];
  if (c.contains("mask")) f.mask_dtype = c["mask"] == "present" ? "bool" : "";
  if (c.contains("mask_dtype")) f.mask_dtype = c["mask_dtype"][0].get<std::string>();
  if (c.contains("s_q")) f.s_q = c["s_q"].get<int64_t>();
  if (c.contains("s_kv")) f.s_kv = c["s_kv"].get<int64_t>();
  if (c.contains("s_kv_mod_128")) f.s_kv = 3 * 128 + c["s_kv_mod_128"].get<int64_t>();
  if (c.contains("s_kv_mod_32")) f.s_kv = 5 * 32 + c["s_kv_mod_32"].get<int64_t>();
  if (c.contains("s_kv_mod_128_nonzero")) f.s_kv = c["s_kv_mod_128_nonzero"].get<bool>() ? 257 : 256;
  if (c.contains("row_lse_below")) f.min_row_lse = c["row_lse_below"].get<double>() - 10;
  if (c.contains("head_dim")) f.head_dim = c["head_dim"][0].get<int64_t>();
  if (c.contains("causal")) f.causal = c["causal"].get<bool>();
  if (c.contains("dropout")) f.dropout_p = c["dropout"].get<bool>() ? 0.1 : 0.0;
  if (c.contains("fully_masked_rows")) f.fully_masked_rows = c["fully_masked_rows"].get<bool>() ? 4 : 0;
  if (c.contains("gqa") || c.contains("kv_heads_below")) {
    f.q_heads = 16;
    f.kv_heads = c.contains("kv_heads_below") ? c["kv_heads_below"].get<int64_t>() - 1 : 2;
  }
  if (c.contains("arch")) f.arch = c["arch"][0];
  if (c.contains("qkv_aligned_16")) f.qkv_alignment = c["qkv_aligned_16"].get<bool>() ? 256 : 4;
  if (c.contains("packed")) f.packed = c["packed"].get<bool>();
  if (c.contains("flex_backend")) f.flex_backend = c["flex_backend"][0].get<std::string>();
  for (const auto& [component, constraint] : k.affected.items()) f.versions[component] = versionWithin(constraint);
  std::set<std::string> faulty;
  for (const json& t : k.symptom.value("tensors", json::array())) faulty.insert(t.get<std::string>());
  if (faulty.empty()) faulty.insert(f.phase == "bwd" ? "dQ" : "O");
  const std::string kind = k.symptom.value("kind", "");
  (kind == "wrong" ? f.wrong : kind == "zeros" ? f.zero : f.nonfinite) = faulty;
  return f;
}

TEST(KnownIssues, TheDatabaseIsWellFormed) {
  const auto& issues = database();
  EXPECT_GE(issues.size(), 12u);
  std::set<std::string> ids;
  for (const KnownIssue& k : issues) {
    EXPECT_TRUE(ids.insert(k.id).second) << "duplicate id " << k.id;
    EXPECT_EQ(k.url.rfind("https://github.com/", 0), 0u) << k.id;
    EXPECT_FALSE(k.title.empty()) << k.id;
    EXPECT_FALSE(k.workaround.empty()) << k.id;
    EXPECT_TRUE(k.status == "fixed" || k.status == "open" || k.status == "closed") << k.id << " " << k.status;
    EXPECT_EQ(k.status == "fixed", k.fixed_in.is_object()) << k.id << ": a fixed entry names its fix, no other does";
    EXPECT_TRUE(k.op == "sdpa" || k.op == "mha" || k.op == k.backend) << k.id << " names op " << k.op;
    if (!k.narrower_than.empty()) {
      auto broad =
          std::find_if(issues.begin(), issues.end(), [&](const KnownIssue& b) { return b.id == k.narrower_than; });
      ASSERT_NE(broad, issues.end()) << k.id << " is narrower than an entry that does not exist";
      for (const auto& [name, want] : broad->conditions.items()) {
        EXPECT_EQ(k.conditions.value(name, json()), want) << k.id << " must keep every condition of " << broad->id;
      }
    }
    for (const auto& [name, want] : k.conditions.items()) {
      EXPECT_TRUE(knownConditions().count(name)) << k.id << " lists a condition the matcher does not know: " << name;
    }
    const std::string kind = k.symptom.value("kind", "");
    EXPECT_TRUE(kind == "nan" || kind == "wrong" || kind == "zeros" || kind == "wrong-or-nan") << k.id << " " << kind;
    for (const auto& [component, constraint] : k.affected.items()) {
      EXPECT_TRUE(versionSatisfies(versionWithin(constraint), constraint))
          << k.id << " " << component << " " << constraint;
    }
  }
}

// Conditions no recorded fact decides (known_issues.cpp): an entry with one is at most possible.
std::vector<std::string> neverRecorded(const KnownIssue& k) {
  std::vector<std::string> names;
  for (const char* name : {"build_predates_fix", "mask_mod_abs_difference"}) {
    if (k.conditions.contains(name)) names.push_back(name);
  }
  return names;
}

TEST(KnownIssues, EachEntryMatchesItsOwnConditionsAndNoOther) {
  for (const KnownIssue& k : database()) {
    const IssueFacts f = factsFor(k);
    if (!neverRecorded(k).empty()) {
      // Never a match: a possible one, naming exactly what no fact decides.
      EXPECT_FALSE(matches(k, f)) << k.id;
      std::vector<std::string> undecided = neverRecorded(k);
      std::sort(undecided.begin(), undecided.end());
      auto got = undecidedConditions(k, f);
      ASSERT_TRUE(got.has_value()) << k.id << " is ruled out by the facts it describes";
      std::sort(got->begin(), got->end());
      EXPECT_EQ(*got, undecided) << k.id;
    } else {
      EXPECT_TRUE(matches(k, f)) << k.id << " does not match the facts it describes";
    }
    for (const KnownIssue& other : database()) {
      if (&other == &k || other.id == k.narrower_than) continue;  // a special case names its general report too
      EXPECT_FALSE(matches(other, f)) << other.id << " matches the facts of " << k.id;
    }
  }
}

TEST(KnownIssues, EveryListedConditionMustHoldAndBeKnown) {
  for (const KnownIssue& k : database()) {
    for (const auto& [name, want] : k.conditions.items()) {
      IssueFacts f = factsFor(k);
      // Forget the one fact this condition needs: the entry must no longer match.
      if (name == "dtype") f.dtype.clear();
      else if (name == "mask" || name == "mask_dtype") f.mask_dtype.reset();
      else if (name == "s_q") f.s_q.reset();
      else if (name.rfind("s_kv", 0) == 0) f.s_kv.reset();
      else if (name == "row_lse_below") f.min_row_lse.reset();
      else if (name == "head_dim") f.head_dim.reset();
      else if (name == "causal") f.causal.reset();
      else if (name == "dropout") f.dropout_p.reset();
      else if (name == "fully_masked_rows") f.fully_masked_rows.reset();
      else if (name == "gqa" || name == "kv_heads_below") f.kv_heads.reset();
      else if (name == "arch") f.arch.clear();
      else if (name == "qkv_aligned_16") f.qkv_alignment.reset();
      else if (name == "packed") f.packed.reset();
      else if (name == "flex_backend") f.flex_backend.reset();
      EXPECT_FALSE(matches(k, f)) << k.id << " matched without knowing " << name;
    }
    IssueFacts versions = factsFor(k);
    if (!k.affected.empty()) {
      versions.versions.clear();
      EXPECT_FALSE(matches(k, versions)) << k.id << " matched without knowing the run's versions";
      // Unknown, a version leaves the entry possible, naming it; a known one outside the range rules it out.
      auto undecided = undecidedConditions(k, versions);
      ASSERT_TRUE(undecided.has_value()) << k.id;
      const std::string first = k.affected.begin().key() + " version";
      EXPECT_NE(std::find(undecided->begin(), undecided->end(), first), undecided->end())
          << k.id << " does not name " << first;
    }
  }
  KnownIssue bogus;
  bogus.backend = bogus.phase = "any";
  bogus.conditions = {{"moon_phase", "full"}};
  bogus.symptom = {{"kind", "nan"}};
  IssueFacts f;
  f.nonfinite = {"O"};
  EXPECT_FALSE(matches(bogus, f)) << "a condition the matcher does not know never holds";
}

// What the store alone says of a call: some facts unknown, no verdict against a reference.
TEST(KnownIssues, UnknownFactsMakeAPossibleMatchThatAReplayDecides) {
  auto find = [](const std::string& id) {
    const auto& all = database();
    return std::find_if(all.begin(), all.end(), [&](const KnownIssue& k) { return k.id == id; });
  };
  auto cudnn = find("pytorch#196678");
  ASSERT_NE(cudnn, database().end());
  IssueFacts f = factsFor(*cudnn);
  f.judged = false;
  f.min_row_lse.reset();
  EXPECT_FALSE(matches(*cudnn, f));
  EXPECT_EQ(undecidedConditions(*cudnn, f), std::vector<std::string>{"row_lse_below"});
  // A fully masked row's log-sum-exp is log(0): the condition holds without measuring it.
  f.fully_masked_rows = 3;
  EXPECT_TRUE(matches(*cudnn, f));
  // A known fact that contradicts rules the entry out, however much else is unknown.
  f.s_kv = 128;
  EXPECT_FALSE(undecidedConditions(*cudnn, f).has_value());
  // Unjudged, a silent-wrong entry is undecided for finite outputs and ruled out for a NaN call.
  auto wrong = find("pytorch#191937");
  ASSERT_NE(wrong, database().end());
  IssueFacts w = factsFor(*wrong);
  w.judged = false;
  w.wrong.clear();
  EXPECT_EQ(undecidedConditions(*wrong, w), std::vector<std::string>{"symptom"});
  w.nonfinite = {"O"};
  EXPECT_FALSE(undecidedConditions(*wrong, w).has_value());
}

// A float32 forward on the CPU whose O went non-finite, as replay describes it.
IssueFacts cpuForward(const std::string& op, const std::string& backend, std::optional<std::string> mask_dtype,
                      int64_t fully_masked_rows) {
  IssueFacts f;
  f.op = op;
  f.backend = backend;
  f.phase = "fwd";
  f.dtype = "float32";
  f.mask_dtype = std::move(mask_dtype);
  f.s_q = f.s_kv = 16;
  f.head_dim = 8;
  f.q_heads = f.kv_heads = 4;
  f.causal = false;
  f.fully_masked_rows = fully_masked_rows;
  f.nonfinite = {"O"};
  f.versions["torch"] = "2.13.0+cpu";
  return f;
}

TEST(KnownIssues, AFloat32OverflowOnTheCpuMatchesNothing) {
  IssueFacts f = cpuForward("aten::_scaled_dot_product_flash_attention_for_cpu", "flash_cpu", "", 0);
  f.dropout_p = 0;
  f.min_row_lse = 3.5;
  f.nonfinite.insert("LSE");
  EXPECT_TRUE(matchKnownIssues(f).empty());
}

TEST(KnownIssues, AnMhaRowWithEveryKeyMaskedMatchesTheMhaReport) {
  // What replay says of nn.MultiheadAttention's need_weights path (its mask merged to float32,
  // dropout unknown: the softmax path's capture does not carry it).
  std::vector<IssueMatch> found =
      matchKnownIssues(cpuForward("multi_head_attention_forward", "plain_softmax", "float32", 12));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].issue->id, "pytorch#41508");
  EXPECT_NE(matchText(found[0]).find("need_weights=False"), std::string::npos) << matchText(found[0]);
}

TEST(KnownIssues, HuggingFaceEagerAttentionIsNotNamedAsAnMhaBug) {
  // The same plain softmax over a fully masked row, but in HF's eager attention: the MHA reports
  // (and their need_weights=False workaround) do not apply.
  EXPECT_TRUE(matchKnownIssues(cpuForward("eager_attention_forward", "plain_softmax", "float32", 12)).empty());
}

TEST(KnownIssues, TheCudnnMaskBugNamesItsFixAgainstTheRunsVersion) {
  ReplayResult r;  // the replay of the H200's cuDNN dQ edge, as the engine fills it
  r.op = "aten::_scaled_dot_product_cudnn_attention_backward";
  r.backend = "cudnn";
  r.phase = "bwd";
  r.conditions.query_dtype = "bfloat16";
  r.conditions.mask_dtype = "bool";
  r.conditions.s_q = r.conditions.s_kv = 64;
  r.conditions.head_dim = 64;
  r.conditions.q_heads = r.conditions.kv_heads = 2;
  r.conditions.fully_masked_rows = 4;
  r.conditions.min_row_lse = -120;
  r.captured = BackendRun{};
  r.captured->tensors = {Comparison{.role = "dQ", .verdict = Verdict::kNonFinite},
                         Comparison{.role = "dK", .verdict = Verdict::kOk},
                         Comparison{.role = "dV", .verdict = Verdict::kOk}};
  r.environment = {{"torch", "2.11.0+cu130"}, {"cudnn", "91900"}, {"gpu", "NVIDIA H200 (sm_90)"}};
  std::vector<IssueMatch> found = knownIssuesOf(r);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].issue->id, "pytorch#196678");
  EXPECT_EQ(found[0].fix, "fixed in cuDNN 9.26, this run has 9.19.0");
  EXPECT_EQ(toJson(r)["known_issues"][0]["id"], "pytorch#196678");
  EXPECT_NE(toText(r).find("known issue: matches pytorch#196678"), std::string::npos) << toText(r);

  r.environment["cudnn"] = "92600";
  EXPECT_TRUE(knownIssuesOf(r).empty()) << "a run whose cuDNN has the fix does not match";
  r.environment["cudnn"] = "91900";
  r.injected = "dQ";
  EXPECT_TRUE(knownIssuesOf(r).empty()) << "a NaN --inject planted is nobody's bug";
  r.injected.clear();
  r.captured->tensors[1].verdict = Verdict::kNonFinite;
  EXPECT_TRUE(knownIssuesOf(r).empty()) << "the report names dQ alone; dK NaN as well is another fault";
}

TEST(KnownIssues, VersionsCompareByTheirNumbers) {
  EXPECT_TRUE(versionSatisfies("2.11.0+cu130", ">=2.11"));
  EXPECT_TRUE(versionSatisfies("2.13.0", ">=2.11"));
  EXPECT_FALSE(versionSatisfies("2.10.1", ">=2.11"));
  EXPECT_TRUE(versionSatisfies("9.19.0", "<9.26"));
  EXPECT_FALSE(versionSatisfies("9.26.0", "<9.26"));
  EXPECT_TRUE(versionSatisfies("9.12.3", "==9.12"));
  EXPECT_FALSE(versionSatisfies("9.13.0", "==9.12"));
  EXPECT_TRUE(versionSatisfies("9.20.0", ">=9.15,<9.26"));
  EXPECT_FALSE(versionSatisfies("9.14.0", ">=9.15,<9.26"));
  EXPECT_FALSE(versionSatisfies("", ">=2.11"));
  EXPECT_FALSE(versionSatisfies("2.11", "~2.11")) << "an operator the reader does not know holds for nothing";
  EXPECT_EQ(cudnnVersionText(91900), "9.19.0");
  EXPECT_EQ(cudnnVersionText(8907), "8.9.7");
  EXPECT_EQ(cudnnVersionText(0), "");
  EXPECT_EQ(archOf("NVIDIA H200 (sm_90)"), "sm_90");
  EXPECT_EQ(archOf("NVIDIA H200"), "");
}

}  // namespace
}  // namespace nanprov::replay

namespace nanprov::replay {
namespace {

const KnownIssue& entry(const std::string& id) {
  const auto& all = database();
  auto it = std::find_if(all.begin(), all.end(), [&](const KnownIssue& k) { return k.id == id; });
  EXPECT_NE(it, all.end()) << id;
  static const KnownIssue none;
  return it == all.end() ? none : *it;
}

// A call on an sm_90 GPU whose output `wrong` a replay found finite and wrong.
IssueFacts judgedWrong(const std::string& op, const std::string& backend, const std::string& phase,
                       const std::string& wrong) {
  IssueFacts f;
  f.op = op;
  f.backend = backend;
  f.phase = phase;
  f.judged = true;
  f.wrong = {wrong};
  f.arch = "sm_90";
  return f;
}

// A float32 EFFICIENT forward that went wrong, as a replay of its capture knows it.
IssueFacts efficientFloat32(std::optional<int64_t> qkv_alignment) {
  IssueFacts f = judgedWrong("aten::_scaled_dot_product_efficient_attention", "efficient", "fwd", "O");
  f.dtype = "float32";
  f.qkv_alignment = qkv_alignment;
  f.versions["torch"] = "2.11.0+cu128";
  return f;
}

TEST(KnownIssues, EfficientFloat32MatchesTheMisalignedReadOnlyWhenAViewIsMisaligned) {
  const KnownIssue& n5 = entry("pytorch#183484");
  EXPECT_TRUE(matches(n5, efficientFloat32(4)));    // q at storage offset 1: 4-byte aligned
  EXPECT_FALSE(matches(n5, efficientFloat32(16)));  // 16-byte aligned views read fine
  EXPECT_FALSE(undecidedConditions(n5, efficientFloat32(256)).has_value());
  // A capture from before nanprov kept the alignment: possible, and it says what it lacks.
  EXPECT_EQ(undecidedConditions(n5, efficientFloat32(std::nullopt)), std::vector<std::string>{"qkv_aligned_16"});
  IssueFacts half = efficientFloat32(4);
  half.dtype = "bfloat16";
  EXPECT_FALSE(matches(n5, half));
}

TEST(KnownIssues, CudnnOnACuda12_8BuildMatchesTheIllegalAccessAndNotOn13) {
  const KnownIssue& n6 = entry("pytorch#169849");
  IssueFacts f;
  f.op = "aten::_scaled_dot_product_cudnn_attention";
  f.backend = "cudnn";
  f.phase = "bwd";
  f.s_kv = 261;
  f.nonfinite = {"dQ"};
  f.versions["cuda"] = "12.8";
  EXPECT_TRUE(matches(n6, f));
  f.versions["cuda"] = "13.0";
  EXPECT_FALSE(undecidedConditions(n6, f).has_value());
  // addEnvironment reads the CUDA build from the bootstrap's fact.
  IssueFacts from_meta = f;
  from_meta.versions.clear();
  addEnvironment({{"cuda_build", "12.6"}, {"torch", "2.11.0+cu126"}}, from_meta);
  EXPECT_EQ(from_meta.versions["cuda"], "12.6");
  EXPECT_TRUE(matches(n6, from_meta));
  f.versions.erase("cuda");
  EXPECT_EQ(undecidedConditions(n6, f), std::vector<std::string>{"cuda version"});
  f.versions["cuda"] = "12.8";
  f.s_kv = 256;  // the sequence-length condition of the report
  EXPECT_FALSE(undecidedConditions(n6, f).has_value());
}

// A compiled FlexAttention backward on sm_90 whose dQ the replay found wrong.
IssueFacts flexBackward(const std::string& ptxas) {
  IssueFacts f = judgedWrong("flex_attention", "flex", "bwd", "dQ");
  if (!ptxas.empty()) f.versions["ptxas"] = ptxas;
  return f;
}

TEST(KnownIssues, FlexBackwardWithACuda13PtxasIsAtMostAPossibleMatch) {
  const KnownIssue& n2 = entry("attention-gym#408");
  EXPECT_FALSE(matches(n2, flexBackward("13.0.88")));
  EXPECT_EQ(undecidedConditions(n2, flexBackward("13.0.88")), std::vector<std::string>{"mask_mod_abs_difference"});
  EXPECT_FALSE(undecidedConditions(n2, flexBackward("12.8.93")).has_value()) << "a CUDA 12 ptxas rules it out";
  auto unknown = undecidedConditions(n2, flexBackward(""));
  ASSERT_TRUE(unknown.has_value());
  EXPECT_NE(std::find(unknown->begin(), unknown->end(), "ptxas version"), unknown->end());
  // The possible match reads as such, never as a match.
  auto possible = possibleKnownIssues(flexBackward(""));
  auto it = std::find_if(possible.begin(), possible.end(),
                         [](const IssueMatch& m) { return m.issue->id == "attention-gym#408"; });
  ASSERT_NE(it, possible.end());
  EXPECT_EQ(possibleText(*it, "the capture").rfind("may match attention-gym#408 (", 0), 0u);
  EXPECT_NE(possibleText(*it, "the capture").find("the capture does not say mask_mod_abs_difference, ptxas version"),
            std::string::npos);
  for (const IssueMatch& m : matchKnownIssues(flexBackward("13.0.88"))) EXPECT_NE(m.issue->id, "attention-gym#408");
}

TEST(KnownIssues, FlashAttention4EntriesNeedTheirBackendAndLayout) {
  const KnownIssue& n3 = entry("flash-attention#2563");
  IssueFacts flex = judgedWrong("flex_attention", "flex", "fwd", "O");
  flex.q_heads = 32, flex.kv_heads = 8;
  flex.versions["flash_attn_4"] = "4.0.0b8";
  auto undecided = undecidedConditions(n3, flex);  // BACKEND not recorded
  ASSERT_TRUE(undecided.has_value());
  EXPECT_NE(std::find(undecided->begin(), undecided->end(), "flex_backend"), undecided->end());
  flex.flex_backend = "TRITON";
  EXPECT_FALSE(undecidedConditions(n3, flex).has_value()) << "the Triton backend is not the FA4 kernel";
  flex.flex_backend = "FLASH";
  EXPECT_EQ(undecidedConditions(n3, flex), std::vector<std::string>{"build_predates_fix"});

  const KnownIssue& n4 = entry("flash-attention#2192");
  IssueFacts fa4 = judgedWrong("fa4", "fa4", "fwd", "O");
  fa4.packed = false;
  EXPECT_FALSE(undecidedConditions(n4, fa4).has_value()) << "dense FA4 calls are not the varlen bug";
  fa4.packed = true;
  EXPECT_EQ(undecidedConditions(n4, fa4), std::vector<std::string>{"build_predates_fix"});
}

TEST(KnownIssues, TheLoadedCudnnDecidesOverTheOneTorchWasBuiltWith) {
  IssueFacts f;
  addEnvironment({{"cudnn", "91900"},
                  {"cudnn_loaded", "92600"},
                  {"triton", "3.8.0"},
                  {"ptxas", "13.0.88"},
                  {"flash_attn_4", "4.0.0b8"}},
                 f);
  EXPECT_EQ(f.versions["cudnn"], "9.26.0");
  EXPECT_EQ(f.versions["triton"], "3.8.0");
  EXPECT_EQ(f.versions["ptxas"], "13.0.88");
  EXPECT_EQ(f.versions["flash_attn_4"], "4.0.0b8");
  IssueFacts built;
  addEnvironment({{"cudnn", "91900"}}, built);
  EXPECT_EQ(built.versions["cudnn"], "9.19.0");
  EXPECT_EQ(built.versions.count("cuda"), 0u) << "a fact not handed over stays unknown";
}

}  // namespace
}  // namespace nanprov::replay
