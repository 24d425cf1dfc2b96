// `nanprov run --trail`: the first module that made a non-finite value, when attention did not.
// Pure logic over the stored module checks (store/reader.h), shared by the text, JSON and HTML
// reports.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/records/call_record.h"
#include "report/edges.h"
#include "store/reader.h"

namespace nanprov {

// The first step that had a non-finite module output, and in it the first module call (inner
// modules end first) whose inputs were finite: the innermost module around whatever made the value.
// When none had finite inputs (the value came with the batch, or from the loss), the first call.
// None without --trail, or when the first non-finite value was attention's own (the first edge is
// a source edge, and the module is its attention module or one around it).
std::optional<ModuleCheckRecord> firstModule(const RunData& run, const Findings& findings);

// Backward: the other modules that take the input `m` sent its non-finite gradient to and were
// judged on the same gradient (the sum of theirs) with finite gradients received: any of them may
// have made it. Modules around `m` or inside it are not listed.
std::vector<std::string> sharingItsGradient(const RunData& run, const ModuleCheckRecord& m);

// {rank, step, phase, module, class, inputs_finite, nonfinite, largest_input, shares_gradient_with},
// or null.
nlohmann::json firstModuleJson(const RunData& run, const std::optional<ModuleCheckRecord>& m);

// What the first non-finite value was, for people: "the output of transformer.h.0.ln_1
// (LayerNorm), from finite inputs (largest |x| 3.4e+38)". `at` adds its step and phase. Texts from
// the store are printed escaped.
std::string firstModuleText(const RunData& run, const ModuleCheckRecord& m, bool at);

// The headline's words when `m`, the module --trail named, is attention the run counted unchecked
// (Conclusion::made_in_unchecked_attention): "the first non-finite values were made inside
// blocks.0.attn (LinearAttention) at step 2 fwd, from finite inputs (...): unchecked attention, so
// the kernel that made them is not known".
std::string madeInUncheckedAttentionText(const RunData& run, const ModuleCheckRecord& m);

// Whether --trail ran alongside torch.compile'd code whose modules' backward it did not check
// (meta trail_compiled_backward is not "checked").
bool trailMissedCompiledCode(const RunData& run);

// Where the report's upstream edge says the values came from: the first module when --trail
// named one, else that the origin is outside attention (and that --trail would name the module).
std::string upstreamOriginText(const RunData& run, const std::optional<ModuleCheckRecord>& m, const CallRecord& edge);

}  // namespace nanprov
