#include "report/judgements.h"

namespace nanprov::report {
namespace {

using nlohmann::json;

std::optional<double> number(const json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_number() ? std::optional<double>(it->get<double>()) : std::nullopt;
}

std::string text(const json& doc, const char* key, const std::string& none = "") {
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : none;
}

}  // namespace

std::vector<TensorJudgement> judgementsOf(const json& tensors) {
  std::vector<TensorJudgement> out;
  if (!tensors.is_object()) return out;
  for (const auto& [role, c] : tensors.items()) {
    if (!c.is_object()) continue;
    auto nonfinite = c.find("nonfinite");
    out.push_back({.role = role,
                   .verdict = text(c, "verdict", "?"),
                   .max_abs_err = number(c, "max_abs_err"),
                   .yardstick_max_err = number(c, "yardstick_max_err"),
                   .floor = number(c, "floor"),
                   .rel_l2 = number(c, "rel_l2"),
                   .cosine = number(c, "cosine"),
                   .nonfinite = nonfinite != c.end() && nonfinite->is_number_integer() ? nonfinite->get<int64_t>() : 0,
                   .nonfinite_where = text(c, "nonfinite_where"),
                   .all_zero_where = text(c, "all_zero_where")});
  }
  return out;
}

std::vector<KnownIssueNote> knownIssueNotesOf(const json& issues) {
  std::vector<KnownIssueNote> out;
  if (!issues.is_array()) return out;
  for (const json& k : issues) {
    if (!k.is_object()) continue;
    KnownIssueNote note;
    bool text_only = true;
    for (auto [field, into] : {std::pair{"id", &note.id},
                               {"url", &note.url},
                               {"title", &note.title},
                               {"fix", &note.fix},
                               {"status", &note.status},
                               {"workaround", &note.workaround}}) {
      auto it = k.find(field);
      if (it == k.end()) continue;
      if (!it->is_string()) text_only = false;
      else *into = it->get<std::string>();
    }
    if (text_only) out.push_back(std::move(note));
  }
  return out;
}

json knownIssuesJson(const std::vector<KnownIssueNote>& issues) {
  json out = json::array();
  for (const KnownIssueNote& k : issues) {
    out.push_back({{"id", k.id},
                   {"url", k.url},
                   {"title", k.title},
                   {"fix", k.fix},
                   {"status", k.status},
                   {"workaround", k.workaround}});
  }
  return out;
}

const TensorJudgement* judgementOf(const std::vector<TensorJudgement>& judgements, const std::string& role) {
  for (const TensorJudgement& j : judgements) {
    if (j.role == role) return &j;
  }
  return nullptr;
}

}  // namespace nanprov::report
