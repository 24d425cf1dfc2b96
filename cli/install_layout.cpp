#include "cli/install_layout.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace nanprov::cli {
namespace fs = std::filesystem;

namespace {

std::string ownExecutable() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.string();
}

bool isExecutable(const fs::path& p) { return access(p.c_str(), X_OK) == 0; }

std::string shellWord(const std::string& s) {
  if (s.find_first_of(" \t'\"$`\\") == std::string::npos) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

InstallLayout layoutOf(const std::string& executable) {
  InstallLayout l;
  fs::path prefix = fs::path(executable).parent_path().parent_path();
  l.prefix = prefix.string();
  l.probes_library = (prefix / "lib/nanprov/libnanprov_probes.so").string();
  l.replay_engine = (prefix / "lib/nanprov/nanprov-replay").string();
  l.bootstrap_dir = (prefix / "share/nanprov/bootstrap").string();
  std::ifstream in(prefix / "share/nanprov/build.json");
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  if (doc.is_object()) {
    l.installed_by = doc.value("installed_by", "");
    l.source_dir = doc.value("source_dir", "");
    l.build_dir = doc.value("build_dir", "");
    l.python = doc.value("python", "");
  }
  // The environment pip installed into moves with nanprov; the Python recorded at build time
  // stays where it was (or is gone with the machine the wheel was built on).
  for (const char* name : {"python3", "python"}) {
    fs::path own = prefix / "bin" / name;
    if ((l.installed_by == "pip" || !isExecutable(l.python)) && isExecutable(own)) {
      l.python = own.string();
      break;
    }
  }
  if (l.python.empty()) l.python = "python3";
  return l;
}

const InstallLayout& installLayout() {
  static const InstallLayout layout = layoutOf(ownExecutable());
  return layout;
}

std::string InstallLayout::rebuildCommand(const std::string& python) const {
  const std::string py = shellWord(python);
  std::error_code ec;
  const bool sources = !source_dir.empty() && fs::exists(fs::path(source_dir) / "pyproject.toml", ec);
  if (installed_by == "pip") {
    return py + " -m pip install --no-build-isolation --force-reinstall --no-deps " +
           (sources ? shellWord(source_dir) : std::string("<the nanprov sources or sdist>"));
  }
  if (installed_by == "cmake --install") {
    // A fresh build tree: the old one's cache holds the old torch.
    const std::string build = shellWord(build_dir + "-rebuilt");
    return "cmake -S " + shellWord(source_dir) + " -B " + build + " -DPython3_EXECUTABLE=" + py + " && cmake --build " +
           build + " && cmake --install " + build + " --prefix " + shellWord(prefix);
  }
  return "NANPROV_VENV=<the environment of " + py + "> " + (sources ? shellWord(source_dir) + "/" : std::string()) +
         "scripts/test";
}

}  // namespace nanprov::cli
