// `nanprov verdict [RUN] [--json] [--reruns N]`: what a scheduler does with a run, as one exit code
// per class of fault (base/exit_codes.h) and one line or one JSON object (report/run_verdict.h).
// Reads the run's conclusion as `report` does; where attention made the first non-finite value
// (or the audit found a wrong one), runs the replay engine on its capture, as `replay` does, for
// the root cause and the reruns that tell a kernel from the device.
#include <unistd.h>

#include <iostream>

#include "base/child_process.h"
#include "base/json_text.h"
#include "base/text.h"
#include "cli/commands.h"
#include "cli/install_layout.h"
#include "replay/engine_request.h"
#include "report/build_report.h"
#include "report/run_verdict.h"
#include "store/capture_file.h"

namespace nanprov::cli {
namespace {

struct Options {
  std::vector<std::string> run;
  bool json = false;
  int reruns = replay::kDefaultReruns;
};

// Replay's JSON on `capture`, read into its answer; what went wrong instead, as an answer with no
// cause (the verdict is then undetermined, and says why).
report::ReplayAnswer replayCapture(const std::string& capture, int reruns) {
  if (Status st = store::checkCapture(capture); !st.ok()) return report::replayFailed(st.message());
  const std::string engine = installLayout().replay_engine;
  if (access(engine.c_str(), X_OK) != 0)
    return report::replayFailed("replay engine missing at " + engine + "; build nanprov (./scripts/test)");
  // As `nanprov replay` runs it: the Python that reruns a FlashAttention or FFPA call through its
  // package (never a module named by a file), and the bootstrap it imports from.
  const std::map<std::string, std::string> env = {{"NANPROV_REPLAY_PYTHON", installLayout().python},
                                                  {"NANPROV_BOOTSTRAP_DIR", installLayout().bootstrap_dir}};
  int code = 0;
  auto said = captureOutput(
      replay::engineArgv(engine, {.capture = capture, .output = replay::EngineOutput::kJson, .reruns = reruns}), env,
      &code);
  if (!said.ok()) return report::replayFailed(said.status().message());
  nlohmann::json doc = nlohmann::json::parse(*said, nullptr, false);
  if (doc.is_discarded())
    return report::replayFailed("the replay engine exited " + std::to_string(code) + " without its JSON");
  return report::replayAnswerOf(doc);
}

int verdict(const Options& opts) {
  int code = kClean;
  auto run = openRun("verdict", opts.run, &code, store::RunScope::kEdges);
  if (!run) return code;
  auto report = report::buildReport(*run);
  if (!report.ok()) return fail("verdict", report.status());
  std::optional<report::ReplayAnswer> answer;
  if (std::optional<report::ReplayTarget> target = report::replayTargetOf(*report);
      target && !target->capture.empty()) {
    answer = replayCapture(target->capture, opts.reruns);
  }
  const report::RunVerdict v = verdictOf(*report, answer);
  if (opts.json) std::cout << jsonText(report::verdictJson(v), 2) << "\n";
  else std::cout << printable(report::verdictLine(v)) << "\n";
  return report::verdictExitCode(v.cls);
}

}  // namespace

void addVerdictCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<Options>();
  CLI::App* cmd =
      app.add_subcommand("verdict", "What a scheduler should do with a run: one exit code per class of fault");
  cmd->footer(
      "Reads the run's conclusion as `nanprov report` does. Where attention made the first\n"
      "non-finite value (or, with no edge, the audit found a wrong one), it replays that call's\n"
      "capture as `nanprov replay` does: the captured backend reruns it --reruns times, each result\n"
      "compared bit for bit, and every other backend and the float64 reference judge it. Then it\n"
      "prints one line (or, with --json, one JSON object) and exits with the class's code:\n\n"
      "  0   no_fault                 clean, or no fault in what was checked     the job goes on\n"
      "  10  kernel                   a kernel fails the call every time it      fix the code: avoid\n"
      "                               runs it (backend-specific,                 the backend, report it\n"
      "                               forward-ok-backward-wrong)\n"
      "  11  nondeterministic_kernel  the fault recurs in k of N reruns          requeue from the last\n"
      "                                                                          checkpoint; fix the kernel\n"
      "  12  suspect_device           the run's result never recurs from its     exclude the node (the\n"
      "                               inputs, every rerun bitwise identical      host and GPU are named),\n"
      "                               (not-reproduced); a --inject fault too     requeue elsewhere\n"
      "  13  data_or_model            input-caused, precision-limit (overflow),  fix the data or the\n"
      "                               fully-masked-rows, or the origin is        model; a requeue fails\n"
      "                               outside attention                          again\n"
      "  14  undetermined             a fault the evidence does not classify     a person reads\n"
      "                               (unattributed, not captured, replay could  nanprov report\n"
      "                               not judge or did not run)\n"
      "  4   nothing_checked          no attention call was checked              a person looks\n"
      "  2 usage error, 3 unreadable run, 6 directories of several jobs.\n\n"
      "The JSON object: verdict, exit_code, action (none, fix_code, requeue, exclude_node, inspect),\n"
      "reason (replay's root cause, or the report's: outside-attention, unattributed...),\n"
      "explanation, outcome, rank, step, call, phase, op, backend, module, device_identity {host,\n"
      "device, gpu, gpu_uuid, pci_bus_id, driver, cuda_driver, cudnn}, suspects [{rank,\n"
      "device_identity}] (the nodes suspect_device excludes: both of two replicas that diverged),\n"
      "injected, capture,\n"
      "root_cause {class, explanation, backend, kernel} and reruns (as nanprov replay --json).\n\n"
      "Examples:\n"
      "  nanprov verdict                        the newest run\n"
      "  nanprov verdict runs/$SLURM_JOB_ID --json | jq '{verdict, action, host: .device_identity.host}'\n"
      "  nanprov verdict runs/$JOB --json | jq -r '.suspects[].device_identity.host'   the hosts to exclude\n"
      "  nanprov verdict runs/$JOB; case $? in 11) requeue ;; 12) exclude the host, then requeue ;; esac\n"
      "  (the README has a Slurm script that does it)");
  addRunArgument(cmd, &opts->run);
  addJsonFlag(cmd, &opts->json);
  cmd->add_option("--reruns", opts->reruns,
                  "How often replay runs the captured backend on the call, each result compared bit for bit (default " +
                      std::to_string(replay::kDefaultReruns) + ")")
      ->check(CLI::Range(1, replay::kMaxReruns));
  cmd->callback([opts, exit_code] { *exit_code = verdict(*opts); });
}

}  // namespace nanprov::cli
