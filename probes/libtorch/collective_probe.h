// The collectives' probe: c10d's ops that carry tensors between ranks, wrapped at the BackendSelect
// key as attention is. Each wrapper hands the op's input to the process's CollectiveChecks before
// the op is issued, and its output once the op's Work completed (a callback on its future); the
// checks themselves, and why nothing waits, are in collective_checks.h.
#pragma once

namespace nanprov::probes {

// Wraps the collectives of this torch build, served by processProbes().collectives(). Idempotent; a
// torch without c10d installs nothing.
void installCollectiveProbes();

}  // namespace nanprov::probes
