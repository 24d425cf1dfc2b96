#include "probes/libtorch/install_probes.h"

#include "probes/libtorch/attention_hook.h"
#include "probes/libtorch/collective_probe.h"
#include "probes/libtorch/foreign_calls.h"
#include "probes/libtorch/gradient_sentinel_ops.h"
#include "probes/libtorch/module_trail_ops.h"
#include "probes/libtorch/softmax_attention.h"

namespace nanprov::probes {

Status installProbes() {
  return installAttentionProbes([](bool want_fused) {
    installGradientSentinel();
    installCollectiveProbes();
    installModuleTrail();
    installForeignCallOps();
    if (want_fused) installSoftmaxAttentionProbe();
  });
}

}  // namespace nanprov::probes
