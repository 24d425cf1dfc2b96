#include "report/audit_findings.h"

#include <algorithm>
#include <climits>
#include <set>
#include <stdexcept>
#include <tuple>

#include "base/numbers.h"
#include "base/text.h"
#include "report/edges.h"
#include "store/audit_file.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

using nlohmann::json;

// One finding, typed. A field of the wrong type throws: the caller counts the file as unreadable.
AuditFinding findingOf(const CaptureRecord& capture, const std::string& path, const json& doc) {
  auto name = parseCallName(doc.value("call", ""));
  json tensors = doc.value("tensors", json::object());
  if (!tensors.is_object()) throw std::runtime_error("its tensors are not an object");
  for (const auto& [role, c] : tensors.items()) {
    if (!c.is_object()) throw std::runtime_error("tensor " + role + " is not an object");
  }
  auto nullableText = [&](const char* key) {
    const json v = doc.value(key, json(nullptr));
    return v.is_null() ? std::nullopt : std::optional<std::string>(v.get<std::string>());
  };
  return {.rank = name ? name->rank : capture.rank,
          .layer = name ? std::optional<int64_t>(name->layer) : std::nullopt,
          .call = name ? std::optional<int64_t>(name->call) : std::nullopt,
          .name = doc.value("call", ""),
          .step = parseInteger(doc.value("step", ""), 0, INT64_MAX).value_or(-1),
          .phase = doc.value("phase", ""),
          .op = doc.value("op", ""),
          .backend = doc.value("backend", ""),
          .kernel = nullableText("kernel"),
          .verdict = nullableText("verdict"),
          .tensors = judgementsOf(tensors),
          .conditions_text = doc.value("conditions_text", ""),
          .slice = nullableText("slice"),
          .received_wrong = nullableText("received_wrong"),
          // The public bugs the judgement matched (replay/known_issues.h).
          .known_issues = knownIssueNotesOf(doc.value("known_issues", json::array())),
          .capture = path,
          .tensors_as_written = tensors,
          .received_as_written = doc.value("received", json(nullptr)),
          .conditions_as_written = doc.value("conditions", json(nullptr))};
}

}  // namespace

AuditSummary readAudit(const store::RunData& run) {
  AuditSummary a;
  a.on = run.settings.audit.on;
  a.warn_only = run.settings.audit.warn_only;
  a.coverage.every_steps = run.settings.audit.every_steps;
  a.coverage.budget_percent = run.settings.audit.budget_percent;
  for (const store::RankInfo& r : run.ranks) {
    // Counted by the probes' capture policy.
    if (const std::optional<AuditRotation>& rotation = r.counters.audit_rotation) {
      a.coverage.rotations += rotation->rotations;
      a.coverage.held_back += rotation->held_back;
      a.coverage.regime_changes += rotation->regime_changes;
    }
  }
  std::map<std::tuple<int, int64_t, std::string>, AuditCoverage::Key> keys;
  auto keyOf = [&](const CaptureRecord& c) -> AuditCoverage::Key* {
    if (c.layer < 0) return nullptr;               // its call row never reached the store
    const std::string phase = phaseName(c.phase);  // keyed by its name: the coverage lists "bwd" before "fwd"
    AuditCoverage::Key& k = keys[{c.rank, c.layer, phase}];
    k.rank = c.rank, k.layer = c.layer, k.phase = phase;
    return &k;
  };
  auto notJudged = [&](const CaptureRecord& c, const std::string& why) {
    if (AuditCoverage::Key* k = keyOf(c)) ++k->not_judged[why];
  };
  for (const CaptureRecord& c : run.captures) {
    if (c.trigger != CaptureTrigger::kAudit) continue;
    a.on = true;
    if (c.path.empty()) {
      ++a.not_audited[c.skipped];
      notJudged(c, c.skipped);
      continue;
    }
    a.bytes += c.bytes;
    const std::string path = run.capturePath(c);
    auto doc = store::readAuditFile(path);
    if (!doc.ok()) {
      ++a.not_audited[doc.status().message()];
      notJudged(c, doc.status().message());
      continue;
    }
    if (!*doc) {
      ++a.unjudged;
      notJudged(c, "not judged yet");
      continue;
    }
    // The file is the engine's, but it sits in a directory anyone can edit: a field of the wrong
    // type makes it unreadable, counted as such, never a failed report.
    try {
      const json& d = **doc;
      a.seconds += d.value("seconds", 0.0);
      if (!d.value("audited", false)) {
        ++a.not_audited[d.value("not_audited_why", std::string("unknown"))];
        notJudged(c, d.value("not_audited_why", std::string("unknown")));
        continue;
      }
      if (d.value("finding", false)) a.findings.push_back(findingOf(c, path, d));
      if (d.value("verdict", json(nullptr)) == "suspect") ++a.suspect;
      ++a.audited;
      if (AuditCoverage::Key* k = keyOf(c)) {
        ++k->judged;
        k->last_step = std::max(k->last_step, c.step);
        k->judged_steps.insert(c.step);
      }
    } catch (const std::exception& e) {
      ++a.not_audited[store::auditFilePath(path) + " is not an audit result (" + e.what() +
                      "); delete it and run nanprov replay " + path + " --audit"];
    }
  }
  // The regimes each key met, as the probes counted them: one is judged where a judgement of its
  // key exists at the step it was last taken at; taken with none, or never taken, it is not.
  for (const store::RankInfo& r : run.ranks) {
    for (const auto& [slot, regime] : r.counters.audit_regimes) {
      AuditCoverage::Key& k = keys[{r.rank, regime.layer, phaseName(regime.phase)}];
      k.rank = r.rank, k.layer = regime.layer, k.phase = phaseName(regime.phase);
      AuditCoverage::Key::Regime seen{.conditions = regime.conditions,
                                      .first_seen = regime.first_seen,
                                      .last_seen = regime.last_seen,
                                      .calls = regime.calls};
      if (regime.last_judged >= 0) {
        (k.judged_steps.contains(regime.last_judged) ? seen.judged_at : seen.taken_at) = regime.last_judged;
      }
      ++a.coverage.regimes_seen;
      if (seen.judged()) ++a.coverage.regimes_judged;
      k.regimes.push_back(std::move(seen));
    }
  }
  for (auto& [where, k] : keys) {
    std::stable_sort(k.regimes.begin(), k.regimes.end(),
                     [](const auto& x, const auto& y) { return x.first_seen < y.first_seen; });
    a.coverage.keys.push_back(std::move(k));
  }
  std::stable_sort(a.findings.begin(), a.findings.end(), [](const AuditFinding& x, const AuditFinding& y) {
    return std::tie(x.step, x.rank) < std::tie(y.step, y.rank);
  });
  return a;
}

