// What nanprov needs from the Python side: where the bootstrap and the probe library are, which
// interpreter a command runs, and whether that interpreter's torch is the one nanprov was built
// against (same version, same C++ ABI: the probes link against it).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace nanprov::cli {

std::string probesLibrary();        // NANPROV_PROBES_LIB, else the one built with this nanprov
std::string bootstrapPythonPath();  // the bootstrap folder, then any PYTHONPATH already set

// The interpreter a command runs: `python*` itself, or the shebang interpreter of a script such as
// torchrun. Empty when the command is not Python.
std::string pythonOf(const std::string& resolved_command);

// Asks `python` about its torch (nanprov_boot.check). Fails when torch does not import.
StatusOr<nlohmann::json> torchInfo(const std::string& python);

// Fails, naming the command that rebuilds nanprov, when `info` is not the torch it was built against.
Status checkTorchMatchesBuild(const std::string& python, const nlohmann::json& info);

}  // namespace nanprov::cli
