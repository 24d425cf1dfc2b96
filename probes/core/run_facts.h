// Facts about the training process's attention stack that only its Python side reads well: the
// CUDA version torch was built with, the cuDNN library actually loaded (a system cuDNN can shadow
// the wheel's), Triton and its ptxas, FlashAttention-4. The bootstrap hands each over once at
// start (nanprov_set_fact); the store's meta and every capture carry them beside the torch, CUDA
// runtime and cuDNN versions, for the known-issue matcher. A fact never handed over is absent,
// never guessed.
#pragma once

#include <map>
#include <string>

namespace nanprov::probes {

// The keys a fact may have; anything else is refused, so the bootstrap cannot overwrite other meta.
bool isRunFactKey(const std::string& key);

// Keeps `value` for `key` (replacing an earlier one). Returns false, keeping nothing, for an
// unknown key or a value that is empty, over 512 bytes or holds a control character.
bool setRunFact(const std::string& key, const std::string& value);

// Every fact handed over so far.
std::map<std::string, std::string> runFacts();

}  // namespace nanprov::probes