namespace {

json stepOrNull(const std::optional<int64_t>& step) { return step ? json(*step) : json(nullptr); }

json regimeJson(const AuditCoverage::Key::Regime& r) {
  return {{"conditions", r.conditions}, {"first_seen", r.first_seen},           {"last_seen", r.last_seen},
          {"calls", r.calls},           {"judged_at", stepOrNull(r.judged_at)}, {"taken_at", stepOrNull(r.taken_at)}};
}

// Why a key's calls were met and not judged, its reasons joined ("" when none was said).
std::string notJudgedWhy(const AuditCoverage::Key& k) {
  std::string why;
  for (const auto& [reason, n] : k.not_judged) why += (why.empty() ? "" : "; ") + reason;
  return why;
}

// Why a regime was not judged, in words: taken and not judged, or never taken (its key's reasons).
std::string regimeNotJudgedWhy(const AuditCoverage::Key& k, const AuditCoverage::Key::Regime& r) {
  const std::string why = notJudgedWhy(k);
  if (r.taken_at)
    return "taken at step " + std::to_string(*r.taken_at) + ", with no judgement" +
           (why.empty() ? "" : " (" + why + ")");
  return why.empty() ? "never taken to be judged" : "never judged: " + why;
}

json coverageJson(const AuditSummary& a) {
  std::set<int64_t> layers;
  json per_layer = json::array(), never = json::array(), regimes_not_judged = json::array();
  for (const AuditCoverage::Key& k : a.coverage.keys) {
    layers.insert(k.layer);
    json regimes = json::array();
    for (const AuditCoverage::Key::Regime& r : k.regimes) {
      regimes.push_back(regimeJson(r));
      if (r.judged()) continue;
      json late = regimeJson(r);
      late.update({{"rank", k.rank}, {"layer", k.layer}, {"phase", k.phase}, {"why", regimeNotJudgedWhy(k, r)}});
      regimes_not_judged.push_back(std::move(late));
    }
    if (k.judged > 0) {
      per_layer.push_back({{"rank", k.rank},
                           {"layer", k.layer},
                           {"phase", k.phase},
                           {"judged", k.judged},
                           {"last_step", k.last_step},
                           {"regimes", std::move(regimes)}});
      continue;
    }
    never.push_back({{"rank", k.rank}, {"layer", k.layer}, {"phase", k.phase}, {"why", notJudgedWhy(k)}});
  }
  return {
      {"layers", layers},
      {"calls_judged", a.audited},
      {"per_layer", per_layer},
      {"never_judged", never},
      {"regimes",
       {{"seen", a.coverage.regimes_seen}, {"judged", a.coverage.regimes_judged}, {"not_judged", regimes_not_judged}}},
      {"rotation",
       {{"every_steps", a.coverage.every_steps},
        {"budget_percent", a.coverage.budget_percent},
        {"rotations", a.coverage.rotations},
        {"held_back", a.coverage.held_back},
        {"regime_changes", a.coverage.regime_changes}}}};
}

// "0-3, 5, 7-8"
std::string rangesText(const std::set<int64_t>& values) {
  std::string out;
  for (auto it = values.begin(); it != values.end();) {
    int64_t first = *it, last = *it;
    while (++it != values.end() && *it == last + 1) last = *it;
    out += (out.empty() ? "" : ", ") + std::to_string(first) + (last > first ? "-" + std::to_string(last) : "");
  }
  return out;
}

// The coverage lines under the audit's totals: what was judged, how recently, and what never was.
std::string coverageText(const AuditSummary& a) {
  const AuditCoverage& cov = a.coverage;
  if (cov.keys.empty()) return "";
  std::map<int, std::set<int64_t>> judged_layers;    // rank → layers with every phase judged
  std::map<int, std::map<int64_t, int64_t>> oldest;  // rank → layer → the older of its phases' last steps
  std::string never;
  for (const AuditCoverage::Key& k : cov.keys) {
    if (k.judged == 0) {
      const std::string why = notJudgedWhy(k);
      never += "    never judged: rank " + std::to_string(k.rank) + " layer " + std::to_string(k.layer) + " " +
               k.phase + (why.empty() ? "" : " (" + printable(why) + ")") + "\n";
      continue;
    }
    auto [it, first] = oldest[k.rank].emplace(k.layer, k.last_step);
    if (!first) it->second = std::min(it->second, k.last_step);
  }
  std::string out;
  for (const auto& [rank, layers] : oldest) {
    std::set<int64_t> judged;
    std::string last;
    for (const auto& [layer, step] : layers) {
      judged.insert(layer);
      last += (last.empty() ? "" : ", ") + std::to_string(layer) + " at " + std::to_string(step);
    }
    out += "    coverage, rank " + std::to_string(rank) + ": layers " + rangesText(judged) +
           " judged; last judged (layer at step): " + last + "\n";
  }
  if (cov.every_steps > 0) {
    out += "    every call of every " + std::to_string(cov.every_steps) + (cov.every_steps == 1 ? "" : "th") +
           " step judged (--audit-every)\n";
  } else if (const int64_t steps = cov.rotations + cov.held_back; steps > 0) {
    size_t layers = 0;
    for (const auto& [rank, of_rank] : oldest) layers = std::max(layers, of_rank.size());
    out += "    rotation: ran at " + std::to_string(cov.rotations) + " of " + std::to_string(steps) +
           " steps after the first pass";
    if (cov.rotations > 0) {
      const int64_t every = (static_cast<int64_t>(layers) * steps + cov.rotations - 1) / cov.rotations;
      out +=
          ", so each layer was judged again about every " + std::to_string(every) + (every == 1 ? " step" : " steps");
    }
    if (cov.held_back > 0) {
      out += "; --audit-budget " + shortNumber(cov.budget_percent) + "% held it back at " +
             std::to_string(cov.held_back) + " (it counts the judge's time and the training thread's copies)";
    }
    out += "\n";
  }
  if (cov.regime_changes > 0) {
    out += "    judged again when their conditions changed: " + std::to_string(cov.regime_changes) +
           (cov.regime_changes == 1 ? " call" : " calls") +
           " (a mask value, fully masked rows, an LSE past -88.7, or logits or outputs tenfold)\n";
  }
  if (cov.regimes_seen > 0) {
    out += "    regimes of conditions: " + std::to_string(cov.regimes_seen) + " seen, " +
           std::to_string(cov.regimes_judged) + " judged (per layer and phase, in report --json)\n";
  }
  for (const AuditCoverage::Key& k : cov.keys) {
    for (const AuditCoverage::Key::Regime& r : k.regimes) {
      if (r.judged()) continue;
      out += "    regime not judged: rank " + std::to_string(k.rank) + " layer " + std::to_string(k.layer) + " " +
             k.phase + ", " + printable(r.conditions) + " (steps " + std::to_string(r.first_seen) +
             (r.last_seen > r.first_seen ? "-" + std::to_string(r.last_seen) : "") + ", " + std::to_string(r.calls) +
             (r.calls == 1 ? " call" : " calls") + "): " + printable(regimeNotJudgedWhy(k, r)) + "\n";
    }
  }
  return out + never;
}

}  // namespace

