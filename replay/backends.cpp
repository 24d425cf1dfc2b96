#include "replay/backends.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>

#include "base/text.h"
#include "replay/reference_blocks.h"
#include "replay/tensor_layout.h"

namespace nanprov::replay {
namespace {

// SDPA's numbering of its backends (sdp::SDPBackend).
int64_t sdpBackendNumber(const std::string& backend) {
  if (backend == "flash" || backend == "flash_cpu") return 1;
  if (backend == "efficient") return 2;
  if (backend == "cudnn") return 3;
  return 0;  // math
}

// The usual reason a backend refuses a call, for when SDPA's own message says little
// ("Invalid backend"). Limits as measured with torch 2.11 on the H200 (DESIGN.md).
std::string likelyReason(const std::string& backend, const CapturedCall& call) {
  if (backend == "flash" && call.has("mask")) return "flash attention takes no attention mask";
  if ((backend == "flash" || backend == "cudnn") && call.head_dim > 256) {
    return backend + " supports head_dim up to 256, this call has " + std::to_string(call.head_dim);
  }
  if (backend == "efficient" && call.kv_heads != call.q_heads) return "efficient attention takes no GQA";
  return "SDPA's checks refused this call";
}

// Collects SDPA's warnings: they say why a backend refused a call.
class WarningCollector : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    if (!text.empty()) text += "; ";
    text += firstLine(warning.msg());
  }
  std::string text;
};

// Enables exactly one SDPA backend for a scope, and restores the user's flags.
class OnlyBackend {
 public:
  explicit OnlyBackend(const std::string& backend) {
    auto& ctx = at::globalContext();
    saved_ = {ctx.userEnabledFlashSDP(), ctx.userEnabledMemEfficientSDP(), ctx.userEnabledCuDNNSDP(),
              ctx.userEnabledMathSDP()};
    ctx.setSDPUseFlash(backend == "flash" || backend == "flash_cpu");
    ctx.setSDPUseMemEfficient(backend == "efficient");
    ctx.setSDPUseCuDNN(backend == "cudnn");
    ctx.setSDPUseMath(backend == "math");
  }
  ~OnlyBackend() {
    auto& ctx = at::globalContext();
    ctx.setSDPUseFlash(saved_[0]);
    ctx.setSDPUseMemEfficient(saved_[1]);
    ctx.setSDPUseCuDNN(saved_[2]);
    ctx.setSDPUseMath(saved_[3]);
  }

 private:
  std::array<bool, 4> saved_{};
};

std::optional<at::Tensor> maskOn(const CapturedCall& call, const at::Device& device) {
  if (!call.has("mask")) return std::nullopt;
  return call.at("mask").to(device);
}

// What SDPA's front end does to a bool mask before a fused kernel sees it. cuDNN's conversion
// uses -65504, not -inf (aten/src/ATen/native/transformers/attention.cpp).
at::Tensor additiveMask(const at::Tensor& mask, const std::string& backend, at::ScalarType dtype) {
  if (mask.scalar_type() != at::kBool) return mask;
  double hidden = backend == "cudnn" ? -65504.0 : -std::numeric_limits<double>::infinity();
  return at::where(mask.logical_not(), at::scalar_tensor(hidden, mask.options().dtype(dtype)),
                   at::scalar_tensor(0.0, mask.options().dtype(dtype)));
}

// The efficient kernel reads the bias with rows padded to 16 elements, as SDPA arranges it.
at::Tensor alignedForEfficient(const at::Tensor& mask, const CapturedCall& call) {
  at::Tensor full = mask.expand({call.batch, call.q_heads, call.s_q, call.s_kv});
  int64_t pad = (16 - call.s_kv % 16) % 16;
  if (pad == 0) return full;
  return at::constant_pad_nd(full, {0, pad}).slice(-1, 0, call.s_kv);
}

at::Tensor normalizedLse(const at::Tensor& lse, const CapturedCall& call) {
  if (!lse.defined() || lse.numel() == 0) return at::Tensor();
  at::Tensor x = lse;
  if (x.dim() == 4 && x.size(-1) == 1) x = x.squeeze(-1);
  if (x.dim() != 3) return at::Tensor();
  if (x.size(-1) > call.s_q) x = x.slice(-1, 0, call.s_q);  // efficient pads rows to 32
  return x;
}

