// Attention written in plain ops (op `softmax_attention`, backend plain_softmax) is captured with
// the scores S its softmax read (its backward, with the probabilities P), not with a mask: the
// scale, bias, mask (masked_fill) or softcap the code applied on the way is all in S. Replay needs
// SDPA's terms instead: a scale on Q·Kᵀ and an additive bias. Both are read here from S and the
// product recomputed from the captured Q and K as the run computed it (bmm, or baddbmm with its
// alpha): the scale is baddbmm's alpha, or S's slope against the product, row by row (a row's
// constant cannot change a softmax, which is why P stands in for S: log P is S less a row constant);
// the bias is what is left, S − scale·Q·Kᵀ, with -inf where S hides a key and 0 where the run's own
// product overflowed.
#pragma once

#include "base/status.h"
#include "replay/captured_call.h"

namespace nanprov::replay {

// For a capture of attention written in plain ops: sets the call's scale and its mask (the derived
// bias, or none when S holds nothing but the scaled product), and drops S and P. Other captures are
// left as they are.
Status deriveScoreBias(CapturedCall& call);

// S's slope against the product `r` over the positions where both are finite, each row centred
// (so a row's constant does not count), or uncentred where no row has two finite positions that
// differ; snapped to 1 or 1/sqrt(head_dim) when that close; nullopt when nothing is finite.
std::optional<double> scaleOfScores(const at::Tensor& s, const at::Tensor& r, int64_t head_dim);

}  // namespace nanprov::replay
