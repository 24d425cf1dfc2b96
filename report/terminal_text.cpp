#include "report/terminal_text.h"

#include "base/text.h"

namespace nanprov {
namespace {

void escape(std::string& s) { s = printable(s); }

}  // namespace

CallRecord forTerminal(CallRecord call) {
  for (std::string* s : {&call.op, &call.backend, &call.module, &call.injected, &call.unattributed}) escape(*s);
  for (TensorHealth& t : call.tensors) {
    t.dtype = DtypeName::intern(printable(t.dtype.c_str()));  // a store may say anything; role and shape are parsed
  }
  return call;
}

// run.dir stays as given: the report reads run.json through it (the summary escapes it).
RunData forTerminal(RunData run) {
  for (CallRecord& c : run.calls) c = forTerminal(std::move(c));
  for (KernelRecord& k : run.kernels) escape(k.name);
  for (CaptureRecord& c : run.captures) {
    for (std::string* s : {&c.path, &c.skipped}) escape(*s);
  }
  for (SentinelRecord& s : run.sentinel) escape(s.parameter);
  for (RankInfo& r : run.ranks) {
    escape(r.path);
    std::map<std::string, std::string> meta;
    for (const auto& [key, value] : r.meta) meta.emplace(printable(key), printable(value));
    r.meta = std::move(meta);
  }
  return run;
}

Trends forTerminal(Trends trends) {
  for (LayerTrend& t : trends.layers) {
    escape(t.module);
    for (TrendPoint& p : t.points) {
      escape(p.module);
      escape(p.scores_dtype);
    }
  }
  for (TrendWarning& w : trends.warnings) {
    escape(w.module);
    escape(w.scores_dtype);
  }
  return trends;
}

AuditSummary forTerminal(AuditSummary audit) {
  for (AuditFinding& f : audit.findings) {
    for (std::string* s : {&f.name, &f.phase, &f.op, &f.backend, &f.conditions_text, &f.capture}) escape(*s);
    for (std::optional<std::string>* s : {&f.kernel, &f.verdict, &f.slice, &f.received_wrong}) {
      if (*s) escape(**s);
    }
    for (TensorJudgement& t : f.tensors) {
      for (std::string* s : {&t.role, &t.verdict, &t.nonfinite_where, &t.all_zero_where}) escape(*s);
    }
    for (KnownIssueNote& k : f.known_issues) {
      for (std::string* s : {&k.id, &k.url, &k.title, &k.fix, &k.status, &k.workaround}) escape(*s);
    }
  }
  return audit;
}

}  // namespace nanprov