// The call's mask and causal mask applied to its scores, in the scores' dtype: a bool mask hides
// keys with -inf, a float mask is added.
at::Tensor masked(at::Tensor scores, const CapturedCall& call, const at::Device& device) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (std::optional<at::Tensor> mask = maskOn(call, device)) {
    scores = mask->scalar_type() == at::kBool ? scores.masked_fill(mask->logical_not(), neg_inf)
                                              : scores + mask->to(scores.scalar_type());
  }
  if (call.causal) {
    at::Tensor above = at::ones({call.s_q, call.s_kv}, scores.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(above, neg_inf);
  }
  return scores;
}

// In memory of its own, laid out as the run had it (tensor_layout.h): kernels pick their paths by it.
at::Tensor leaf(const at::Tensor& t, const at::Device& device, bool grad) {
  return replicaOn(t.detach(), device).requires_grad_(grad);
}

void differentiate(Outputs& out, const at::Tensor& o, const std::vector<at::Tensor>& qkv, const CapturedCall& call,
                   const at::Device& device) {
  if (!call.backward) return;
  auto grads = torch::autograd::grad({o}, qkv, {replicaOn(call.at("dO"), device)});
  out.dq = grads[0];
  out.dk = grads[1];
  out.dv = grads[2];
}

// softmax(q kᵀ·scale + mask) v in the input dtype, with no guard for a row that sees no key:
// what nn.MultiheadAttention (need_weights=True), Hugging Face's eager attention and attention
// written in plain ops compute. A fully masked row is NaN here, where SDPA's safe softmax and the
// reference give 0. The scale goes where the run put it (CapturedCall::scores_by): on Q, on the
// rounded product, or into baddbmm with the bias, rounded once.
at::Tensor plainSoftmaxAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::optional<at::Tensor>& mask, const CapturedCall& call) {
  const double scale = call.softmaxScale();
  at::Tensor scores;
  if (call.scores_by == "baddbmm") {
    at::Tensor q3 = q.reshape({-1, call.s_q, call.head_dim}), k3 = k.reshape({-1, call.s_kv, call.head_dim});
    const std::vector<int64_t> full = {call.batch, call.q_heads, call.s_q, call.s_kv};
    at::Tensor bias = mask ? mask->to(q.scalar_type()).expand(full).reshape({-1, call.s_q, call.s_kv})
                           : at::zeros({q3.size(0), call.s_q, call.s_kv}, q.options());
    scores = at::baddbmm(bias, q3, k3.transpose(1, 2), mask ? 1.0 : 0.0, scale).view(full);
  } else {
    scores = call.scores_by == "matmul" ? at::matmul(q, k.transpose(-2, -1)) * scale
                                        : at::matmul(q * scale, k.transpose(-2, -1));
    if (mask) scores = scores + *mask;
  }
  if (call.causal) {
    at::Tensor above = at::ones({call.s_q, call.s_kv}, scores.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(above, -std::numeric_limits<double>::infinity());
  }
  return at::matmul(at::softmax(scores, -1), v);
}

}  // namespace

std::vector<std::string> defaultBackends(const at::Device& device) {
  if (device.is_cuda()) return {"cudnn", "flash", "efficient", "math"};
  return {"flash_cpu", "math"};
}

std::string refusal(const std::string& backend, const CapturedCall& call, const at::Device& device) {
  if (backend == "flash_cpu" && device.is_cuda()) return "flash_cpu runs on the CPU; use --device cpu";
  if (backend != "flash_cpu" && backend != "math" && backend != "plain_softmax" && !device.is_cuda()) {
    return backend + " runs on CUDA only";
  }
  if (backend == "math" || backend == "plain_softmax") return "";
  // Laid out as the backend will get them: dispatch reads strides and alignment.
  at::Tensor q = replicaOn(call.at("Q"), device), k = replicaOn(call.at("K"), device),
             v = replicaOn(call.at("V"), device);
  std::optional<at::Tensor> mask = maskOn(call, device);
  WarningCollector warnings;
  c10::WarningUtils::WarningHandlerGuard guard(&warnings);
  OnlyBackend only(backend);
  std::string said;
  try {
    int64_t chosen = at::_fused_sdp_choice(q, k, v, mask, 0.0, call.causal, call.scale, call.kv_heads != call.q_heads);
    if (chosen == sdpBackendNumber(backend)) return "";
  } catch (const c10::Error& e) {
    said = firstLine(e.what_without_backtrace());
  }
  if (!warnings.text.empty()) return warnings.text;
  return likelyReason(backend, call) + (said.empty() ? "" : " (torch: " + said + ")");
}

