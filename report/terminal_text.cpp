#include "report/terminal_text.h"

#include "base/text.h"

namespace nanprov::report {
namespace {

void escape(std::string& s) { s = printable(s); }

void escape(std::vector<std::string>& texts) {
  for (std::string& s : texts) escape(s);
}

void escape(std::optional<std::string>& s) {
  if (s) escape(*s);
}

void escape(DeviceIdentity& id) {
  for (std::string* s :
       {&id.host, &id.device, &id.gpu, &id.gpu_uuid, &id.pci_bus_id, &id.driver, &id.cuda_driver, &id.cudnn}) {
    escape(*s);
  }
}

void escape(EdgeCall& edge) {
  edge.call = forTerminal(std::move(edge.call));
  escape(edge.device);
  for (KernelRecord& k : edge.kernels.kernels) escape(k.name);
  for (std::string* s : {&edge.kernels.inferred_from, &edge.kernels.attribution, &edge.mesh}) escape(*s);
  if (edge.capture) {
    for (std::string* s : {&edge.capture->path, &edge.capture->skipped}) escape(*s);
  }
}

void escape(RunOverview& run) {
  for (std::string* s : {&run.dir, &run.torch}) escape(*s);
  for (std::vector<std::string>* texts : {&run.dirs, &run.damage, &run.command, &run.suggested_probe_modules})
    escape(*texts);
  escape(run.signal);
  for (auto& [rank, why] : run.unrecorded) escape(why);
  for (UncheckedAttention& u : run.unchecked) {
    for (std::string* s : {&u.what, &u.kind, &u.probe_module}) escape(*s);
  }
  for (RankOverview& r : run.ranks) {
    escape(r.store);
    escape(r.device);
    escape(r.host);
    escape(r.world_size);
    std::map<std::string, std::string> meta;
    for (const auto& [key, value] : r.meta) meta.emplace(printable(key), printable(value));
    r.meta = std::move(meta);
  }
}

void escape(Conclusion& c) {
  if (c.sentinel) {
    escape(c.sentinel->gradients);
    escape(c.sentinel->values);
  }
  for (CollectivePath& p : c.collective_paths) {
    for (std::string* s : {&p.op, &p.group}) escape(*s);
    escape(p.parameters);
  }
  escape(c.unchecked_by_sentinel_step);
  escape(c.unchecked_by_edge_step);
  escape(c.nothing_checked_why);
  if (c.replicas.first_divergence) escape(c.replicas.first_divergence->parameter);
  c.audit = forTerminal(std::move(c.audit));
}

}  // namespace

CallRecord forTerminal(CallRecord call) {
  for (std::string* s : {&call.op, &call.backend, &call.module, &call.injected, &call.unattributed}) escape(*s);
  for (TensorHealth& t : call.tensors) {
    t.dtype = DtypeName::intern(printable(t.dtype.c_str()));  // a store may say anything; role and shape are parsed
  }
  return call;
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
    for (std::optional<std::string>* s : {&f.kernel, &f.verdict, &f.slice, &f.received_wrong}) escape(*s);
    for (TensorJudgement& t : f.tensors) {
      for (std::string* s : {&t.role, &t.verdict, &t.nonfinite_where, &t.all_zero_where}) escape(*s);
    }
    for (KnownIssueNote& k : f.known_issues) {
      for (std::string* s : {&k.id, &k.url, &k.title, &k.fix, &k.status, &k.workaround}) escape(*s);
    }
  }
  return audit;
}

// The first module's texts are escaped where they are written (report/first_module.h), and the
// known issues' where they are matched: neither is copied here.
Report forTerminal(Report report) {
  escape(report.run);
  if (report.first_edge) escape(*report.first_edge);
  if (report.first_source_edge) escape(*report.first_source_edge);
  if (report.input_trail && report.input_trail->previous)
    report.input_trail->previous = forTerminal(std::move(*report.input_trail->previous));
  escape(report.conclusion);
  report.trends = forTerminal(std::move(report.trends));
  return report;
}

}  // namespace nanprov::report
