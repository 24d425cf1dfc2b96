// `nanprov known-issues [--json]`: the public attention bugs nanprov recognises, with the
// conditions that trigger each, its symptom, the versions it affects and its fix. `report` and
// `replay` name an entry only when every one of its conditions holds for the call.
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/json_text.h"
#include "cli/commands.h"
#include "replay/known_issues.h"

namespace nanprov::cli {
namespace {
using nlohmann::json;

// "bfloat16|float16" for a list of alternatives (`sep` between them), the value itself otherwise.
std::string valueText(const json& value, const char* sep = "|") {
  if (!value.is_array()) return value.is_string() ? value.get<std::string>() : value.dump();
  std::string out;
  for (const json& v : value) out += (out.empty() ? "" : sep) + valueText(v);
  return out;
}

// "dtype bfloat16|float16, mask present, s_kv_mod_128 64": the conditions as one line.
std::string conditionsText(const json& conditions) {
  std::string out;
  for (const auto& [name, want] : conditions.items()) out += (out.empty() ? "" : ", ") + name + " " + valueText(want);
  return out.empty() ? "none" : out;
}

std::string versionsText(const json& versions) {
  std::string out;
  if (!versions.is_object()) return "";
  for (const auto& [component, text] : versions.items())
    out += (out.empty() ? "" : ", ") + component + " " + valueText(text);
  return out;
}

}  // namespace

void addKnownIssuesCommand(CLI::App& app, int* exit_code) {
  auto json_output = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("known-issues", "List the public attention bugs report and replay recognise");
  cmd->footer(
      "Examples:\n"
      "  nanprov known-issues\n"
      "  nanprov known-issues --json | jq '.[] | select(.backend == \"cudnn\") | .id'\n\n"
      "An entry is named in `report` and `replay` only when the call ran on its backend and phase,\n"
      "shows its symptom, every listed condition holds for what nanprov measured, and the run's\n"
      "versions are among those it affects: a condition nanprov cannot know means no match.");
  addJsonFlag(cmd, json_output.get());
  cmd->callback([json_output, exit_code] {
    const auto& issues = replay::knownIssues();
    if (!issues.ok()) return void(*exit_code = fail("known-issues", issues.status()));
    if (*json_output) {
      json rows = json::array();
      for (const replay::KnownIssue& k : issues.value()) rows.push_back(replay::issueJson(k));
      std::cout << jsonText(rows, 2) << "\n";
      return void(*exit_code = kClean);
    }
    for (const replay::KnownIssue& k : issues.value()) {
      std::cout << k.id << "  " << k.title << "\n"
                << "  " << k.backend << " " << k.phase << "; symptom " << k.symptom.value("kind", "?");
      const json tensors = k.symptom.value("tensors", json::array());
      if (!tensors.empty()) std::cout << " in " << valueText(tensors, ", ");
      std::cout << "\n  when " << conditionsText(k.conditions) << "\n";
      if (std::string v = versionsText(k.affected); !v.empty()) std::cout << "  affects " << v << "\n";
      std::cout << "  " << (k.fixed_in.is_object() ? "fixed in " + versionsText(k.fixed_in) : k.status) << "; "
                << k.workaround << "\n  " << k.url << "\n\n";
    }
    std::cout << issues->size() << " known issues (nanprov known-issues --json for every field)\n";
    *exit_code = kClean;
  });
}

}  // namespace nanprov::cli
