// `nanprov doctor`: is this machine ready? torch/CUDA/cuDNN versions, GPU arch, eligible SDPA
// backends, CUPTI, and whether the Python's torch matches the one nanprov was built against.
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "base/child_process.h"
#include "base/json_text.h"
#include "base/text.h"
#include "cli/build_info.h"
#include "cli/commands.h"
#include "cli/install_layout.h"
#include "cli/python_torch.h"

namespace nanprov::cli {
namespace {

struct Check {
  std::string name;
  bool ok;
  std::string detail;
};

}  // namespace

void addDoctorCommand(CLI::App& app, int* exit_code) {
  struct Options {
    std::string python = "python3";
    bool json = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("doctor", "Check that nanprov can instrument training on this machine");
  cmd->footer(
      "Examples:\n"
      "  nanprov doctor\n"
      "  nanprov doctor --python /opt/venv/bin/python --json\n\n"
      "Exit status: 0 ready, 1 a check failed.");
  cmd->add_option("--python", opts->python, "Interpreter that will run the training (default: python3 on PATH)");
  addJsonFlag(cmd, &opts->json);
  cmd->callback([opts, exit_code] {
    std::vector<Check> checks;
    nlohmann::json torch = nullptr;
    std::string lib = probesLibrary();
    checks.push_back({"probe library", std::filesystem::exists(lib), lib});
    const InstallLayout& layout = installLayout();
    checks.push_back({"replay engine", access(layout.replay_engine.c_str(), X_OK) == 0, layout.replay_engine});
    checks.push_back(
        {"bootstrap", std::filesystem::exists(layout.bootstrap_dir + "/sitecustomize.py"), layout.bootstrap_dir});
    std::string python = findExecutable(opts->python);
    if (python.empty()) {
      checks.push_back({"python", false, opts->python + " not found on PATH; pass --python"});
    } else if (auto info = torchInfo(python); !info.ok()) {
      checks.push_back({"torch", false, info.status().message()});
    } else {
      torch = *info;
      Status match = checkTorchMatchesBuild(python, *info);
      checks.push_back({"torch", true, python + ": torch " + info->value("torch", "")});
      checks.push_back(
          {"ABI match", match.ok(), match.ok() ? "built against the same torch and C++ ABI" : match.message()});
      bool cuda = info->value("cuda_available", false);
      checks.push_back({"CUDA device", true, cuda ? jsonText(info->at("devices")) : "none: CPU path only"});
    }
    checks.push_back(
        {"CUPTI tracer", true, build::kHaveCupti ? "compiled in" : "not compiled (no CUDA toolkit at build time)"});
    bool all_ok = true;
    for (const Check& c : checks) all_ok = all_ok && c.ok;
    if (opts->json) {
      nlohmann::json out = {{"ok", all_ok},
                            {"nanprov", build::kVersion},
                            {"built_torch", build::kTorchVersion},
                            {"built_cxx11_abi", build::kCxx11Abi},
                            {"cuda_toolkit", build::kHaveCuda},
                            {"cupti", build::kHaveCupti},
                            {"cudnn_headers", build::kHaveCudnn},
                            {"python_torch", torch},
                            {"install",
                             {{"installed_by", layout.installed_by},
                              {"prefix", layout.prefix},
                              {"python", layout.python},
                              {"source_dir", layout.source_dir}}},
                            {"checks", nlohmann::json::array()}};
      for (const Check& c : checks) out["checks"].push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
      std::cout << jsonText(out, 2) << "\n";
    } else {
      std::cout << "nanprov " << build::kVersion << ", built against torch " << build::kTorchVersion << " (C++11 ABI "
                << build::kCxx11Abi << "), CUDA toolkit " << build::kCudaVersion << ", cuDNN " << build::kCudnnVersion
                << ", CUPTI " << build::kCuptiVersion << "\n"
                << "  "
                << (layout.installed_by.empty() ? "a nanprov without share/nanprov/build.json" : layout.installed_by)
                << " at " << layout.prefix << " (built from " << layout.source_dir << ")\n";
      for (const Check& c : checks)
        std::cout << (c.ok ? "  ok    " : "  FAIL  ") << c.name << ": " << printable(c.detail) << "\n";
      if (!torch.is_null()) {
        std::cout << "  info  CUDA "
                  << (torch["cuda_build"].is_null() ? "none" : torch["cuda_build"].get<std::string>()) << ", cuDNN "
                  << (torch["cudnn"].is_null() ? std::string("none") : jsonText(torch["cudnn"])) << ", SDPA backends "
                  << jsonText(torch["sdpa_backends"]) << "\n";
      }
    }
    *exit_code = all_ok ? 0 : 1;
  });
}

}  // namespace nanprov::cli
