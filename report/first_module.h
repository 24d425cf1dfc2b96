// `nanprov run --trail`: the first module that made a non-finite value, when attention did not.
// Worked out from the stored module checks for the report's model, and said in its words for the
// text, JSON and HTML reports.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/records/call_record.h"
#include "report/edges.h"

namespace nanprov::store {
struct RunData;  // store/reader.h: the model's types need no store header
}  // namespace nanprov::store

namespace nanprov::report {

struct RunOverview;

struct FirstModule {
  ModuleCheckRecord check;
  // Backward: the other modules that take the input it sent its non-finite gradient to and were
  // judged on the same gradient (the sum of theirs) with finite gradients received: any of them
  // may have made it. Modules around it or inside it are not listed.
  std::vector<std::string> shares_gradient_with;
};

// The first step and phase (a step's forward before its backward) that had a non-finite module
// output, and in it the first module call (inner modules end first) whose inputs were finite: the
// innermost module around whatever made the value. When none had finite inputs (the value came with
// the batch, or from the loss), the first call.
// None without --trail, or when the first non-finite value was attention's own (the first edge is
// a source edge, and the module is its attention module or one around it).
std::optional<FirstModule> firstModule(const store::RunData& run, const Findings& findings);

// Whether --trail ran alongside torch.compile'd code whose modules' backward it did not check
// (RunCounters::trail_compiled_backward is not kChecked).
bool trailMissedCompiledCode(const store::RunData& run);

// {rank, step, phase, module, class, inputs_finite, nonfinite, largest_input, shares_gradient_with,
// unchecked_before}, or null.
nlohmann::json firstModuleJson(const std::optional<FirstModule>& m);

// What the first non-finite value was, for people: "the output of transformer.h.0.ln_1
// (LayerNorm), from finite inputs (largest |x| 3.4e+38)". `at` adds its step and phase. Texts from
// the store are printed escaped.
std::string firstModuleText(const FirstModule& m, StepUnit unit, bool at);

// The headline's words when `m`, the module --trail named, is attention the run counted unchecked
// (Conclusion::made_in_unchecked_attention): "the first non-finite values were made inside
// blocks.0.attn (LinearAttention) at step 2 fwd, from finite inputs (...): unchecked attention, so
// the kernel that made them is not known".
std::string madeInUncheckedAttentionText(const FirstModule& m, StepUnit unit);

// Where the report's upstream edge says the values came from: the first module when --trail
// named one, else that the origin is outside attention (and that --trail would name the module).
std::string upstreamOriginText(const RunOverview& run, const std::optional<FirstModule>& m, const CallRecord& edge);

}  // namespace nanprov::report
