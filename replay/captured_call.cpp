#include "replay/captured_call.h"

#include <cmath>
#include <cstdlib>

#include "base/numbers.h"
#include "base/records/torch_dtype.h"
#include "base/text.h"
#include "replay/packed_layouts.h"
#include "replay/score_bias.h"
#include "replay/tensor_layout.h"

namespace nanprov::replay {
namespace {

std::string shapeText(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? "," : "") + std::to_string(t.size(d));
  return s + "]";
}

// PyTorch's fast path (aten::_native_multi_head_attention) captures its inputs before its own
// in-projection and its output after the out-projection. Replay turns it into the SDPA call the op
// computes: Q, K, V projected with the captured qkv weights and split into heads, the mask in SDPA's
// sense (the op's bool masks say True = masked out). The run's O, after the out-projection, cannot
// be compared with attention outputs and is set aside.
Status unpackFastPath(CapturedCall& call) {
  for (const char* name : {"Q", "K", "V", "qkv_weight", "qkv_bias"}) {
    if (!call.has(name)) return Status::Error(std::string("a fast-path capture without ") + name);
  }
  const at::Tensor& w = call.at("qkv_weight");
  const at::Tensor& b = call.at("qkv_bias");
  auto heads = parseInteger(call.metaOr("arg.num_head"), 1, 1 << 16);
  if (w.dim() != 2 || w.size(0) % 3 != 0 || b.dim() != 1 || b.size(0) != w.size(0)) {
    return Status::Error("qkv_weight " + shapeText(w) + " and qkv_bias " + shapeText(b) +
                         " are not a [3E, E] projection");
  }
  const int64_t embed = w.size(0) / 3;
  if (!heads || embed % *heads != 0)
    return Status::Error("arg.num_head does not divide the embedding of " + std::to_string(embed));
  for (const char* role : {"Q", "K", "V"}) {
    const at::Tensor& x = call.at(role);
    if (x.dim() != 3 || x.size(2) != w.size(1)) {
      return Status::Error(std::string(role) + " is " + shapeText(x) + ", not [batch, seq, " +
                           std::to_string(w.size(1)) + "]");
    }
  }
  std::vector<at::Tensor> ws = w.chunk(3, 0), bs = b.chunk(3, 0);
  std::map<std::string, at::Tensor> projected;
  for (int i = 0; i < 3; ++i) {
    std::string role = i == 0 ? "Q" : i == 1 ? "K" : "V";
    const at::Tensor& x = call.at(role);
    at::Tensor y = at::linear(x, ws[i], bs[i]);
    projected[role] = y.view({x.size(0), x.size(1), *heads, embed / *heads}).transpose(1, 2).contiguous();
  }
  for (auto& [role, y] : projected) call.tensors[role] = y;
  if (call.has("mask")) {
    // A bool mask says True = masked out; a float one is already additive (-inf where masked).
    at::Tensor mask = call.at("mask");
    if (mask.scalar_type() == at::kBool) mask = mask.logical_not();
    if (call.metaOr("arg.mask_type") == "1") {
      if (mask.dim() != 2)
        return Status::Error("a key padding mask (mask_type 1) of " + shapeText(mask) + ", not [batch, seq]");
      mask = mask.view({mask.size(0), 1, 1, mask.size(1)});
    }
    call.tensors["mask"] = mask;
  }
  call.tensors.erase("O");
  call.meta["replay.note"] =
      "fast-path capture: Q, K and V projected with the captured qkv weights; the run's O "
      "(after the out-projection) is not compared";
  return Status::Ok();
}

}  // namespace

std::string CapturedCall::metaOr(const std::string& key, const std::string& fallback) const {
  auto it = meta.find(key);
  return it == meta.end() ? fallback : it->second;
}

double CapturedCall::softmaxScale() const { return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim)); }

store::CaptureTensor toCaptureTensor(const std::string& name, const at::Tensor& t) {
  at::Tensor host = t.cpu().contiguous();
  store::CaptureTensor out;
  out.name = name;
  out.dtype = captureDtypeOf(host.scalar_type());
  out.shape = host.sizes().vec();
  const auto* bytes = static_cast<const uint8_t*>(host.data_ptr());
  out.bytes.assign(bytes, bytes + host.nbytes());
  return out;
}

