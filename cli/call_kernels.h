// The kernels of one call, for people and scripts: short names, the main kernel, JSON.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "store/call_record.h"
#include "store/reader.h"

namespace nanprov {

nlohmann::json kernelsJson(const CallKernels& kernels);

// The kernels shown for a call: its own, or, when it ran after kernel tracing stopped, those of
// the latest traced call with the same rank, layer, phase, op and tensor shapes and dtypes (the
// same call signature launches the same kernels).
struct KernelsOfCall {
  CallKernels kernels;
  const CallRecord* inferred_from = nullptr;
};

class CallKernelIndex {
 public:
  explicit CallKernelIndex(const RunData& run);
  KernelsOfCall of(const CallRecord& call) const;

 private:
  const RunData& run_;
  std::map<std::string, const CallRecord*> traced_;  // signature → latest call with kernels
};

// "CUPTI", "the ATen CPU op", "inferred from ...", or the reason the kernels are not known.
std::string attributionOf(const CallRecord& call, const KernelsOfCall& kernels);

}  // namespace nanprov
