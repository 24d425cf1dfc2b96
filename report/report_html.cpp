#include "report/report_html.h"

#include <algorithm>

#include "base/records/call_name.h"
#include "base/records/roles.h"
#include "base/text.h"
#include "report/report_text.h"
#include "report/trend_plots.h"

namespace nanprov::report {
namespace {

// HTML's special characters as entities: safe in element text and in quoted attributes alike.
std::string escapedHtml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// A text from outside nanprov (store, capture, command line) as the page shows it: control
// characters written as escapes, as the text report prints them, then escaped for HTML.
std::string shown(std::string_view text) { return escapedHtml(printable(text)); }

// A tooltip: lines already escaped, joined with a newline the title attribute keeps.
std::string tooltip(const std::vector<std::string>& lines) { return joined(lines, "&#10;"); }

std::string row(const std::string& header, const std::string& value) {
  return "<tr><th>" + header + "</th><td>" + value + "</td></tr>\n";
}

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1240px;padding:16px 20px;color:#202124}
h1{font-size:19px;margin:4px 0;font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-word}
h2{font-size:16px;margin:22px 0 8px;border-bottom:1px solid #dadce0;padding-bottom:3px}
h3{font-size:14px;margin:14px 0 6px}
code,.mono,td.name{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px;word-break:break-all}
td.name{white-space:nowrap;word-break:normal}
pre{white-space:pre-wrap;word-break:break-all}
.ranks{display:flex;flex-wrap:wrap;gap:4px 48px;align-items:flex-start}.rank{max-width:100%}
.verdict{border-radius:6px;padding:12px 16px;color:#fff;background:#5f6368}
.verdict .sub{opacity:.92;margin:2px 0 0}
.outcome-clean{background:#188038}.outcome-partial{background:#b06000}.outcome-unattributed{background:#a50e0e}.outcome-edge{background:#c5221f}
.outcome-outside_attention{background:#b3261e}.outcome-nothing_checked{background:#5f6368}.outcome-audit_finding{background:#1967d2}
nav{margin:8px 0;font-size:13px}nav a{margin-right:12px;color:#1a73e8}
table{border-collapse:collapse}
table.facts th,table.list th{text-align:left;font-weight:600;padding:3px 12px 3px 0;vertical-align:top;white-space:nowrap}
table.facts td,table.list td{padding:3px 12px 3px 0;vertical-align:top}
table.list{margin:4px 0}table.list tr+tr td{border-top:1px solid #eee}
tr.bad td{color:#b3261e;font-weight:600}
.note{color:#5f6368}
.box{border:1px solid #dadce0;border-radius:6px;padding:8px 14px;margin:8px 0}
.scroll{overflow-x:auto;padding-bottom:4px}
table.picture{border-collapse:separate;border-spacing:1px;margin:2px 0 10px}
table.picture caption{text-align:left;font-weight:600;padding:4px 0}
table.picture td.cell{width:var(--cell);height:var(--cell);min-width:var(--cell);padding:0;position:relative}
table.picture th{font-weight:400;font-size:11px;color:#5f6368;padding:0 6px 0 0;text-align:right;white-space:nowrap}
table.picture thead th{text-align:left;padding:0;height:14px;position:relative}
table.picture thead th span{position:absolute;left:0;bottom:0}
table.picture th .module{font-family:ui-monospace,Menlo,Consolas,monospace;margin-left:6px}
.h-clean{background:#cfe8d5}.h-propagated{background:#f4b860}.h-source-edge{background:#d93025}
.h-injected{background:#8e44ad}.h-audit-finding{background:#1967d2}
.h-unprobed{background:repeating-linear-gradient(45deg,#f1f3f4 0 3px,#dadce0 3px 5px)}
td.first{outline:2px solid #000;outline-offset:0;z-index:1}
td.first::after{content:"";position:absolute;inset:30%;background:#fff;border-radius:50%}
td.first-source{outline:2px dashed #000}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:6px 0 10px;font-size:13px}
.legend span.swatch{display:inline-block;width:14px;height:14px;vertical-align:-2px;margin-right:5px;position:relative}
.v-ok{background:#cfe8d5}.v-suspect{background:#fde293}.v-non-finite,.v-all-zero,.v-silent-wrong{background:#f6aea9;font-weight:600}
.v-unsupported,.v-reference-invalid{background:#f1f3f4;color:#5f6368}
table.matrix td,table.matrix th{border:1px solid #dadce0;padding:3px 8px;text-align:left}
details summary{cursor:pointer;color:#1a73e8}
)";

// ---- trends ----

// Each layer's trend as a small plot, the layers warned about first, then those whose logits grew
// most: at most kPlottedLayers, so a 1,000-layer model's page stays a page.
std::string trendsSection(const Report& report) {
  constexpr size_t kPlottedLayers = 32;
  const Trends& t = report.trends;
  std::string out = "<section id=\"trends\">\n<h2>Trends</h2>\n";
  if (t.layers.empty()) {
    return out + "<p>The store holds no trends: it was written before nanprov kept them.</p>\n</section>\n";
  }
  if (t.warnings.empty()) {
    out += "<p>No warning: no layer's attention logits grew past the rule. A trend, not a verdict.</p>\n";
  } else {
    constexpr size_t kListedWarnings = 20;
    out += "<ul>\n";
    for (size_t i = 0; i < t.warnings.size() && i < kListedWarnings; ++i) {
      const TrendWarning& w = t.warnings[i];
      std::string when = "rank " + std::to_string(w.rank) + ", step " + std::to_string(w.step);
      if (t.nonfinite_step && *t.nonfinite_step > w.step) {
        when += ", " + stepsBeforeText(w.step, *t.nonfinite_step);
      }
      out += "<li><b>" + when + ":</b> " + shown(w.text()) + "</li>\n";
    }
    if (t.warnings.size() > kListedWarnings) {
      out += "<li>and " + std::to_string(t.warnings.size() - kListedWarnings) +
             " more: <code>nanprov report --json</code> lists them under trends.warnings</li>\n";
    }
    out +=
        "</ul>\n<p class=\"note\">A trend, not a verdict: the rule is the growth that preceded published "
        "instabilities.</p>\n";
  }
  const PlotFrame frame{.first_step = t.first_step, .last_step = t.last_step, .nonfinite_step = t.nonfinite_step};
  auto warned = [&](size_t layer) {
    return std::any_of(t.warnings.begin(), t.warnings.end(),
                       [&](const TrendWarning& w) { return w.layer == t.layers[layer].layer; });
  };
  // The layers warned about first, then those whose logits grew most; layers without a logit last.
  std::vector<size_t> order = t.by_growth;
  std::stable_partition(order.begin(), order.end(), warned);
  for (size_t i = 0; i < t.layers.size(); ++i) {
    if (!t.layers[i].first_logit) order.push_back(i);
  }
  out += trendPlotLegend() + "<div class=\"ranks\">\n";
  for (size_t i = 0; i < order.size() && i < kPlottedLayers; ++i) {
    const LayerTrend& layer = t.layers[order[i]];
    PlotFrame own = frame;
    for (const TrendWarning& w : t.warnings) {
      if (w.layer == layer.layer) own.warning_steps.push_back(w.step);
    }
    out += "<figure class=\"rank\"><figcaption class=\"mono\">" + shown(layer.module.empty() ? "layer" : layer.module) +
           " (layer " + std::to_string(layer.layer) + ")</figcaption>\n" + trendPlotSvg(layer, own) + "</figure>\n";
  }
  out += "</div>\n";
  if (order.size() > kPlottedLayers) {
    out += "<p class=\"note\">" + std::to_string(order.size() - kPlottedLayers) +
           " more layers: <code>nanprov report --json</code> lists every layer's under trends.layers.</p>\n";
  }
  const int64_t every = t.layers.front().bucket_steps;
  if (every > 1)
    out += "<p class=\"note\">Each point stands for " + std::to_string(every) + " steps, their largest.</p>\n";
  return out + "</section>\n";
}

// ---- verdict and first edge ----

// `headline`: the text report's first line, which is the verdict; the page says it in the same words.
std::string verdictSection(const Report& report, const std::string& headline) {
  const std::string outcome = outcomeName(report.conclusion.outcome);
  std::string sub = "outcome <b>" + outcome + "</b> &middot; " + shown(firstLine(summaryLine(report.run)));
  return "<header id=\"verdict\" class=\"verdict outcome-" + outcome + "\" data-outcome=\"" + outcome +
         "\">\n<h1 id=\"headline\">" + escapedHtml(headline) + "</h1>\n<p class=\"sub\">" + sub + "</p>\n</header>\n";
}

std::string shownCallName(const CallRecord& c) { return "<span class=\"mono\">" + shown(callName(c)) + "</span>"; }

std::string rolesTable(const CallRecord& c) {
  std::string out =
      "<table class=\"list roles\"><tr><th>role</th><th>side</th><th>dtype</th><th>shape</th><th>NaN</th>"
      "<th>+Inf</th><th>&minus;Inf</th><th>largest finite |x|</th><th>all zero</th></tr>\n";
  for (const TensorHealth& t : c.tensors) {
    bool output = isOutputRole(c.phase, t.role);
    out += std::string("<tr") + (t.nonfinite() && t.role != Role::kMask ? " class=\"bad\"" : "") + "><td>" +
           roleName(t.role) + "</td><td>" + (output ? "output" : "input") + "</td><td>" + shown(t.dtype.str()) +
           "</td><td class=\"mono\">" + shown(t.shape.text()) + "</td><td>" + std::to_string(t.nan) + "</td><td>" +
           std::to_string(t.posinf) + "</td><td>" + std::to_string(t.neginf) + "</td><td>" + shortNumber(t.max_abs) +
           "</td><td>" + (t.all_zero ? "yes" : "no") +
           (t.masked_rows > 0 ? " (" + shown(maskedRowsText(c, t)) + ")" : "") + "</td></tr>\n";
  }
  return out + "</table>\n";
}

std::string firstEdgeSection(const Report& report) {
  const RunOverview& run = report.run;
  if (!report.first_edge) {
    // Values went non-finite whose rows never reached the store: no stored call shows them.
    const char* none =
        report.conclusion.nonfinite_not_stored
            ? "No stored attention call had a non-finite input or output; the calls that saw them were not stored."
        : run.calls == 0 ? "No attention call was checked, so none can be named."
                         : "No checked attention call had a non-finite input or output.";
    return std::string("<section id=\"first-edge\" data-name=\"\">\n<h2>First non-finite edge</h2>\n<p>") + none +
           "</p>\n</section>\n";
  }
  const EdgeCall& edge = *report.first_edge;
  const CallRecord& c = edge.call;
  const CallHealth& h = edge.health;
  std::string origin = report.origin == Origin::kAttention
                           ? "<b>attention</b>: every checked input finite, non-finite " +
                                 shown(joined(h.nonfinite_outputs)) + " came out"
                           : "<b>upstream</b>: non-finite " + shown(joined(h.nonfinite_inputs)) +
                                 " reached attention from before it; " +
                                 escapedHtml(upstreamOriginText(run, report.first_module, c));  // already printable
  std::string out =
      "<section id=\"first-edge\" data-name=\"" + shown(callName(c)) + "\">\n<h2>First non-finite edge</h2>\n";
  out += "<table class=\"facts\">\n";
  out += row("call", "<span class=\"mono name\" id=\"edge-name\">" + shown(callName(c)) + "</span>");
  out += row("step", shown(stepLabel(run.step_unit, c.step)));
  out += row("phase", std::string(phaseName(c.phase)) + (c.recompute ? " (checkpoint recompute)" : ""));
  out += row("module", c.module.empty() ? "&ndash;" : "<span class=\"mono\">" + shown(c.module) + "</span>");
  out += row("op",
             "<span class=\"mono\">" + shown(c.op) + "</span> (" + shown(c.backend) + ") on " + shown(c.device.name()));
  out += row("origin", origin);
  if (!c.injected.empty()) out += row("injected", shown(c.injected) + " was corrupted by <code>--inject</code>");
  if (const std::optional<EdgeCapture>& capture = edge.capture) {
    out +=
        row("capture", capture->path.empty() ? "not captured: " + shown(capture->skipped)
                                             : "<code>nanprov replay " + shown(shellWord(capture->path)) + "</code>");
  }
  if (report.origin == Origin::kUpstream && report.first_source_edge) {
    out += row("first source edge", shownCallName(report.first_source_edge->call) + " (later, inside attention)");
  }
  // The first source edge's: the call whose conditions were matched (it is this one unless the
  // origin is upstream).
  for (const IssueMatchNote& m : report.source_issues.matches) out += row("known issue", shown(m.sentence));
  for (const PossibleIssueNote& m : report.source_issues.possible) out += row("known issue?", shown(m.sentence));
  const Propagation& p = report.propagation;
  out += row("after it", plural(p.calls, "non-finite call", "non-finite calls") + " across " +
                             plural(p.layers, "layer", "layers") + " on " + plural(p.ranks, "rank", "ranks"));
  out += "</table>\n<h3>Roles</h3>\n" + rolesTable(c) + "</section>\n";
  return out;
}

// ---- sentinel, coverage, audit ----

std::string parameterList(const std::vector<std::string>& names) {
  if (names.empty()) return "&ndash;";
  std::string items;
  for (const std::string& n : names) items += "<li class=\"mono\">" + shown(n) + "</li>";
  return "<details><summary>" + plural(static_cast<int64_t>(names.size()), "parameter", "parameters") +
         "</summary><ul>" + items + "</ul></details>";
}

std::string sentinelSection(const Report& report) {
  const RunOverview& run = report.run;
  const Conclusion& conclusion = report.conclusion;
  std::string out = "<section id=\"sentinel\">\n<h2>Gradient sentinel</h2>\n";
  if (!conclusion.sentinel) {
    bool training = run.step_unit == StepUnit::kOptimizerStep;
    // The sentinel runs in the probes: without a rank store, nothing was checked at all.
    return out + "<p>" +
           (run.ranks.empty() ? "No process left a store: the gradients were not checked either."
            : report.conclusion.nonfinite_not_stored
                ? "No stored finding: the rows of the step whose values went non-finite were not stored."
            : training ? "Every gradient, and every parameter after its update, was finite at every optimizer step."
                       : "An inference run: no optimizer step, so no gradients to check.") +
           "</p>\n</section>\n";
  }
  const SentinelFinding& s = *conclusion.sentinel;
  out += "<p>Gradients first went non-finite on rank " + std::to_string(s.rank) + " at " +
         shown(stepLabel(run.step_unit, s.step)) + ". ";
  if (conclusion.made_in_unchecked_attention) {
    std::string made = madeInUncheckedAttentionText(*report.first_module, run.step_unit);
    made[0] = 'T';  // "the first non-finite values were made...", as a sentence
    out += shown(made) + ".";
  } else if (conclusion.outcome == Outcome::kOutsideAttention) {
    out += "No probed attention call made them: the origin is outside attention.";
  } else if (run.calls == 0 && conclusion.unchecked_by_sentinel_step.empty()) {
    out += "No attention call was checked, so nanprov cannot tell whether attention made them: " +
           shown(kUnseenAttentionHint) + ".";
  } else if (!conclusion.unchecked_by_sentinel_step.empty()) {
    out += "Attention ran unchecked by then (" + shown(joined(conclusion.unchecked_by_sentinel_step, "; ")) +
           "), so nanprov cannot tell whether attention made them.";
  } else {
    out += "That is not before the first attention edge's step: they followed it.";
  }
  out += "</p>\n<table class=\"facts\">\n";
  if (report.first_module) {
    out += row("first non-finite value", escapedHtml(firstModuleText(*report.first_module, run.step_unit, true)));
  }
  out += row("non-finite gradients", parameterList(s.gradients)) +
         row("non-finite after the update", parameterList(s.values)) + "</table>\n</section>\n";
  return out;
}

std::string coverageSection(const Report& report) {
  const RunOverview& run = report.run;
  const Conclusion& conclusion = report.conclusion;
  std::string out = "<section id=\"coverage\">\n<h2>Coverage</h2>\n<table class=\"facts\">\n";
  out += row("attention calls checked", std::to_string(run.calls));
  if (std::string replicas = replicaCheckText(conclusion.replicas, run.step_unit); !replicas.empty()) {
    out += row("replicas", shown(replicas));
  }
  if (std::string summarised = summarisedText(run.summarised); !summarised.empty())
    out += row("summarised", shown(summarised));
  if (conclusion.outcome == Outcome::kNothingChecked)
    out += row("nothing checked, why", shown(conclusion.nothing_checked_why));
  if (int64_t lost = run.calls_not_stored; lost && !run.incomplete.empty()) {
    out += row("not stored", plural(lost, "call", "calls") + " checked and not stored: writes to the store failed");
  } else if (lost) {
    out += row("not stored",
               plural(lost, "call", "calls") +
                   " the process began but never stored: it ended before they reached the store (killed, or it "
                   "exited by a path that runs no exit hook)");
  }
  for (const std::string& incomplete : run.incomplete) out += row("incomplete", shown(incomplete));
  for (const std::string& damage : run.damage) out += row("damaged", shown(damage));
  std::string unprobed;
  for (const UncheckedAttention& u : run.unchecked) {
    unprobed += "<li>" + shown(u.kind) + " &times; " + std::to_string(u.count) + "</li>";
  }
  out += row("recognised, not checked", unprobed.empty() ? "none" : "<ul>" + unprobed + "</ul>");
  if (std::string suggestion = suggestionText(run.suggested_probe_modules); !suggestion.empty()) {
    out += row("would check it", "<span class=\"mono\">" + shown(suggestion) + "</span>");
  }
  return out +
         "</table>\n<p class=\"note\">Clean means checked and finite, never unseen: a picture cell with no checked "
         "call "
         "is drawn as unprobed.</p>\n</section>\n";
}

// A measure the engine could not take (written null) as a dash.
std::string shownMeasure(const std::optional<double>& v) { return v ? shortNumber(*v) : "&ndash;"; }

// "O all-zero: max error 0.52 (yardstick 1.2e-07), cosine 0, tensor" per tensor that is not ok.
std::string judgedTensors(const std::vector<TensorJudgement>& tensors) {
  std::vector<std::string> lines;
  for (const TensorJudgement& t : tensors) {
    if (t.verdict == "ok") continue;
    const std::string& where = !t.all_zero_where.empty() ? t.all_zero_where : t.nonfinite_where;
    lines.push_back(shown(t.role) + " <b>" + shown(t.verdict) + "</b>: max error " + shownMeasure(t.max_abs_err) +
                    " (yardstick " + shownMeasure(t.yardstick_max_err) + "), cosine " + shownMeasure(t.cosine) +
                    (where.empty() ? "" : ", " + shown(where)));
  }
  return lines.empty() ? "every tensor ok" : joined(lines, "<br>");
}

// Known issues as text: their URLs stay unlinked, since the page fetches and links nothing.
std::string knownIssuesText(const std::vector<KnownIssueNote>& issues) {
  std::vector<std::string> lines;
  for (const KnownIssueNote& k : issues) {
    lines.push_back("known issue " + shown(k.id) + " (" + shown(k.title) + "); " + shown(k.fix) +
                    (k.workaround.empty() ? "" : "; workaround: " + shown(k.workaround)) +
                    (k.url.empty() ? "" : " <span class=\"mono\">" + shown(k.url) + "</span>"));
  }
  return joined(lines, "<br>");
}

std::string auditSection(const Report& report) {
  const AuditSummary& a = report.conclusion.audit;
  std::string out = "<section id=\"audit\">\n<h2>Audit findings</h2>\n";
  if (!a.on) {
    return out +
           "<p>The run was not audited. <code>nanprov run --audit</code> compares sampled calls with the float64 "
           "reference while training runs: it finds outputs that are finite and still wrong.</p>\n</section>\n";
  }
  out += "<p>" + plural(a.audited, "call", "calls") + " judged against the float64 reference, " +
         plural(static_cast<int64_t>(a.findings.size()), "finding", "findings") + " (" + shortSeconds(a.seconds) +
         " judging, " + shortNumber(static_cast<double>(a.bytes) / (1 << 20)) + " MiB captured)" +
         (a.warn_only && !a.findings.empty() ? ", warn only" : "") + ".</p>\n";
  if (!a.findings.empty()) {
    out +=
        "<table class=\"list findings\"><tr><th>call</th><th>step</th><th>phase</th><th>backend</th><th>verdict</th>"
        "<th>tensors</th><th>kernel, conditions, capture</th></tr>\n";
    for (const AuditFinding& f : a.findings) {
      std::string details = (f.kernel ? "kernel <span class=\"mono\">" + shown(*f.kernel) + "</span><br>" : "") +
                            "conditions: " + shown(f.conditions_text);
      if (f.received_wrong && !f.received_wrong->empty()) {
        details += "<br>its inputs from the forward were already wrong (" + shown(*f.received_wrong) +
                   "): the fault is upstream, in the forward";
      }
      if (std::string issues = knownIssuesText(f.known_issues); !issues.empty()) details += "<br>" + issues;
      if (f.slice) details += "<br>audited on a slice: " + shown(*f.slice);
      details += "<br><code>nanprov replay " + shown(shellWord(f.capture)) + "</code>";
      out += "<tr class=\"finding\" data-name=\"" + shown(f.name) + "\"><td class=\"name\">" + shown(f.name) +
             "</td><td>" + std::to_string(f.step) + "</td><td>" + shown(f.phase) + "</td><td>" + shown(f.backend) +
             "</td><td><b>" + (f.verdict ? shown(*f.verdict) : "&ndash;") + "</b></td><td>" + judgedTensors(f.tensors) +
             "</td><td>" + details + "</td></tr>\n";
    }
    out += "</table>\n";
  }
  std::string notes;
  if (a.suspect)
    notes += "<li>" + plural(a.suspect, "call", "calls") +
             " within only PyTorch's looser tolerances (suspect, not findings)</li>";
  for (const auto& [why, n] : a.not_audited)
    notes += "<li>" + std::to_string(n) + " not audited: " + shown(why) + "</li>";
  if (a.unjudged) notes += "<li>" + plural(a.unjudged, "audit capture", "audit captures") + " not judged yet</li>";
  if (!notes.empty()) out += "<ul>" + notes + "</ul>\n";
  std::string judged;
  for (const AuditCoverage::Key& k : a.coverage.keys) {
    judged += "<tr><td>" + std::to_string(k.rank) + "</td><td>" + std::to_string(k.layer) + "</td><td>" +
              shown(k.phase) + "</td><td>" + std::to_string(k.judged) + "</td><td>" +
              (k.last_step < 0 ? "never" : std::to_string(k.last_step)) + "</td></tr>";
  }
  if (!judged.empty()) {
    out +=
        "<details><summary>what was judged, per layer</summary><table class=\"list\"><tr><th>rank</th><th>layer</th>"
        "<th>phase</th><th>calls judged</th><th>last judged step</th></tr>" +
        judged + "</table></details>\n";
  }
  return out + "</section>\n";
}

// ---- the picture ----

const char* healthLabel(CellHealth h) {
  switch (h) {
    case CellHealth::kClean: return "clean";
    case CellHealth::kPropagated: return "propagated";
    case CellHealth::kSourceEdge: return "source edge";
    case CellHealth::kInjected: return "injected";
    case CellHealth::kAuditFinding: return "audit finding";
    case CellHealth::kUnprobed: return "unprobed";
  }
  return "unprobed";
}

std::string legend() {
  const std::pair<CellHealth, const char*> kinds[] = {
      {CellHealth::kClean, "every call checked and finite"},
      {CellHealth::kPropagated, "a non-finite input reached attention"},
      {CellHealth::kSourceEdge, "finite inputs, non-finite outputs"},
      {CellHealth::kInjected, "corrupted by --inject"},
      {CellHealth::kAuditFinding, "finite but wrong against the float64 reference"},
      {CellHealth::kUnprobed, "no checked call"}};
  std::string out = "<div class=\"legend\">";
  for (const auto& [h, what] : kinds) {
    out += std::string("<span title=\"") + what + "\"><span class=\"swatch h-" + cellHealthName(h) + "\"></span>" +
           healthLabel(h) + "</span>";
  }
  return out +
         "<span><span class=\"swatch h-clean first\" style=\"outline:2px solid #000\"></span>the first "
         "edge</span></div>\n";
}

// "layer 3", or "layers 0–79" for a row that holds a band of them.
std::string rowLabel(const PictureRow& row) {
  return row.first_layer == row.last_layer
             ? "layer " + std::to_string(row.first_layer)
             : "layers " + std::to_string(row.first_layer) + "–" + std::to_string(row.last_layer);
}

std::string cellTooltip(const RankPicture& rank, const PictureRow& row, Phase phase, const std::string& steps,
                        const PictureCell& cell) {
  const std::string& module = row.module;
  std::vector<std::string> lines = {
      "rank" + std::to_string(rank.rank) + " · " + rowLabel(row) +
      (module.empty() ? "" : " (" + shown(module) + (row.first_layer == row.last_layer ? "" : ", …") + ")") + " · " +
      steps + " · " + phaseName(phase)};
  if (cell.calls == 0) {
    lines.push_back(
        "unprobed: no checked attention call (the layer did not run then, ran unchecked, or its process had ended)");
    return tooltip(lines);
  }
  lines.push_back(std::string(healthLabel(cell.health)) + ": " + plural(cell.calls, "call", "calls") +
                  (cell.sources ? ", " + plural(cell.sources, "source edge", "source edges") : "") +
                  (cell.propagated ? ", " + std::to_string(cell.propagated) + " propagated" : ""));
  if (!cell.first_bad.empty()) lines.push_back(shown(cell.first_bad));
  for (const std::string& i : cell.injected) lines.push_back("injected " + shown(i) + " by --inject");
  for (const std::string& f : cell.audit_findings) lines.push_back("audit finding " + shown(f));
  if (cell.first_edge) lines.push_back("the run's first non-finite edge");
  if (cell.first_source_edge) lines.push_back("the run's first source edge");
  return tooltip(lines);
}

std::string phaseTable(const HealthPicture& picture, const RankPicture& rank, Phase phase) {
  const int64_t spc = picture.steps_per_column;
  // Cells shrink with the number of columns, so that a long run still fits the page's width.
  const int cell_px = static_cast<int>(std::clamp<int64_t>(880 / std::max<int64_t>(picture.columns, 1), 6, 22));
  // Step labels every 1, 2, 5, 10, 20, ... columns, as far apart as the widest label needs.
  const int64_t label_px = 7 * static_cast<int64_t>(std::to_string(picture.columns * spc).size()) + 6;
  int64_t label_every = 1;
  for (int64_t scale = 1; label_every * (cell_px + 1) < label_px; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      label_every = m * scale;
      if (label_every * (cell_px + 1) >= label_px) break;
    }
  }
  const std::string phase_name = phaseName(phase);
  std::string out = "<table class=\"picture\" data-rank=\"" + std::to_string(rank.rank) + "\" data-phase=\"" +
                    phase_name + "\" style=\"--cell:" + std::to_string(cell_px) + "px\">\n<caption>" +
                    (phase == Phase::kForward ? "forward" : "backward") +
                    "</caption>\n<thead><tr><th>layer \\ step</th>";
  for (int64_t col = 0; col < picture.columns; ++col) {
    out += "<th>" + (col % label_every == 0 ? "<span>" + std::to_string(col * spc) + "</span>" : "") + "</th>";
  }
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& [number, row] : rank.rows) {
    const std::string& module = row.module;
    const int64_t layer = row.first_layer;
    out += "<tr><th title=\"" + shown(module) + "\">" + rowLabel(row) +
           (module.empty() ? "" : "<span class=\"module\">" + shown(module) + "</span>") + "</th>";
    for (int64_t col = 0; col < picture.columns; ++col) {
      const PictureCell& cell = rank.cell(number, phase, col);
      const int64_t step = col * spc;
      const std::string steps = spc == 1 ? "step " + std::to_string(step)
                                         : "steps " + std::to_string(step) + "–" + std::to_string(step + spc - 1);
      std::string classes = std::string("cell h-") + cellHealthName(cell.health) + (cell.first_edge ? " first" : "") +
                            (cell.first_source_edge ? " first-source" : "");
      out += "<td class=\"" + classes + "\"" + (cell.first_edge ? " id=\"first-edge-cell\"" : "") + " data-rank=\"" +
             std::to_string(rank.rank) + "\" data-layer=\"" + std::to_string(layer) + "\"" +
             (row.last_layer != layer ? " data-layer-last=\"" + std::to_string(row.last_layer) + "\"" : "") +
             " data-step=\"" + std::to_string(step) + "\"" +
             (spc > 1 ? " data-step-last=\"" + std::to_string(step + spc - 1) + "\"" : "") + " data-phase=\"" +
             phase_name + "\" data-health=\"" + cellHealthName(cell.health) + "\" data-calls=\"" +
             std::to_string(cell.calls) + "\" title=\"" + cellTooltip(rank, row, phase, steps, cell) + "\"></td>";
    }
    out += "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

std::string pictureSection(const Report& report, const HealthPicture& picture) {
  const RunOverview& run = report.run;
  std::string out = "<section id=\"picture\">\n<h2>Layers &times; steps, per rank</h2>\n";
  out += "<p class=\"note\">Each cell is one layer at one " +
         std::string(run.step_unit == StepUnit::kForwardPass ? "forward pass" : "optimizer step") +
         ", coloured by the worst health of its attention calls; hover a cell for its calls.";
  if (picture.steps_per_column > 1) {
    out += " This run is long: each column holds " + std::to_string(picture.steps_per_column) +
           " steps, and a cell the worst of them.";
  }
  if (picture.layers_per_row > 1) {
    out += " This model is deep: each row holds up to " + std::to_string(picture.layers_per_row) +
           " consecutive layer numbers, and a cell the worst of them.";
  }
  out += "</p>\n" + legend();
  if (picture.columns == 0)
    return out + "<p>No attention call was checked: there is nothing to draw.</p>\n</section>\n";
  out += "<div class=\"ranks\">\n";
  for (const RankPicture& rank : picture.ranks) {
    out += "<div class=\"rank\" data-rank=\"" + std::to_string(rank.rank) + "\">\n<h3>rank " +
           std::to_string(rank.rank) + "</h3>\n";
    if (rank.rows.empty()) {
      out += "<p>No attention call was checked on this rank.</p>\n</div>\n";
      continue;
    }
    out += "<div class=\"scroll\">\n";
    for (Phase phase : picture.phases) out += phaseTable(picture, rank, phase);
    out += "</div>\n</div>\n";
  }
  return out + "</div>\n</section>\n";
}

// ---- kernels, replay ----

std::string kernelsSection(const Report& report) {
  std::string out = "<section id=\"kernels\">\n<h2>The edge's kernels</h2>\n";
  if (!report.first_edge) return out + "<p>No edge, so no kernel to name.</p>\n</section>\n";
  const CallRecord& c = report.first_edge->call;
  const KernelsOfCall& found = report.first_edge->kernels;
  out += "<p>" + shownCallName(c) + " on " + shown(c.device.name()) + ": " + shown(found.attribution) + ".</p>\n";
  if (found.kernels.empty()) return out + "</section>\n";
  const KernelRecord* main = mainKernel(found.kernels);
  out +=
      "<table class=\"list "
      "kernels\"><tr><th>kernel</th><th>grid</th><th>block</th><th>time</th><th>device</th><th>stream</th></tr>\n";
  for (const KernelRecord& k : found.kernels) {
    auto dims = [](const int d[3]) {
      return std::to_string(d[0]) + "&times;" + std::to_string(d[1]) + "&times;" + std::to_string(d[2]);
    };
    bool cpu = k.device < 0;
    out += "<tr><td class=\"mono\" title=\"" + shown(k.name) + "\">" + shown(shortKernelName(k.name)) +
           (&k == main ? " <b>(main)</b>" : "") + "</td><td>" + (cpu ? "&ndash;" : dims(k.grid)) + "</td><td>" +
           (cpu ? "&ndash;" : dims(k.block)) + "</td><td>" +
           shortNumber(static_cast<double>(k.end_ns - k.start_ns) / 1000.0) + " &micro;s</td><td>" +
           (cpu ? std::string("cpu") : "cuda:" + std::to_string(k.device)) + "</td><td>" +
           (cpu ? "&ndash;" : std::to_string(k.stream)) + "</td></tr>\n";
  }
  return out + "</table>\n</section>\n";
}

// A text a replay's file may lack, shown; a dash where it does.
std::string shownText(const std::optional<std::string>& text) { return text ? shown(*text) : "&ndash;"; }

std::string verdictCell(const TensorJudgement* judged) {
  if (!judged) return "<td>&ndash;</td>";
  const TensorJudgement& t = *judged;
  std::vector<std::string> tip = {"max error " + shownMeasure(t.max_abs_err) + " (yardstick " +
                                      shownMeasure(t.yardstick_max_err) + ", floor " + shownMeasure(t.floor) + ")",
                                  "relative L2 " + shownMeasure(t.rel_l2) + ", cosine " + shownMeasure(t.cosine)};
  if (t.nonfinite > 0) {
    tip.push_back(std::to_string(t.nonfinite) + " non-finite " +
                  (t.nonfinite_where.empty() ? "&ndash;" : shown(t.nonfinite_where)));
  }
  if (!t.all_zero_where.empty()) tip.push_back("all zero: " + shown(t.all_zero_where));
  return "<td class=\"v-" + shown(t.verdict) + "\" title=\"" + tooltip(tip) + "\">" + shown(t.verdict) + "</td>";
}

std::string replayMatrix(const KeptReplay& replay) {
  std::string out = "<p>Replayed on " + shownText(replay.replayed_on) + " (captured on " +
                    shownText(replay.captured_on) + "), root cause <b>" + shownText(replay.root_cause) +
                    "</b>: " + shownText(replay.explanation) + "</p>\n";
  // The tensors any backend was judged on, in the verdict rules' order.
  std::vector<std::string> roles;
  for (const char* role : {"O", "LSE", "dQ", "dK", "dV"}) {
    for (const ReplayedBackend& b : replay.rows) {
      if (judgementOf(b.tensors, role)) {
        roles.emplace_back(role);
        break;
      }
    }
  }
  out += "<table class=\"matrix\" id=\"replay-matrix\"><tr><th>backend</th>";
  for (const std::string& r : roles) out += "<th>" + r + "</th>";
  out += "</tr>\n";
  for (const ReplayedBackend& b : replay.rows) {
    const std::string name = b.name.empty() ? "&ndash;" : shown(b.name);
    std::string label = b.captured ? "the run's own outputs" : name + (b.original ? " (the run's backend)" : "");
    out += "<tr data-backend=\"" + (b.captured ? std::string("captured") : name) + "\"><th>" + label + "</th>";
    if (!b.supported) {
      out += "<td class=\"v-unsupported\" colspan=\"" + std::to_string(std::max<size_t>(roles.size(), 1)) +
             "\">unsupported: " + (b.detail.empty() ? "&ndash;" : shown(b.detail)) + "</td></tr>\n";
      continue;
    }
    for (const std::string& r : roles) out += verdictCell(judgementOf(b.tensors, r));
    out += "</tr>\n";
  }
  out += "</table>\n";
  if (std::string issues = knownIssuesText(replay.known_issues); !issues.empty()) out += "<p>" + issues + "</p>\n";
  return out;
}

std::string replaySection(const Report& report, const PageSources& sources) {
  std::string out = "<section id=\"replay\">\n<h2>Replay verdicts</h2>\n";
  if (sources.capture.empty()) {
    return out + "<p>" +
           (report.first_edge ? "The edge was not captured, so there is nothing to replay."
                              : "No edge, so nothing to replay.") +
           "</p>\n</section>\n";
  }
  const std::string& kept = sources.kept_replay_path;
  if (sources.replay)
    return out + replayMatrix(*sources.replay) + "<p class=\"note\">From <code>" + shown(kept) +
           "</code>.</p>\n</section>\n";
  if (!sources.replay_problem.empty())
    out += "<p>The kept replay could not be read: " + shown(sources.replay_problem) + "</p>\n";
  return out +
         "<p>The run holds no replay of its capture. For the verdict of every backend against the float64 reference, "
         "replay it, keeping the verdicts next to the capture (in " +
         shown(kept) +
         "), and write this page again:</p>\n"
         "<pre class=\"box\"><code>nanprov replay " +
         shown(shellWord(sources.capture)) + " --keep\nnanprov report " + shown(shellWord(report.run.dir)) +
         " --html PAGE.html</code></pre>\n</section>\n";
}

// ---- the run's facts ----

std::string factsSection(const Report& report, const PageSources& sources) {
  const RunOverview& run = report.run;
  std::string out = "<section id=\"facts\">\n<h2>The run</h2>\n<table class=\"facts\">\n";
  out += row("directory", "<span class=\"mono\">" + shown(run.dir) + "</span>");
  std::vector<std::string> words;
  for (const std::string& w : run.command) words.push_back(shellWord(w));
  out += row("command", run.command.empty() ? "not recorded" : "<code>" + shown(joined(words, " ")) + "</code>");
  std::string ended = run.signal              ? "killed by " + shown(*run.signal)
                      : run.exit_code         ? "exited with code " + std::to_string(*run.exit_code)
                      : run.run_file_readable ? "not ended when this page was written"
                                              : "unknown (no readable run.json)";
  out += row("training", ended);
  out += row("a step is", run.step_unit == StepUnit::kForwardPass ? "a forward pass (no optimizer ran: inference)"
                                                                  : "an optimizer step");
  out += row("torch", run.torch.empty() ? "not recorded" : shown(run.torch));
  auto recorded = [](const std::optional<std::string>& text) {
    return text ? shown(*text) : std::string("not recorded (no CUDA call was checked)");
  };
  out += row("CUDA runtime", recorded(sources.environment.cuda_runtime));
  out += row("cuDNN", recorded(sources.environment.cudnn));
  out += row("GPU", recorded(sources.environment.gpu));
  out +=
      "</table>\n<h3>Ranks</h3>\n<table class=\"list ranks\"><tr><th>rank</th><th>host</th><th>world "
      "size</th><th>steps</th>"
      "<th>calls stored</th><th>store</th></tr>\n";
  for (const RankOverview& r : run.ranks) {
    auto said = [](const std::optional<std::string>& text) { return text ? shown(*text) : std::string("&ndash;"); };
    out += "<tr><td>" + std::to_string(r.rank) + "</td><td>" + said(r.host) + "</td><td>" + said(r.world_size) +
           "</td><td>" + std::to_string(r.steps) + "</td><td>" + std::to_string(r.calls_stored) +
           "</td><td class=\"mono\">" + shown(r.store) + "</td></tr>\n";
  }
  return out + "</table>\n</section>\n";
}

}  // namespace

std::string reportHtml(const Report& report) {
  static const PageSources kNothingRead;
  const PageSources& sources = report.page ? *report.page : kNothingRead;
  const std::string headline = firstLine(reportText(report));
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      // Nothing to fetch and nothing to run: the page works offline and no text in it can act.
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>nanprov report: " +
      escapedHtml(headline) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  out += verdictSection(report, headline);
  out +=
      "<nav><a href=\"#first-edge\">first edge</a><a href=\"#sentinel\">gradient sentinel</a><a "
      "href=\"#coverage\">coverage</a>"
      "<a href=\"#audit\">audit</a><a href=\"#trends\">trends</a><a href=\"#picture\">layers &times; steps</a><a "
      "href=\"#kernels\">kernels</a>"
      "<a href=\"#replay\">replay</a><a href=\"#facts\">the run</a></nav>\n";
  out += firstEdgeSection(report) + sentinelSection(report) + coverageSection(report) + auditSection(report) +
         trendsSection(report);
  out += pictureSection(report, sources.picture) + kernelsSection(report) + replaySection(report, sources) +
         factsSection(report, sources);
  return out + "</body>\n</html>\n";
}

}  // namespace nanprov::report
