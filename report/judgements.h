// What the replay engine judged, read back typed: a tensor's comparison with the float64
// reference and the public bugs a judgement named. The engine writes them (replay/replay_render.cpp:
// comparisonJson, matchesJson) into an audit's CAPTURE.audit.json and a kept CAPTURE.replay.json;
// the report reads both through here, so the text and the page never dig in a document.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace nanprov::report {

struct TensorJudgement {
  std::string role;
  std::string verdict;  // "ok", "suspect", "silent-wrong", "all-zero", "non-finite"...; "?" when none was written
  // JSON has no NaN: a measure the engine could not take is written null, and read as none.
  std::optional<double> max_abs_err, yardstick_max_err, floor, rel_l2, cosine;
  int64_t nonfinite = 0;
  std::string nonfinite_where, all_zero_where;  // "" when none
};

// A known issue as a judgement named it (replay/known_issues.h).
struct KnownIssueNote {
  std::string id, url, title, fix, status, workaround;
};

// {role: comparison} in the engine's order (by role name). A comparison that is not an object
// is left out: a page shows no measure it cannot read.
std::vector<TensorJudgement> judgementsOf(const nlohmann::json& tensors);
// Entries whose fields are all text, and only those fields; anything else is not shown.
std::vector<KnownIssueNote> knownIssueNotesOf(const nlohmann::json& issues);
// The notes as the engine writes them (replay::matchesJson's fields): what knownIssueNotesOf reads.
nlohmann::json knownIssuesJson(const std::vector<KnownIssueNote>& issues);

// The judgement of `role`, or nullptr when the list has none.
const TensorJudgement* judgementOf(const std::vector<TensorJudgement>& judgements, const std::string& role);

}  // namespace nanprov::report