json auditFindingsJson(const AuditSummary& a) {
  json findings = json::array();
  for (const AuditFinding& f : a.findings) {
    auto orNull = [](const auto& v) { return v ? json(*v) : json(nullptr); };
    findings.push_back({{"rank", f.rank},
                        {"layer", orNull(f.layer)},
                        {"call", orNull(f.call)},
                        {"name", f.name},
                        {"step", f.step},
                        {"phase", f.phase},
                        {"op", f.op},
                        {"backend", f.backend},
                        {"kernel", orNull(f.kernel)},
                        {"verdict", orNull(f.verdict)},
                        {"tensors", f.tensors_as_written},
                        {"conditions", f.conditions_as_written},
                        {"conditions_text", f.conditions_text},
                        {"slice", orNull(f.slice)},
                        {"received", f.received_as_written},
                        {"received_wrong", orNull(f.received_wrong)},
                        {"known_issues", knownIssuesJson(f.known_issues)},
                        {"capture", f.capture}});
  }
  return findings;
}

json auditCostJson(const AuditSummary& a) {
  json not_audited = json::array();
  for (const auto& [why, n] : a.not_audited) not_audited.push_back({{"why", why}, {"calls", n}});
  return {{"on", a.on},
          {"warn_only", a.warn_only},
          {"calls", a.audited},
          {"findings", a.findings.size()},
          {"seconds", a.seconds},
          {"bytes", a.bytes},
          {"suspect", a.suspect},
          {"not_audited", not_audited},
          {"unjudged", a.unjudged},
          {"coverage", coverageJson(a)}};
}