StatusOr<Outputs> runBackend(const std::string& backend, const CapturedCall& call, const at::Device& device) {
  try {
    at::Tensor q = leaf(call.at("Q"), device, call.backward);
    at::Tensor k = leaf(call.at("K"), device, call.backward);
    at::Tensor v = leaf(call.at("V"), device, call.backward);
    int64_t groups = call.q_heads / call.kv_heads;
    // The fused kernels see K and V repeated per query head, as SDPA hands them over without
    // native GQA; autograd sums the gradients back per key/value head.
    at::Tensor kk = groups > 1 && backend != "math" ? k.repeat_interleave(groups, 1) : k;
    at::Tensor vv = groups > 1 && backend != "math" ? v.repeat_interleave(groups, 1) : v;
    std::optional<at::Tensor> mask = maskOn(call, device);
    // A bias nanprov materialised is float32 (FlexAttention's scores are); an SDPA user would pass
    // it in the query's dtype, which the efficient kernel requires and cuDNN silently mishandles.
    // The reference keeps it in float32.
    if (mask && call.materialised_bias) mask = mask->to(q.scalar_type());
    // Math too: its op adds the mask to the scores, so a bool one would add 1 where True.
    if (mask) mask = additiveMask(*mask, backend, q.scalar_type());
    if (mask && backend == "efficient") mask = alignedForEfficient(*mask, call);
    const double p = 0.0;  // the reference has no dropout: every backend is judged without it
    at::Tensor o, lse;
    if (backend == "flash_cpu") {
      std::tie(o, lse) = at::_scaled_dot_product_flash_attention_for_cpu(q, kk, vv, p, call.causal, mask, call.scale);
    } else if (backend == "efficient") {
      auto r = at::_scaled_dot_product_efficient_attention(q, kk, vv, mask, true, p, call.causal, call.scale);
      o = std::get<0>(r);
      lse = std::get<1>(r);
    } else if (backend == "flash") {
      auto r = at::_scaled_dot_product_flash_attention(q, kk, vv, p, call.causal, false, call.scale);
      o = std::get<0>(r);
      lse = std::get<1>(r);
    } else if (backend == "cudnn") {
      auto r = at::_scaled_dot_product_cudnn_attention(q, kk, vv, mask, true, p, call.causal, false, call.scale);
      o = std::get<0>(r);
      lse = std::get<1>(r);
    } else if (backend == "plain_softmax") {
      o = plainSoftmaxAttention(q, kk, vv, mask, call);
    } else if (backend == "math") {
      o = std::get<0>(
          at::_scaled_dot_product_attention_math(q, k, v, mask, p, call.causal, std::nullopt, call.scale, groups > 1));
    } else {
      return Status::Error("unknown backend " + backend);
    }
    Outputs out;
    out.o = o.detach();
    out.lse = lse.defined() ? normalizedLse(lse.detach(), call) : at::Tensor();
    differentiate(out, o, {q, k, v}, call, device);
    return out;
  } catch (const c10::Error& e) {
    return Status::Error(firstLine(e.what_without_backtrace()));
  }
}

Outputs runYardstick(const CapturedCall& call, const at::Device& device) {
  at::Tensor q = leaf(call.at("Q"), device, call.backward);
  at::Tensor k = leaf(call.at("K"), device, call.backward);
  at::Tensor v = leaf(call.at("V"), device, call.backward);
  int64_t groups = call.q_heads / call.kv_heads;
  at::Tensor kk = groups > 1 ? k.repeat_interleave(groups, 1) : k;
  at::Tensor vv = groups > 1 ? v.repeat_interleave(groups, 1) : v;
  at::Tensor scores = masked(at::matmul(q, (kk * call.softmaxScale()).transpose(-2, -1)), call, device);
  at::Tensor logits = scores.to(at::kFloat);
  at::Tensor lse = at::logsumexp(logits, -1);
  // A row that sees no key gives 0, as PyTorch's safe softmax does.
  at::Tensor hidden = at::isneginf(lse).unsqueeze(-1);
  at::Tensor probs = at::softmax(logits, -1).masked_fill(hidden, 0.0).to(q.scalar_type());
  at::Tensor o = at::matmul(probs, vv);
  Outputs out;
  out.o = o.detach();
  out.lse = lse.detach();
  differentiate(out, o, {q, k, v}, call, device);
  return out;
}

