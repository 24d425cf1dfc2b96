#include "replay/engine_request.h"

#include <array>
#include <string>
#include <utility>

namespace nanprov::replay {
namespace {

constexpr std::array<std::pair<EngineOutput, std::string_view>, 6> kNames{{
    {EngineOutput::kText, "text"},
    {EngineOutput::kJson, "json"},
    {EngineOutput::kKernels, "kernels"},
    {EngineOutput::kAudit, "audit"},
    {EngineOutput::kAuditJson, "audit-json"},
    {EngineOutput::kAuditServe, "audit-serve"},
}};

}  // namespace

std::string_view engineOutputName(EngineOutput output) {
  for (const auto& [value, name] : kNames) {
    if (value == output) return name;
  }
  return "text";
}

std::optional<EngineOutput> engineOutputNamed(std::string_view name) {
  for (const auto& [value, known] : kNames) {
    if (known == name) return value;
  }
  return std::nullopt;
}

std::string engineOutputNames() {
  std::string names;
  for (const auto& [value, name] : kNames) names += (names.empty() ? "" : "|") + std::string(name);
  return names;
}

std::vector<std::string> engineArgv(const std::string& engine, const EngineRequest& request) {
  std::vector<std::string> argv = {engine, "--output", std::string(engineOutputName(request.output)), "--device",
                                   request.device};
  if (!request.capture.empty()) argv.insert(argv.end(), {"--capture", request.capture});
  if (!request.backends.empty()) argv.insert(argv.end(), {"--backends", request.backends});
  if (!request.emit_repro.empty()) argv.insert(argv.end(), {"--emit-repro", request.emit_repro});
  if (request.keep) argv.push_back("--keep");
  // The engine's default is the same constant: said only when another is asked for.
  if (request.reruns != kDefaultReruns) argv.insert(argv.end(), {"--reruns", std::to_string(request.reruns)});
  return argv;
}

}  // namespace nanprov::replay
