// The attention a run recognised but did not check (the probes' RunCounters::unprobed counts), read
// for the report: each kind apart from the --probe-module the probes said would check it, which
// module the trail names may be one of them, and the one --probe-module suggestion the report
// prints for them all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/records/call_record.h"

namespace nanprov::store {
struct RunData;  // store/reader.h: the model's types need no store header
}  // namespace nanprov::store

namespace nanprov::report {

struct UncheckedAttention {
  std::string what;          // as the probes counted it, the key of RunData::unprobed()
  std::string kind;          // `what` without its suggestion
  std::string probe_module;  // the --probe-module that checks it, as the probes wrote it; "" when none
  int64_t count = 0;
};
std::vector<UncheckedAttention> uncheckedAttention(const store::RunData& run);

// Whether module check `m` is of attention the run counted unchecked: its class, or its path's
// pattern, is what a kind's --probe-module names.
bool isUncheckedAttention(const store::RunData& run, const ModuleCheckRecord& m);

// The --probe-module SPECs that would check every kind that names one, once for the run: the one
// class when a single class covers every such module (the trail's RunCounters::module_class
// gives the class of a path pattern), else each pattern. Never one the run was given (run.json).
std::vector<std::string> suggestedProbeModules(const store::RunData& run);

// "nanprov run --probe-module Attention checks it", or "" when there is nothing to suggest.
std::string suggestionText(const std::vector<std::string>& specs);

}  // namespace nanprov::report