Outputs runFlashOrderedYardstick(const CapturedCall& call, const at::Tensor& reference_o, const at::Device& device) {
  Outputs out;
  if (!call.backward || !reference_o.defined() || !call.has("dO")) return out;
  const at::ScalarType dtype = call.at("Q").scalar_type();
  // The kernel's operands are the input dtype's values; it multiplies them with float32 sums.
  auto widened = [&](const char* role) { return call.at(role).to(device).to(at::kFloat); };
  at::Tensor q = widened("Q"), k = widened("K"), v = widened("V"), d_o = widened("dO");
  // A right forward's O as it is stored, in the input dtype; not the O the call was given, which
  // may itself be wrong (then the backward's finding says so, received_wrong).
  at::Tensor o = reference_o.to(device).to(dtype).to(at::kFloat);
  const int64_t groups = call.q_heads / call.kv_heads;
  at::Tensor kk = groups > 1 ? k.repeat_interleave(groups, 1) : k;
  at::Tensor vv = groups > 1 ? v.repeat_interleave(groups, 1) : v;
  const double scale = call.softmaxScale();
  at::Tensor scores = masked(at::matmul(q, kk.transpose(-2, -1)) * scale, call, device);
  at::Tensor lse = at::logsumexp(scores, -1, true);
  at::Tensor probs = at::exp(scores - lse).masked_fill(at::isneginf(lse), 0.0);
  // D = rowsum(dO ∘ O) from O rounded to the input dtype, as the kernel is handed it: where P is
  // near uniform and the keys share a large mean, dQ = Σ P (dP − D) k is a small difference of
  // large terms, and that rounding alone moves it far from float64 (seen: PyTorch's CPU flash
  // kernel at cosine 0.997; whether cuDNN's lower cosines on the H200 are this is open,
  // docs/validation.md).
  at::Tensor delta = (d_o * o).sum(-1, true);
  at::Tensor dp = at::matmul(d_o, vv.transpose(-2, -1));
  at::Tensor ds = (probs * (dp - delta)).to(dtype).to(at::kFloat);  // dS is stored in the input dtype
  auto perKvHead = [&](const at::Tensor& t) {  // the query heads of a group summed onto their KV head
    if (groups == 1) return t;
    auto sizes = t.sizes().vec();
    return t.view({sizes[0], call.kv_heads, groups, sizes[2], sizes[3]}).sum(2);
  };
  out.dq = (at::matmul(ds, kk) * scale).to(dtype);
  out.dk = perKvHead(at::matmul(ds.transpose(-2, -1), q) * scale).to(dtype);
  out.dv = perKvHead(at::matmul(probs.to(dtype).to(at::kFloat).transpose(-2, -1), d_o)).to(dtype);
  return out;
}

StatusOr<Outputs> runReference(const CapturedCall& call, bool on_cuda, std::string* where) {
  if (call.q_heads % call.kv_heads != 0) {
    return Status::Error("reference attention: " + std::to_string(call.q_heads) + " query heads is not a multiple of " +
                         std::to_string(call.kv_heads) + " key/value heads");
  }
  at::Device device = on_cuda && at::hasCUDA() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  *where = device.str();
  ReferenceInputs in;
  in.q = call.at("Q");
  in.k = call.at("K");
  in.v = call.at("V");
  if (call.has("mask")) in.mask = call.at("mask");
  if (call.backward) in.dout = call.at("dO");
  in.scale = call.softmaxScale();
  in.causal = call.causal;
  ReferenceOutputs g = referenceByBlocks(in, device);
  // Left where it was computed: the comparisons measure each output there (replay_main.cpp).
  Outputs out;
  out.o = g.o;
  out.lse = g.lse;
  if (call.backward) {
    out.dq = g.dq;
    out.dk = g.dk;
    out.dv = g.dv;
  }
  return out;
}

namespace {
at::Tensor taken(const CapturedCall& call, const char* role) { return call.has(role) ? call.at(role) : at::Tensor(); }
}  // namespace

Outputs forwardOutputsIn(const CapturedCall& call) {
  Outputs out;
  out.o = taken(call, "O");
  out.lse = normalizedLse(taken(call, "LSE"), call);
  return out;
}

Outputs capturedOutputs(const CapturedCall& call) {
  if (!call.backward) return forwardOutputsIn(call);
  Outputs out;
  out.dq = taken(call, "dQ");
  out.dk = taken(call, "dK");
  out.dv = taken(call, "dV");
  return out;
}

}  // namespace nanprov::replay
