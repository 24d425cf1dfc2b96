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

nlohmann::json forTerminal(const nlohmann::json& doc) {
  if (doc.is_string()) return printable(doc.get<std::string>());
  if (doc.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const nlohmann::json& item : doc) out.push_back(forTerminal(item));
    return out;
  }
  if (doc.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, value] : doc.items()) out[printable(key)] = forTerminal(value);
    return out;
  }
  return doc;
}

}  // namespace nanprov
