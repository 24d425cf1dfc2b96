// What `nanprov` asks of its replay engine, nanprov-replay: the one definition of the engine's
// command line, shared by the callers (cli/replay_command, cli/run_command's kernel replays,
// cli/auditor) and the engine's own parser (replay_main.cpp), so the two cannot drift apart.
// LibTorch-free: the nanprov command builds requests without linking the engine.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nanprov::replay {

// What the engine prints.
//  text, json:  the replay (nanprov replay, nanprov replay --json);
//  kernels:     only the captured backend, traced, its kernels kept next to the capture, no
//               judging (nanprov run, for an edge its kernel tracing missed);
//  audit, audit-json: only the run's own outputs judged, the judgement kept next to the
//               capture (nanprov replay --audit; audit-json prints that judgement);
//  audit-serve: the same for every capture path read from stdin, one answer line each, so
//               LibTorch loads once per run (nanprov run --audit).
enum class EngineOutput { kText, kJson, kKernels, kAudit, kAuditJson, kAuditServe };

std::string_view engineOutputName(EngineOutput output);
std::optional<EngineOutput> engineOutputNamed(std::string_view name);
// Every name engineOutputNamed accepts, "text|json|…", for the engine's --help.
std::string engineOutputNames();

// Reruns of the captured backend when none are asked for: enough that a kernel failing half its
// runs is caught with 97% odds, cheap next to the reference.
inline constexpr int kDefaultReruns = 5;
inline constexpr int kMaxReruns = 1000;

struct EngineRequest {
  std::string capture;          // a .safetensors capture; unused by audit-serve
  std::string device = "auto";  // auto, cpu or cuda
  std::string backends;         // comma list; empty: every backend the call's device has
  EngineOutput output = EngineOutput::kText;
  std::string emit_repro;  // a folder for repro.py and its inputs; empty: none
  // text and json: also keep the verdicts next to the capture (X.replay.json for X.safetensors,
  // store/replay_verdicts.h), where `report --html` shows them.
  bool keep = false;
  // text and json: how often the captured backend runs the call in all (its first run among
  // them), each result compared bit for bit (replay/backend_reruns.h).
  int reruns = kDefaultReruns;
};

// The argv that runs `engine` for `request` (argv[0] is `engine`).
std::vector<std::string> engineArgv(const std::string& engine, const EngineRequest& request);

}  // namespace nanprov::replay
