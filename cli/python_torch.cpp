#include "cli/python_torch.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/child_process.h"
#include "cli/build_info.h"
#include "cli/install_layout.h"

namespace nanprov::cli {
namespace fs = std::filesystem;

std::string probesLibrary() {
  const char* over = std::getenv("NANPROV_PROBES_LIB");
  return over && *over ? over : installLayout().probes_library;
}

std::string bootstrapPythonPath() {
  std::string path = installLayout().bootstrap_dir;
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) path += std::string(":") + old;
  return path;
}

std::string pythonOf(const std::string& resolved) {
  if (fs::path(resolved).filename().string().rfind("python", 0) == 0) return resolved;
  std::ifstream in(resolved);
  std::string line;
  if (!std::getline(in, line) || line.rfind("#!", 0) != 0 || line.find("python") == std::string::npos) {
    return "";
  }
  std::istringstream words(line.substr(2));
  std::string interp, arg;
  words >> interp;
  if (fs::path(interp).filename() == "env" && (words >> arg)) interp = findExecutable(arg);
  return interp;
}

StatusOr<nlohmann::json> torchInfo(const std::string& python) {
  int code = 0;
  NANPROV_ASSIGN_OR_RETURN(
      auto out, captureOutput({python, "-m", "nanprov_boot.check"}, {{"PYTHONPATH", bootstrapPythonPath()}}, &code));
  if (code > 128) {
    return Status::Error("the torch check (" + python + " -m nanprov_boot.check) was killed by signal " +
                         std::to_string(code - 128) + "; run again");
  }
  nlohmann::json info = nlohmann::json::parse(out, nullptr, false);
  if (info.is_discarded() || !info.value("importable", false)) {
    std::string why = info.is_discarded() ? "it printed no answer" : info.value("error", "");
    return Status::Error("torch is not importable by " + python + " (" + why +
                         "); install torch there, or `source scripts/activate` for the Python nanprov was built with");
  }
  return info;
}

Status checkTorchMatchesBuild(const std::string& python, const nlohmann::json& info) {
  std::string torch = info.value("torch", ""), abi = info.value("cxx11_abi", "");
  if (torch == build::kTorchVersion && abi == build::kCxx11Abi) return Status::Ok();
  return Status::Error(python + " has torch " + torch + " (C++11 ABI " + abi +
                       "), but nanprov was built against torch " + build::kTorchVersion + " (ABI " + build::kCxx11Abi +
                       "); rebuild it for this torch: " + installLayout().rebuildCommand(python));
}

}  // namespace nanprov::cli