std::string dtypeName(const at::Tensor& t) {
  const char* cpp = c10::toString(t.scalar_type());  // "BFloat16"
  // An integer keeps LibTorch's name ("mask is Long"), as replay's refusals of one have always said it.
  if (at::isIntegralType(t.scalar_type(), /*includeBool=*/false)) return cpp;
  return torchDtypeName(cpp);
}

StatusOr<CapturedCall> toCapturedCall(const store::CaptureFile& file, const std::string& source) {
  auto bad = [&](const std::string& why) {
    return Status::Error(source + ": not a replayable attention capture (" + why + ")");
  };
  CapturedCall call;
  call.meta = file.metadata;
  for (const store::CaptureTensor& t : file.tensors) {
    auto type = scalarTypeOfCapture(t.dtype);
    if (!type) return bad("tensor " + t.name + " has dtype " + t.dtype + ", which replay does not read");
    at::Tensor x = at::empty(t.shape, at::TensorOptions().dtype(*type));
    if (static_cast<size_t>(x.nbytes()) != t.bytes.size()) return bad("tensor " + t.name + " has the wrong byte count");
    std::memcpy(x.data_ptr(), t.bytes.data(), t.bytes.size());
    // Laid out as in the run, before any reshaping below: the recorded strides are in the
    // captured tensor's own dimension order.
    auto recorded = recordedLayout(file.metadata, t.name, x.dim());
    if (!recorded.ok()) return bad(recorded.status().message());
    LayoutReport report;
    report.role = t.name;
    call.tensors[t.name] = withRecordedLayout(x, recorded.value(), &report);
    call.layouts.push_back(std::move(report));
  }
  if (call.metaOr("op") == "aten::_native_multi_head_attention") {
    if (Status st = unpackFastPath(call); !st.ok()) return bad(st.message());
  }
  if (Status st = toHeadsFirst(call); !st.ok()) return bad(st.message());
  // Why the call's semantics are not all in the capture, when the probe knew (arg.mask_note: older captures).
  std::string note = call.metaOr("arg.note", call.metaOr("arg.mask_note"));
  if (call.metaOr("op") == "flex_attention") {
    if (call.has("mask")) {
      call.materialised_bias = true;
      call.meta["replay.note"] =
          "FlexAttention capture: the mask is the additive bias its score_mod and block mask applied, "
          "materialised by nanprov";
    } else {
      call.incomplete = note.empty() ? "its score_mod and block mask were not materialised" : note;
      call.meta["replay.note"] = "FlexAttention capture without its bias (" + call.incomplete +
                                 "): replayed as plain attention, which differs from the call";
    }
  } else if (!note.empty()) {
    call.incomplete = note;
    call.meta["replay.note"] = note;
  }
  for (const char* role : {"Q", "K", "V"}) {
    if (!call.has(role)) return bad(std::string("no ") + role + " tensor");
    if (call.at(role).dim() != 4)
      return bad(std::string(role) + " is " + shapeText(call.at(role)) + ", replay needs [batch, heads, seq, dim]");
  }
  // Attention computes in floating point: integer or bool Q/K/V/O/LSE/gradients are not a call
  // any backend made (SDPA would fail deep inside with a stack trace). Masks may be bool, and
  // bookkeeping tensors (a CUDA call's philox seed and offset) are integers.
  for (const char* role : {"Q", "K", "V", "O", "LSE", "dO", "dQ", "dK", "dV"}) {
    if (call.has(role) && !at::isFloatingType(call.at(role).scalar_type())) {
      return bad(std::string("tensor ") + role + " is " + dtypeName(call.at(role)) +
                 "; attention tensors are floating point");
    }
  }
  const at::Tensor &q = call.at("Q"), &k = call.at("K"), &v = call.at("V");
  if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type()) {
    return bad("Q, K and V differ in dtype (" + dtypeName(q) + ", " + dtypeName(k) + ", " + dtypeName(v) + ")");
  }
  call.batch = q.size(0);
  call.q_heads = q.size(1);
  call.s_q = q.size(2);
  call.head_dim = q.size(3);
  call.kv_heads = k.size(1);
  call.s_kv = k.size(2);
  call.v_dim = v.size(3);
  if (k.size(0) != call.batch || v.size(0) != call.batch || v.size(1) != call.kv_heads || v.size(2) != call.s_kv ||
      k.size(3) != call.head_dim) {
    return bad("Q " + shapeText(q) + ", K " + shapeText(k) + " and V " + shapeText(v) +
               " do not make one attention call");
  }
  if (call.kv_heads == 0 || call.q_heads % call.kv_heads != 0) {
    return bad(std::to_string(call.q_heads) + " query heads are not a multiple of " + std::to_string(call.kv_heads) +
               " key/value heads");
  }
  std::vector<int64_t> out_shape = {call.batch, call.q_heads, call.s_q, call.v_dim};
  for (const char* role : {"O", "dO"}) {
    if (call.has(role) && call.at(role).sizes() != at::IntArrayRef(out_shape)) {
      return bad(std::string(role) + " is " + shapeText(call.at(role)) + ", not [batch, q heads, s_q, v dim]");
    }
  }
  for (const auto& [grad, of] : {std::pair{"dQ", "Q"}, std::pair{"dK", "K"}, std::pair{"dV", "V"}}) {
    if (call.has(grad) && call.at(grad).sizes() != call.at(of).sizes())
      return bad(std::string(grad) + " and " + of + " differ in shape");
  }
  if (call.has("LSE")) {
    // [batch, q heads, s_q], or padded past s_q (efficient pads rows to 32), or with a trailing 1.
    const at::Tensor& lse = call.at("LSE");
    const bool trailing_one = lse.dim() == 4 && lse.size(3) == 1;
    if (!(lse.dim() == 3 || trailing_one) || lse.size(0) != call.batch || lse.size(1) != call.q_heads ||
        lse.size(2) < call.s_q) {
      return bad("LSE is " + shapeText(lse) + ", not [batch, q heads, s_q]");
    }
  }
  if (call.has("mask")) {
    const at::Tensor& m = call.at("mask");
    // SDPA takes a bool mask (true: may attend) or an additive float one; an integer mask is
    // refused by every fused backend, and the MATH backend's reading of it is no call the run made.
    if (m.scalar_type() != at::kBool && !at::isFloatingType(m.scalar_type())) {
      return bad("mask is " + dtypeName(m) + "; attention masks are bool or floating point");
    }
    std::vector<int64_t> full = {call.batch, call.q_heads, call.s_q, call.s_kv};
    bool broadcasts = m.dim() <= 4;
    for (int64_t d = 0; broadcasts && d < m.dim(); ++d) {
      int64_t size = m.size(m.dim() - 1 - d), want = full[3 - d];
      broadcasts = size == want || size == 1;
    }
    if (!broadcasts) return bad("mask " + shapeText(m) + " does not broadcast to [batch, q heads, s_q, s_kv]");
  }
  call.backward = call.metaOr("phase") == "bwd";
  if (call.backward && !call.has("dO")) return bad("a backward capture without dO");
  std::string scale = call.metaOr("arg.scale", "None");
  if (scale != "None") {
    call.scale = parseFiniteDouble(scale);
    if (!call.scale) return bad("arg.scale '" + scale + "' is not a finite number");
  }
  // Attention written in plain ops: its scale and bias read from its scores (score_bias.h).
  call.scores_by = call.metaOr("arg.scores_by");
  if (Status st = deriveScoreBias(call); !st.ok()) return bad(st.message());
  std::string causal = call.metaOr("arg.is_causal", "false");
  if (causal != "true" && causal != "false") return bad("arg.is_causal '" + causal + "' is not true or false");
  call.causal = causal == "true";
  call.dropout_recorded = call.meta.count("arg.dropout_p") > 0;
  std::string dropout = call.metaOr("arg.dropout_p", "0");
  auto dropout_p = parseFiniteDouble(dropout);
  if (!dropout_p || *dropout_p < 0 || *dropout_p > 1) return bad("arg.dropout_p '" + dropout + "' is not in [0, 1]");
  call.dropout_p = *dropout_p;
  if (call.dropout_p > 0) {
    // The run drew its dropout mask at random; no backend can recompute the outputs it made.
    call.incomplete += (call.incomplete.empty() ? "" : "; ") + std::string("dropout p=") + shortNumber(call.dropout_p) +
                       ", whose random mask is not in the capture";
  }
  return call;
}

}  // namespace nanprov::replay
