#include "replay/packed_layouts.h"

#include <string>
#include <vector>

namespace nanprov::replay {
namespace {

const char* const kRoles[] = {"Q", "K", "V", "O", "dO", "dQ", "dK", "dV"};
bool keySide(const std::string& role) { return role == "K" || role == "V" || role == "dK" || role == "dV"; }

// Sequence boundaries [0, l0, l0+l1, ...] of `total` packed rows, checked.
StatusOr<std::vector<int64_t>> boundaries(const CapturedCall& call, const char* name, int64_t total) {
  if (!call.has(name)) return Status::Error(std::string("a packed (thd) capture without ") + name);
  at::Tensor cu = call.at(name);
  if (cu.dim() != 1 || cu.numel() < 2 || at::isFloatingType(cu.scalar_type())) {
    return Status::Error(std::string(name) + " is not a 1-D integer tensor of batch + 1 offsets");
  }
  cu = cu.to(at::kLong).contiguous();
  std::vector<int64_t> b(cu.data_ptr<int64_t>(), cu.data_ptr<int64_t>() + cu.numel());
  if (b.front() != 0 || b.back() != total) {
    return Status::Error(std::string(name) + " runs from " + std::to_string(b.front()) + " to " +
                         std::to_string(b.back()) + ", not from 0 to the " + std::to_string(total) + " packed rows");
  }
  for (size_t i = 1; i < b.size(); ++i) {
    if (b[i] < b[i - 1]) return Status::Error(std::string(name) + " is not non-decreasing");
  }
  return b;
}

int64_t longest(const std::vector<int64_t>& b) {
  int64_t n = 0;
  for (size_t i = 1; i < b.size(); ++i) n = std::max(n, b[i] - b[i - 1]);
  return n;
}

// (total, H, D) rows → (B, H, longest, D), zero-padded.
at::Tensor unpack(const at::Tensor& packed, const std::vector<int64_t>& b) {
  const int64_t batch = static_cast<int64_t>(b.size()) - 1;
  at::Tensor out = at::zeros({batch, packed.size(1), longest(b), packed.size(2)}, packed.options());
  for (int64_t i = 0; i < batch; ++i) {
    if (b[i + 1] > b[i])
      out[i].narrow(1, 0, b[i + 1] - b[i]).copy_(packed.narrow(0, b[i], b[i + 1] - b[i]).transpose(0, 1));
  }
  return out;
}

at::Tensor validRows(const std::vector<int64_t>& b) {
  const int64_t batch = static_cast<int64_t>(b.size()) - 1;
  at::Tensor valid = at::zeros({batch, longest(b)}, at::kBool);
  for (int64_t i = 0; i < batch; ++i) valid[i].narrow(0, 0, b[i + 1] - b[i]).fill_(true);
  return valid;
}

// Bottom-right causal mask (FlashAttention's) per sequence: query i sees key j when
// j <= i + (len_kv - len_q), and keys past len_kv never. True = attend.
at::Tensor causalMask(const at::Tensor& len_q, const at::Tensor& len_kv, int64_t s_q, int64_t s_kv, bool causal) {
  at::Tensor i = at::arange(s_q, at::kLong).view({1, 1, s_q, 1});
  at::Tensor j = at::arange(s_kv, at::kLong).view({1, 1, 1, s_kv});
  at::Tensor lq = len_q.view({-1, 1, 1, 1}), lk = len_kv.view({-1, 1, 1, 1});
  at::Tensor allow = j < lk;
  if (causal) allow = allow & (j <= i + (lk - lq));
  return allow;
}

}  // namespace

Status toHeadsFirst(CapturedCall& call) {
  std::string layout = call.metaOr("arg.layout", "bhsd");
  if (layout == "bhsd") return Status::Ok();
  if (layout != "bshd" && layout != "thd") return Status::Error("arg.layout '" + layout + "' is not bhsd, bshd or thd");
  if (call.has("mask"))
    return Status::Error("a " + layout + " capture with a mask, which FlashAttention calls never have");
  bool causal = call.metaOr("arg.is_causal", "false") == "true";
  at::Tensor len_q, len_kv;
  if (layout == "bshd") {
    for (const char* role : kRoles) {
      if (!call.has(role)) continue;
      if (call.at(role).dim() != 4) return Status::Error(std::string(role) + " of a bshd capture is not 4-D");
      call.tensors[role] = call.at(role).transpose(1, 2).contiguous();
    }
    if (!call.has("Q") || !call.has("K")) return Status::Error("a bshd capture without Q and K");
    const int64_t batch = call.at("Q").size(0), s_q = call.at("Q").size(2), s_kv = call.at("K").size(2);
    if (!causal || s_q == s_kv) return Status::Ok();  // SDPA's is_causal is the same mask
    len_q = at::full({batch}, s_q, at::kLong);
    len_kv = at::full({batch}, s_kv, at::kLong);
  } else {
    if (!call.has("Q") || !call.has("K")) return Status::Error("a thd capture without Q and K");
    for (const char* role : kRoles) {
      if (call.has(role) && call.at(role).dim() != 3)
        return Status::Error(std::string(role) + " of a thd capture is not (total, heads, dim)");
    }
    NANPROV_ASSIGN_OR_RETURN(auto bq, boundaries(call, "cu_seqlens_q", call.at("Q").size(0)));
    NANPROV_ASSIGN_OR_RETURN(auto bk, boundaries(call, "cu_seqlens_k", call.at("K").size(0)));
    if (bq.size() != bk.size()) return Status::Error("cu_seqlens_q and cu_seqlens_k hold different batch sizes");
    for (const char* role : kRoles) {
      if (call.has(role)) call.tensors[role] = unpack(call.at(role), keySide(role) ? bk : bq);
    }
    call.tensors.erase("cu_seqlens_q");  // consumed: the call is now a padded batch
    call.tensors.erase("cu_seqlens_k");
    call.valid_q = validRows(bq);
    call.valid_kv = validRows(bk);
    len_q = call.valid_q.sum(1);
    len_kv = call.valid_kv.sum(1);
  }
  call.tensors["mask"] = causalMask(len_q, len_kv, call.at("Q").size(2), call.at("K").size(2), causal);
  call.meta["arg.is_causal"] = "false";  // folded into the mask
  return Status::Ok();
}

void zeroPadding(const CapturedCall& call, Outputs& out) {
  if (!call.valid_q.defined()) return;
  auto zero = [](at::Tensor& t, const at::Tensor& valid) {
    if (!t.defined()) return;
    at::Tensor keep = valid.to(t.device());
    keep = t.dim() == 4 ? keep.view({keep.size(0), 1, keep.size(1), 1}) : keep.view({keep.size(0), 1, keep.size(1)});
    t = at::where(keep, t, at::zeros({}, t.options()));
  };
  zero(out.o, call.valid_q);
  zero(out.lse, call.valid_q);
  zero(out.dq, call.valid_q);
  zero(out.dk, call.valid_kv);
  zero(out.dv, call.valid_kv);
}

}  // namespace nanprov::replay
