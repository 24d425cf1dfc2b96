#include "cli/audit_findings.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <stdexcept>

#include "base/numbers.h"
#include "base/text.h"
#include "cli/edges.h"
#include "cli/report.h"
#include "cli/terminal_text.h"
#include "store/audit_file.h"
#include "store/small_file.h"

namespace nanprov {
namespace {

using nlohmann::json;

// The report's entry for one finding: the call by name and number, and the engine's judgement.
json findingOf(const CaptureRecord& capture, const std::string& path, const json& doc) {
  auto name = parseCallName(doc.value("call", ""));
  json tensors = doc.value("tensors", json::object());
  if (!tensors.is_object()) throw std::runtime_error("its tensors are not an object");
  for (const auto& [role, c] : tensors.items()) {
    if (!c.is_object()) throw std::runtime_error("tensor " + role + " is not an object");
  }
  const int64_t step = parseInteger(doc.value("step", ""), 0, INT64_MAX).value_or(-1);
  return {{"rank", name ? name->rank : capture.rank},
          {"layer", name ? json(name->layer) : json(nullptr)},
          {"call", name ? json(name->call) : json(nullptr)},
          {"name", doc.value("call", "")},
          {"step", step},
          {"phase", doc.value("phase", "")},
          {"op", doc.value("op", "")},
          {"backend", doc.value("backend", "")},
          {"kernel", doc.value("kernel", json(nullptr))},
          {"verdict", doc.value("verdict", json(nullptr))},
          {"tensors", tensors},
          {"conditions", doc.value("conditions", json(nullptr))},
          {"conditions_text", doc.value("conditions_text", "")},
          {"slice", doc.value("slice", json(nullptr))},
          // A backward's O and LSE from its forward, judged; "received_wrong" names those that
          // were already wrong (then the fault is in the forward, upstream of this call).
          {"received", doc.value("received", json(nullptr))},
          {"received_wrong", doc.value("received_wrong", json(nullptr))},
          {"capture", path}};
}

}  // namespace

AuditSummary readAudit(const RunData& run) {
  AuditSummary a;
  json settings = readJsonFile((std::filesystem::path(run.dir) / "run.json").string());
  if (settings.is_object() && settings.contains("audit") && settings["audit"].is_object()) {
    a.on = settings["audit"].value("on", false);
    a.warn_only = settings["audit"].value("warn_only", false);
  }
  for (const CaptureRecord& c : run.captures) {
    if (c.trigger != "audit") continue;
    a.on = true;
    if (c.path.empty()) {
      ++a.not_audited[c.skipped];
      continue;
    }
    a.bytes += c.bytes;
    const std::string path = capturePath(run, c);
    auto doc = readAuditFile(path);
    if (!doc.ok()) {
      ++a.not_audited[doc.status().message()];
      continue;
    }
    if (!*doc) {
      ++a.unjudged;
      continue;
    }
    // The file is the engine's, but it sits in a directory anyone can edit: a field of the wrong
    // type makes it unreadable, counted as such, never a failed report.
    try {
      const json& d = **doc;
      a.seconds += d.value("seconds", 0.0);
      if (!d.value("audited", false)) {
        ++a.not_audited[d.value("not_audited_why", std::string("unknown"))];
        continue;
      }
      if (d.value("finding", false)) a.findings.push_back(findingOf(c, path, d));
      ++a.audited;
    } catch (const std::exception& e) {
      ++a.not_audited[auditFilePath(path) + " is not an audit result (" + e.what() + "); delete it and run nanprov replay " +
                      path + " --audit"];
    }
  }
  std::stable_sort(a.findings.begin(), a.findings.end(), [](const json& x, const json& y) {
    return std::make_tuple(x["step"].get<int64_t>(), x["rank"].get<int>()) <
           std::make_tuple(y["step"].get<int64_t>(), y["rank"].get<int>());
  });
  return a;
}

json auditCostJson(const AuditSummary& a) {
  json not_audited = json::array();
  for (const auto& [why, n] : a.not_audited) not_audited.push_back({{"why", why}, {"calls", n}});
  return {{"on", a.on},           {"warn_only", a.warn_only},   {"calls", a.audited},
          {"findings", a.findings.size()}, {"seconds", a.seconds}, {"bytes", a.bytes},
          {"not_audited", not_audited},    {"unjudged", a.unjudged}};
}

std::string auditText(const AuditSummary& a) {
  if (!a.on) return "";
  std::string out;
  for (const json& f : forTerminal(json(a.findings))) {
    std::string step = f["step"].is_number_integer() ? std::to_string(f["step"].get<int64_t>()) : "?";
    out += "  audit finding " + f.value("name", "?") + " (step " + step + ", " +
           f.value("phase", "") + ", " + f.value("backend", "") + "): " + f.value("verdict", "?") + " against the float64 reference\n";
    for (const auto& [role, c] : f["tensors"].items()) {
      if (c.value("verdict", "ok") == "ok") continue;
      std::string where = c.value("all_zero_where", json(nullptr)).is_string() ? c["all_zero_where"].get<std::string>()
                          : c.value("nonfinite_where", json(nullptr)).is_string() ? c["nonfinite_where"].get<std::string>()
                                                                                  : "";
      out += "    " + role + " " + c.value("verdict", "") + ": max error " + shortNumber(c.value("max_abs_err", 0.0)) +
             " (yardstick " + shortNumber(c.value("yardstick_max_err", 0.0)) + "), cosine " + shortNumber(c.value("cosine", 0.0)) +
             (where.empty() ? "" : ", " + where) + "\n";
    }
    if (f["received_wrong"].is_string() && !f["received_wrong"].get<std::string>().empty()) {
      out += "    its inputs from the forward were already wrong (" + f["received_wrong"].get<std::string>() +
             "): the fault is upstream, in the forward\n";
    }
    if (f["kernel"].is_string()) out += "    kernel " + f["kernel"].get<std::string>() + "\n";
    out += "    conditions: " + f.value("conditions_text", std::string()) + "\n";
    if (f["slice"].is_string()) out += "    audited on a slice: " + f["slice"].get<std::string>() + "\n";
    out += "    captured: nanprov replay " + f.value("capture", "") + "\n";
  }
  out += "  audit: " + std::to_string(a.audited) + (a.audited == 1 ? " call" : " calls") + " judged against the float64 reference, " +
         std::to_string(a.findings.size()) + (a.findings.size() == 1 ? " finding" : " findings") + " (" +
         shortNumber(a.seconds) + " s judging, " + shortNumber(static_cast<double>(a.bytes) / (1 << 20)) + " MiB captured)" +
         (a.warn_only && !a.findings.empty() ? ", warn only" : "") + "\n";
  for (const auto& [why, n] : a.not_audited) out += "    " + std::to_string(n) + " not audited: " + printable(why) + "\n";
  if (a.unjudged) out += "    " + std::to_string(a.unjudged) + " audit captures not judged yet\n";
  return out;
}

}  // namespace nanprov
