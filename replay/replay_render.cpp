// Text and JSON for a ReplayResult.
#include <cstdio>

#include "base/records/call_record.h"
#include "base/text.h"
#include "replay/layout_render.h"
#include "replay/replay_issues.h"
#include "replay/replay_result.h"
#include "store/audit_file.h"

namespace nanprov::replay {
namespace {

using nlohmann::json;

constexpr const char* kRoles[] = {"O", "LSE", "dQ", "dK", "dV"};

json nullable(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

std::string padded(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s + " ";
}

// The yardstick's errors ride on every comparison of a role; the first one that has them.
const Comparison* yardstickOf(const ReplayResult& r, const char* role) {
  for (const BackendRun& b : r.backends) {
    if (const Comparison* c = b.ran ? b.tensor(role) : nullptr) return c;
  }
  return r.captured ? r.captured->tensor(role) : nullptr;
}

json comparisonJson(const Comparison& c) {
  return {{"verdict", verdictName(c.verdict)},
          {"nonfinite", c.nonfinite},
          {"nonfinite_where", nullable(c.nonfinite_where)},
          {"all_zero", c.all_zero},
          {"all_zero_where", nullable(c.all_zero_where)},
          {"max_abs_err", c.max_abs_err},
          {"mean_abs_err", c.mean_abs_err},
          {"rel_l2", c.rel_l2},
          {"cosine", c.cosine},
          {"yardstick_max_err", c.yardstick_max_err},
          {"yardstick_mean_err", c.yardstick_mean_err},
          {"yardstick_rel_l2", c.yardstick_rel_l2},
          {"floor", c.floor},
          {"compared", c.compared}};
}

json backendJson(const BackendRun& b) {
  json tensors = json::object();
  for (const Comparison& c : b.tensors) tensors[c.role] = comparisonJson(c);
  json kernels = json::array();
  for (const ReplayedKernel& k : b.kernels) {
    kernels.push_back(
        {{"name", k.name}, {"short_name", k.short_name}, {"duration_ns", k.duration_ns}, {"main", k.main}});
  }
  return {{"name", b.name},
          {"status", b.ran ? "ran" : "unsupported"},
          {"detail", nullable(b.detail)},
          {"original", b.original},
          {"tensors", tensors},
          {"kernels", kernels}};
}

json conditionsJson(const Conditions& c) {
  return {{"fully_masked_rows", c.fully_masked_rows},
          {"min_row_lse", c.min_row_lse ? json(*c.min_row_lse) : json(nullptr)},
          {"lse_below_-88.7", c.lse_below_limit},
          {"s_q", c.s_q},
          {"s_kv", c.s_kv},
          {"s_kv_mod_128", c.s_kv % 128},
          {"head_dim", c.head_dim},
          {"head_dim_above_256", c.head_dim > 256},
          {"q_heads", c.q_heads},
          {"kv_heads", c.kv_heads},
          {"gqa_ratio", c.kv_heads ? c.q_heads / c.kv_heads : 0},
          {"causal", c.causal},
          {"window", c.window},
          {"query_dtype", c.query_dtype},
          {"mask_dtype", nullable(c.mask_dtype)},
          {"mask_dtype_differs", !c.mask_dtype.empty() && c.mask_dtype != c.query_dtype},
          {"dropout_p", c.dropout_p}};
}

std::string conditionsText(const Conditions& c) {
  std::vector<std::string> parts;
  parts.push_back(std::to_string(c.fully_masked_rows) + " " + kMaskedRowsUnit);
  if (c.min_row_lse) {
    parts.push_back("min row LSE " + shortNumber(*c.min_row_lse) + (c.lse_below_limit ? " (below -88.7)" : ""));
  }
  parts.push_back("s_kv " + std::to_string(c.s_kv) + " (s_kv % 128 = " + std::to_string(c.s_kv % 128) + ")");
  parts.push_back("head_dim " + std::to_string(c.head_dim));
  parts.push_back("GQA " + std::to_string(c.kv_heads ? c.q_heads / c.kv_heads : 0) + ":1 (" +
                  std::to_string(c.q_heads) + " q heads, " + std::to_string(c.kv_heads) + " kv heads)");
  if (c.causal) parts.push_back("causal");
  parts.push_back(c.window == "none" ? "window none" : "sliding window " + c.window);
  parts.push_back(c.mask_dtype.empty() ? "no mask"
                                       : "mask " + c.mask_dtype +
                                             (c.mask_dtype != c.query_dtype ? " (query " + c.query_dtype + ")" : ""));
  if (c.dropout_p > 0) parts.push_back("dropout " + shortNumber(c.dropout_p));
  return joined(parts, "; ");
}

void verdictRow(std::string& out, const std::string& label, const BackendRun& b) {
  out += "  " + padded(label, 20);
  if (!b.ran) {
    out += "unsupported: " + b.detail + "\n";
    return;
  }
  for (const char* role : kRoles) {
    const Comparison* c = b.tensor(role);
    out += padded(c ? verdictName(c->verdict) : "-", 12);
  }
  out += "\n";
}

void errorRow(std::string& out, const std::string& label, const BackendRun& b) {
  if (!b.ran) return;
  out += "  " + padded(label, 20);
  for (const char* role : kRoles) {
    const Comparison* c = b.tensor(role);
    // Nowhere finite on both sides: there is no error to show, and 0 would read as exact.
    bool none_finite = c && c->compared - c->nonfinite <= 0;
    out += padded(c && !none_finite ? shortNumber(c->max_abs_err) : "-", 12);
  }
  out += "\n";
}

// The main kernel each backend launched here, with its time: which kernel a verdict belongs to.
std::string kernelsText(const ReplayResult& r) {
  std::string out;
  for (const BackendRun& b : r.backends) {
    for (const ReplayedKernel& k : b.kernels) {
      if (!k.main) continue;
      out += "  " + padded(b.name + (b.original ? " *" : ""), 20) + k.short_name;
      if (r.replayed_on == "cpu") {  // the ATen op itself, untimed
        out += "\n";
        continue;
      }
      out += " (" + shortNumber(static_cast<double>(k.duration_ns) / 1000.0) + " us";
      if (b.kernels.size() > 1) out += ", " + std::to_string(b.kernels.size() - 1) + " more kernels";
      out += ")\n";
    }
  }
  const char* how = r.replayed_on == "cpu" ? "the ATen op on the CPU" : "CUPTI";
  if (!out.empty()) out = "\nkernels each backend ran here (" + r.phase + ", " + how + ")\n" + out;
  else if (!r.kernel_tracing.empty()) out = "\nkernels: not traced here (" + r.kernel_tracing + ")\n";
  return out;
}

}  // namespace

namespace {

// `reruns` in replay --json: null where replay did not rerun (audit); `not_rerun` says why the
// captured backend could not be; `runs` and `reproduced` are the replay device's.
json rerunsJson(const std::optional<Reruns>& reruns) {
  if (!reruns) return nullptr;
  json devices = json::array(), others = json::array();
  for (const DeviceReruns& d : reruns->devices) {
    devices.push_back({{"device", d.device},
                       {"runs", d.runs},
                       {"reproduced", d.reproduced},
                       {"identical_to_run", d.identical_to_run},
                       {"distinct_results", d.distinct}});
  }
  for (const BackendStability& b : reruns->others) {
    others.push_back({{"backend", b.name},
                      {"runs", b.runs},
                      {"failed", b.failed},
                      {"distinct_results", b.distinct},
                      {"stable", b.distinct == 1 && b.failed == 0}});
  }
  const DeviceReruns* here = reruns->devices.empty() ? nullptr : &reruns->devices.front();
  return {{"backend", reruns->backend},
          {"not_rerun", nullable(reruns->not_rerun)},
          {"device", here ? json(here->device) : json(nullptr)},
          {"runs", here ? here->runs : 0},
          {"reproduced", here ? here->reproduced : 0},
          {"identical_to_run", here ? here->identical_to_run : 0},
          {"distinct_results", here ? here->distinct : 0},
          {"depends_on_device", reruns->dependsOnDevice()},
          {"in_run", reruns->in_run ? json{{"device", reruns->in_run->device},
                                           {"runs", reruns->in_run->runs},
                                           {"reproduced", reruns->in_run->reproduced},
                                           {"identical_to_run", reruns->in_run->identical_to_run},
                                           {"distinct_results", reruns->in_run->distinct}}
                                    : json(nullptr)},
          {"in_run_not_rerun", nullable(reruns->in_run_not_rerun)},
          {"devices", devices},
          {"other_backends", others}};
}

// "reruns: flash_cpu on cpu gave the run's result 5 of 5 times, one bitwise result (identical to the run's)".
std::string rerunsText(const std::optional<Reruns>& reruns) {
  if (!reruns) return "";
  std::string out;
  if (!reruns->not_rerun.empty()) out += "reruns: " + reruns->backend + " not rerun here: " + reruns->not_rerun + "\n";
  if (!reruns->in_run_not_rerun.empty()) out += "reruns in the run: not rerun, " + reruns->in_run_not_rerun + "\n";
  std::vector<DeviceReruns> all = reruns->devices;
  if (reruns->in_run) all.push_back(*reruns->in_run);
  for (const DeviceReruns& d : all) {
    out += "reruns: " + (reruns->backend.empty() ? std::string("the call") : reruns->backend) + " on " + d.device +
           " gave the run's result " + std::to_string(d.reproduced) + " of " + std::to_string(d.runs) + " times, " +
           (d.distinct == 1 ? std::string("one bitwise result")
                            : std::to_string(d.distinct) + " bitwise-distinct results") +
           (d.identical_to_run == d.runs ? " (identical to the run's)"
            : d.identical_to_run == 0    ? " (none identical to the run's)"
                                         : " (" + std::to_string(d.identical_to_run) + " identical to the run's)") +
           "\n";
  }
  return out;
}

}  // namespace

json toJson(const ReplayResult& r) {
  json backends = json::array();
  for (const BackendRun& b : r.backends) backends.push_back(backendJson(b));
  json yardstick = json::object();
  for (const char* role : kRoles) {
    if (const Comparison* c = yardstickOf(r, role)) {
      yardstick[role] = {{"max_abs_err", c->yardstick_max_err},
                         {"mean_abs_err", c->yardstick_mean_err},
                         {"rel_l2", c->yardstick_rel_l2}};
    }
  }
  return {{"capture", r.capture},
          {"note", r.note.empty() ? json(nullptr) : json(r.note)},
          {"call", r.call},
          {"phase", r.phase},
          {"op", r.op},
          {"backend", r.backend},
          {"module", r.module},
          {"captured_on", r.captured_on},
          {"replayed_on", r.replayed_on},
          {"dtype", r.dtype},
          {"kernels", r.kernels},
          {"main_kernel", nullable(r.main_kernel)},
          {"kernels_from", nullable(r.kernels_from)},
          {"kernel_tracing", nullable(r.kernel_tracing)},
          {"injected", nullable(r.injected)},
          {"captured_edge", nullable(r.captured_edge)},
          {"reference",
           {{"valid", r.reference_problem.empty()},
            {"problem", nullable(r.reference_problem)},
            {"device", r.reference_device}}},
          {"root_cause",
           {{"class", causeName(r.root_cause.cls)},
            {"backend", nullable(r.root_cause.backend)},
            {"kernel", nullable(r.root_cause.kernel)},
            {"tensors", r.root_cause.tensors},
            {"explanation", r.root_cause.explanation}}},
          {"captured", r.captured ? backendJson(*r.captured) : json(nullptr)},
          {"backends", backends},
          {"reruns", rerunsJson(r.reruns)},
          {"yardstick", yardstick},
          {"yardstick_nonfinite", r.yardstick_nonfinite},
          {"conditions", conditionsJson(r.conditions)},
          {"known_issues", matchesJson(knownIssuesOf(r))},
          {"possible_known_issues", possibleJson(possibleKnownIssuesOf(r))},
          {"layouts", layoutsJson(r.layouts)},
          {"notes", r.notes}};
}

namespace {

// The result with every text that came from the capture made printable: a capture's metadata
// (module, op, notes) holding a newline or terminal escape must not forge verdict lines.
ReplayResult printableCopy(ReplayResult r) {
  auto fix = [](std::string& s) { s = printable(s); };
  for (std::string* s : {&r.capture,
                         &r.call,
                         &r.phase,
                         &r.op,
                         &r.backend,
                         &r.module,
                         &r.step,
                         &r.slice,
                         &r.captured_on,
                         &r.replayed_on,
                         &r.note,
                         &r.incomplete,
                         &r.dtype,
                         &r.main_kernel,
                         &r.kernels_from,
                         &r.kernel_tracing,
                         &r.injected,
                         &r.captured_edge,
                         &r.reference_problem,
                         &r.root_cause.backend,
                         &r.root_cause.kernel,
                         &r.root_cause.explanation,
                         &r.conditions.window,
                         &r.conditions.query_dtype,
                         &r.conditions.mask_dtype}) {
    fix(*s);
  }
  for (auto* list : {&r.kernels, &r.notes, &r.root_cause.tensors, &r.yardstick_nonfinite}) {
    for (std::string& s : *list) fix(s);
  }
  auto fixRun = [&](BackendRun& b) {
    fix(b.name);
    fix(b.detail);
    for (ReplayedKernel& k : b.kernels) {
      fix(k.name);
      fix(k.short_name);
    }
  };
  for (BackendRun& b : r.backends) fixRun(b);
  if (r.captured) fixRun(*r.captured);
  if (r.received) fixRun(*r.received);
  if (r.reruns) {
    fix(r.reruns->backend);
    fix(r.reruns->not_rerun);
    fix(r.reruns->in_run_not_rerun);
    for (DeviceReruns& d : r.reruns->devices) fix(d.device);
    if (r.reruns->in_run) fix(r.reruns->in_run->device);
    for (BackendStability& b : r.reruns->others) fix(b.name);
  }
  return r;
}

}  // namespace

std::string toText(const ReplayResult& stored) {
  const ReplayResult r = printableCopy(stored);
  std::string out = "replay of " + r.call + " (" + r.phase + ", " + r.op + ", " + r.backend + ", " + r.dtype + ")";
  out += ", captured on " + r.captured_on + ", replayed on " + r.replayed_on + "\n";
  out += std::string("root cause: ") + causeName(r.root_cause.cls);
  if (!r.root_cause.explanation.empty()) out += ": " + r.root_cause.explanation;
  out += "\n";
  if (!r.root_cause.kernel.empty()) out += "  kernel: " + r.root_cause.kernel + "\n";
  out += rerunsText(r.reruns);
  out += "conditions: " + conditionsText(r.conditions) + "\n";
  for (const IssueMatch& m : knownIssuesOf(stored)) out += "known issue: " + matchText(m) + "\n";
  for (const IssueMatch& m : possibleKnownIssuesOf(stored))
    out += "known issue: " + possibleText(m, "the capture") + "\n";
  if (!r.note.empty()) out += "note: " + r.note + "\n";
  out += layoutsText(r.layouts);
  out += "\n";

  std::string header = "  " + padded("backend", 20);
  for (const char* role : kRoles) header += padded(role, 12);
  out += "verdicts against the float64 reference (" + r.reference_device + ")\n" + header + "\n";
  if (r.captured) verdictRow(out, "captured (run)", *r.captured);
  for (const BackendRun& b : r.backends) verdictRow(out, b.name + (b.original ? " *" : ""), b);

  out += "\nmax |B - reference| where both are finite (-: no such position, or no tensor)\n" + header + "\n";
  if (r.captured) errorRow(out, "captured (run)", *r.captured);
  for (const BackendRun& b : r.backends) errorRow(out, b.name + (b.original ? " *" : ""), b);
  out += "  " + padded("yardstick (" + r.dtype + ")", 20);
  for (const char* role : kRoles) {
    const Comparison* c = yardstickOf(r, role);
    out += padded(c ? shortNumber(c->yardstick_max_err) : "-", 12);
  }
  out += "\n";
  std::vector<std::string> details;
  auto detail = [&](const std::string& name, const BackendRun& b) {
    for (const Comparison& c : b.tensors) {
      if (c.nonfinite)
        details.push_back(name + " " + c.role + ": " + std::to_string(c.nonfinite) +
                          " non-finite where the reference is finite, at " + c.nonfinite_where);
      if (c.all_zero) details.push_back(name + " " + c.role + ": exactly zero over " + c.all_zero_where);
    }
  };
  if (r.captured) detail("captured", *r.captured);
  for (const BackendRun& b : r.backends) detail(b.name, b);
  if (!details.empty()) out += "\n" + joined(details, "\n") + "\n";
  out += kernelsText(r);
  out += "\n* the backend that ran the captured call";
  if (!r.main_kernel.empty()) {
    out += " (" + r.main_kernel + (r.kernels_from == "replay" ? ", as traced in this replay)" : ")");
  }
  out += "\n";
  for (const std::string& note : r.notes) out += "note: " + note + "\n";
  return out;
}

namespace {

// Worse first: a finding is named by its worst tensor.
int severity(Verdict v) {
  switch (v) {
    case Verdict::kNonFinite: return 5;
    case Verdict::kAllZero: return 4;
    case Verdict::kSilentWrong: return 3;
    case Verdict::kSuspect: return 2;
    case Verdict::kReferenceInvalid: return 1;
    default: return 0;
  }
}

json auditHead(const ReplayResult& r) {
  return {{"format", store::kAuditFormat},
          {"call", r.call},
          {"step", r.step},
          {"phase", r.phase},
          {"op", r.op},
          {"backend", r.backend},
          {"module", r.module},
          {"kernel", nullable(r.main_kernel)},
          {"capture", r.capture},
          {"slice", nullable(r.slice)},
          {"dtype", r.dtype},
          {"replayed_on", r.replayed_on}};
}

// A backward's inputs from its forward that fail against the reference: "O silent-wrong, LSE ok"
// → "O silent-wrong". Empty when they are right (or this is no backward).
std::string receivedWrong(const ReplayResult& r) {
  std::vector<std::string> wrong;
  if (r.received) {
    for (const Comparison& c : r.received->tensors) {
      if (isFailure(c.verdict)) wrong.push_back(c.role + " " + verdictName(c.verdict));
    }
  }
  return joined(wrong, ", ");
}

}  // namespace

Verdict worstVerdict(const BackendRun& run) {
  Verdict worst = Verdict::kOk;
  for (const Comparison& c : run.tensors) {
    if (severity(c.verdict) > severity(worst)) worst = c.verdict;
  }
  return worst;
}

json auditJson(const ReplayResult& r, double seconds) {
  json doc = auditHead(r);
  const Verdict worst = r.captured ? worstVerdict(*r.captured) : Verdict::kOk;
  json tensors = json::object();
  if (r.captured) {
    for (const Comparison& c : r.captured->tensors) tensors[c.role] = comparisonJson(c);
  }
  doc["audited"] = r.reference_problem.empty();
  doc["not_audited_why"] =
      r.reference_problem.empty() ? json(nullptr) : json("the reference is invalid: " + r.reference_problem);
  doc["verdict"] = verdictName(worst);
  // A suspect tensor is within PyTorch's own looser tolerances for its kernels (DESIGN.md rule 6):
  // noted, never a finding. On the H200 cuDNN's dQ with GQA lands there on clean calls.
  doc["finding"] = r.reference_problem.empty() && isFailure(worst);
  doc["tensors"] = tensors;
  json received = json::object();
  if (r.received) {
    for (const Comparison& c : r.received->tensors) received[c.role] = comparisonJson(c);
  }
  doc["received"] = r.received ? received : json(nullptr);
  doc["received_wrong"] = r.received ? json(receivedWrong(r)) : json(nullptr);
  doc["conditions"] = conditionsJson(r.conditions);
  doc["conditions_text"] = conditionsText(r.conditions);
  doc["known_issues"] = matchesJson(knownIssuesOf(r));
  doc["seconds"] = seconds;
  return doc;
}

json notAuditedJson(const ReplayResult& r, const std::string& why) {
  json doc = auditHead(r);
  doc["audited"] = false;
  doc["not_audited_why"] = why;
  doc["verdict"] = nullptr;
  doc["finding"] = false;
  return doc;
}

std::string auditText(const ReplayResult& stored) {
  const ReplayResult r = printableCopy(stored);
  std::string out = "audit " + r.call + " (step " + r.step + ", " + r.phase + ", " + r.backend + "): ";
  if (!r.reference_problem.empty()) return out + "not audited, the reference is invalid: " + r.reference_problem;
  std::vector<std::string> bad;
  if (r.captured) {
    for (const Comparison& c : r.captured->tensors) {
      if (c.verdict == Verdict::kOk) continue;
      std::string where = !c.all_zero_where.empty() ? c.all_zero_where : c.nonfinite_where;
      bad.push_back(c.role + " " + verdictName(c.verdict) + " (max error " + shortNumber(c.max_abs_err) +
                    ", yardstick " + shortNumber(c.yardstick_max_err) + (where.empty() ? "" : ", " + where) + ")");
    }
  }
  std::string upstream = receivedWrong(r);
  if (!upstream.empty())
    upstream =
        "; the O and LSE it received from its forward were already wrong (" + upstream + "): look at the forward";
  if (bad.empty()) return out + "ok";
  const bool only_suspect = r.captured && !isFailure(worstVerdict(*r.captured));
  return out + joined(bad, ", ") + (only_suspect ? " (within PyTorch's looser tolerances: not a finding)" : "") +
         upstream + "; conditions: " + conditionsText(r.conditions);
}

}  // namespace nanprov::replay
