// Attention told by its name: a module whose class or path says it computes attention. The trail
// (probes/libtorch/module_trail.h) counts such a module as unchecked attention when no attention
// op nanprov checks ran inside it (linear attention, a custom kernel), and the report joins what
// the trail found in one to that fact. Pure text, shared by the probes and the report.
#pragma once

#include <string>
#include <string_view>

namespace nanprov {

// A class named ...Attention or ...Attn (LlamaAttention, CausalSelfAttention, LinearAttention),
// or a path whose last part is attn, attention, self_attn, cross_attn... (digits after it too:
// diffusers' attn1, attn2). Not a norm or a projection around attention (post_attention_layernorm,
// attn.c_proj): only the part itself.
bool looksLikeAttention(std::string_view path, std::string_view module_class);

// "layers.3.attn" → "layers.*.attn": the path of every layer's module at once, as --probe-module
// matches it.
std::string modulePattern(std::string_view path);

// Whether `path` matches `pattern` as modulePattern writes it ('*' stands for one integer part).
bool matchesModulePattern(std::string_view pattern, std::string_view path);

}  // namespace nanprov
