#include "base/records/call_record.h"

#include <utility>

namespace nanprov {

const char* stepUnitName(StepUnit u) { return u == StepUnit::kForwardPass ? "forward_pass" : "optimizer_step"; }

namespace {
// A closed set's names, one table each: the name of a value (`fallback` for none listed) and the
// value of a name.
template <typename E, size_t N>
const char* nameIn(const std::pair<E, std::string_view> (&table)[N], E value, const char* fallback) {
  for (const auto& [known, name] : table) {
    if (known == value) return name.data();
  }
  return fallback;
}
template <typename E, size_t N>
std::optional<E> valueIn(const std::pair<E, std::string_view> (&table)[N], std::string_view name) {
  for (const auto& [value, known] : table) {
    if (known == name) return value;
  }
  return std::nullopt;
}

constexpr std::pair<CaptureTrigger, std::string_view> kTriggers[] = {
    {CaptureTrigger::kFirstSourceEdge, "first-source-edge"},
    {CaptureTrigger::kSelector, "selector"},
    {CaptureTrigger::kEvery, "every"},
    {CaptureTrigger::kAudit, "audit"},
};
}  // namespace

std::optional<int64_t> maskedQueryRows(const CallRecord& call, const TensorHealth& mask) {
  auto rows = [](const TensorHealth& t) -> int64_t {
    const int64_t last = t.shape.ndim ? t.shape.dims[static_cast<size_t>(t.shape.ndim - 1)] : 0;
    return last > 0 ? t.numel / last : 0;
  };
  if (mask.masked_rows < 0) return std::nullopt;
  for (const TensorHealth& q : call.tensors) {
    if (q.role != Role::kQ) continue;
    const int64_t query_rows = rows(q), mask_rows = rows(mask);
    if (mask_rows <= 0 || query_rows % mask_rows != 0 || mask.masked_rows > mask_rows) return std::nullopt;
    return mask.masked_rows * (query_rows / mask_rows);
  }
  return std::nullopt;
}

const char* captureTriggerName(CaptureTrigger t) { return nameIn(kTriggers, t, "selector"); }

std::optional<CaptureTrigger> captureTriggerNamed(std::string_view name) { return valueIn(kTriggers, name); }

namespace {
constexpr std::pair<SentinelTensor, std::string_view> kSentinelTensors[] = {
    {SentinelTensor::kGrad, "grad"},
    {SentinelTensor::kParam, "param"},
};
}  // namespace

const char* sentinelTensorName(SentinelTensor t) { return nameIn(kSentinelTensors, t, "grad"); }

std::optional<SentinelTensor> sentinelTensorNamed(std::string_view name) { return valueIn(kSentinelTensors, name); }

namespace {
constexpr std::pair<ModuleInputs, const char*> kModuleInputs[] = {
    {ModuleInputs::kFinite, "finite"},
    {ModuleInputs::kNonFinite, "non_finite"},
    {ModuleInputs::kNone, "none"},
    {ModuleInputs::kPartlySeen, "partly_seen"},
};
}  // namespace

const char* moduleInputsName(ModuleInputs m) {
  for (const auto& [value, name] : kModuleInputs) {
    if (value == m) return name;
  }
  return "finite";
}

bool parseModuleInputs(const std::string& text, ModuleInputs* out) {
  for (const auto& [value, name] : kModuleInputs) {
    if (text == name) return *out = value, true;
  }
  return false;
}

const char* phaseName(Phase p) { return p == Phase::kForward ? "fwd" : "bwd"; }

bool parsePhase(const std::string& text, Phase* out) {
  if (text == "fwd" || text == "forward") {
    *out = Phase::kForward;
    return true;
  }
  if (text == "bwd" || text == "backward") {
    *out = Phase::kBackward;
    return true;
  }
  return false;
}

std::string shortKernelName(const std::string& name) {
  // "(anonymous namespace)" is a scope, not a parameter list.
  std::string text = name;
  static const std::string kAnon = "(anonymous namespace)";
  for (size_t at; (at = text.find(kAnon)) != std::string::npos;) text.replace(at, kAnon.size(), "anon");
  std::string out;
  int depth = 0;
  for (char ch : text) {
    if (ch == '<' || ch == '(') {
      if (ch == '(' && depth == 0) break;  // the parameter list ends the name
      ++depth;
    } else if (ch == '>' || ch == ')') {
      depth = depth > 0 ? depth - 1 : 0;
    } else if (depth == 0) {
      out += ch;
    }
  }
  // "void foo" (a demangled function's return type) → "foo"
  if (auto space = out.rfind(' '); space != std::string::npos) out = out.substr(space + 1);
  return out.empty() ? name : out;
}

const KernelRecord* mainKernel(const CallKernels& kernels) {
  const KernelRecord* best = nullptr;
  for (const KernelRecord* k : kernels) {
    if (!best || k->end_ns - k->start_ns > best->end_ns - best->start_ns) best = k;
  }
  return best;
}

const KernelRecord* mainKernel(const std::vector<KernelRecord>& kernels) {
  CallKernels all;
  for (const KernelRecord& k : kernels) all.push_back(&k);
  return mainKernel(all);
}

}  // namespace nanprov