std::string auditText(const AuditSummary& a) {
  if (!a.on) return "";
  std::string out;
  for (const AuditFinding& f : a.findings) {
    out += "  audit finding " + f.name + " (step " + std::to_string(f.step) + ", " + f.phase + ", " + f.backend +
           "): " + f.verdict.value_or("?") + " against the float64 reference\n";
    for (const TensorJudgement& t : f.tensors) {
      if (t.verdict == "ok") continue;
      std::string where = !t.all_zero_where.empty() ? t.all_zero_where : t.nonfinite_where;
      out += "    " + t.role + " " + t.verdict + ": max error " + shortNumber(t.max_abs_err.value_or(0)) +
             " (yardstick " + shortNumber(t.yardstick_max_err.value_or(0)) + "), cosine " +
             shortNumber(t.cosine.value_or(0)) + (where.empty() ? "" : ", " + where) + "\n";
    }
    if (f.received_wrong && !f.received_wrong->empty()) {
      out += "    its inputs from the forward were already wrong (" + *f.received_wrong +
             "): the fault is upstream, in the forward\n";
    }
    if (f.kernel) out += "    kernel " + *f.kernel + "\n";
    out += "    conditions: " + f.conditions_text + "\n";
    for (const KnownIssueNote& k : f.known_issues) {
      out += "    known issue: " + k.id + " (" + k.title + "); " + k.fix +
             (k.workaround.empty() ? "" : "; workaround: " + k.workaround) + "\n";
    }
    if (f.slice) out += "    audited on a slice: " + *f.slice + "\n";
    out += "    captured: nanprov replay " + f.capture + "\n";
  }
  out += "  audit: " + std::to_string(a.audited) + (a.audited == 1 ? " call" : " calls") +
         " judged against the float64 reference, " + std::to_string(a.findings.size()) +
         (a.findings.size() == 1 ? " finding" : " findings") + " (" + shortNumber(a.seconds) + " s judging, " +
         shortNumber(static_cast<double>(a.bytes) / (1 << 20)) + " MiB captured)" +
         (a.warn_only && !a.findings.empty() ? ", warn only" : "") + "\n";
  if (a.suspect) {
    out +=
        "    " + std::to_string(a.suspect) + (a.suspect == 1 ? " call" : " calls") +
        " within only PyTorch's looser tolerances (suspect, not findings; their judgements are kept as *.audit.json)\n";
  }
  for (const auto& [why, n] : a.not_audited)
    out += "    " + std::to_string(n) + " not audited: " + printable(why) + "\n";
  if (a.unjudged) out += "    " + std::to_string(a.unjudged) + " audit captures not judged yet\n";
  return out + coverageText(a);
}

}  // namespace nanprov::report
