// The kernels of one call, for people and scripts: short names, the main kernel, JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "store/call_record.h"

namespace nanprov {

using CallKernels = std::vector<const KernelRecord*>;

// A demangled name without template arguments and parameters:
// "cudnn::fusion::compute_dot_do_o_specialized<...>(...)" → "cudnn::fusion::compute_dot_do_o_specialized".
std::string shortKernelName(const std::string& name);

// The kernel that ran longest: the attention kernel itself, not the copies and fills around it.
const KernelRecord* mainKernel(const CallKernels& kernels);

nlohmann::json kernelsJson(const CallKernels& kernels);

// "cpu op", "cuda:0 via CUPTI", or the reason the kernels are not known.
std::string attributionOf(const CallRecord& call, const CallKernels& kernels);

}  // namespace nanprov
