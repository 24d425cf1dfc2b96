// `nanprov kernels [RUN] [--call ID] [--json]`: the kernels that ran each attention call.
#include <cstdio>
#include <iostream>

#include "base/json_text.h"
#include "base/text.h"
#include "cli/commands.h"
#include "report/call_kernels.h"
#include "report/edges.h"
#include "report/terminal_text.h"
#include "store/run_dir.h"

namespace nanprov::cli {
namespace {

struct Options {
  std::vector<std::string> run;
  std::string call;  // rank<R>:layer<L>:call<C>
  bool json = false;
};

void printCall(const CallRecord& stored, const report::KernelsOfCall& found) {
  const CallRecord c = report::forTerminal(stored);
  std::printf("%s  step %lld %s  %s (%s) on %s: %s\n", callName(c).c_str(), static_cast<long long>(c.step),
              phaseName(c.phase), c.op.c_str(), c.backend.c_str(), c.device.name().c_str(),
              printable(found.attribution).c_str());
  const KernelRecord* main = mainKernel(found.kernels);
  for (const KernelRecord& k : found.kernels) {
    if (k.device < 0) continue;  // the CPU "kernel" is the op, already printed
    std::printf("  %s %-60s grid (%d,%d,%d) block (%d,%d,%d) %9.1f us  stream %lld\n", &k == main ? "*" : " ",
                printable(shortKernelName(k.name)).c_str(), k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1],
                k.block[2], static_cast<double>(k.end_ns - k.start_ns) / 1e3, static_cast<long long>(k.stream));
  }
}

}  // namespace

void addKernelsCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("kernels", "Show the kernels that ran each attention call");
  cmd->footer(
      "Kernels are attributed to calls through CUPTI on CUDA (* marks the longest, the\n"
      "attention kernel itself); on the CPU the kernel is the ATen op. When CUPTI was\n"
      "unavailable (torch.profiler or Nsight held it, no GPU) each call says why.\n\n"
      "Examples:\n"
      "  nanprov kernels --call rank0:layer1:call1\n"
      "  nanprov kernels runs/nan-hunt --json");
  addRunArgument(cmd, &opts->run);
  cmd->add_option("--call", opts->call, "Only this call, named as the report names it (rank0:layer1:call1)");
  addJsonFlag(cmd, &opts->json);
  cmd->callback([opts, exit_code] {
    auto dir = resolveRunDirs("kernels", opts->run, exit_code);
    if (!dir) return;
    store::CallQuery query;
    if (!opts->call.empty()) {
      auto named = parseCallName(opts->call);
      if (!named) {
        std::cerr << "nanprov kernels: --call " << printable(opts->call)
                  << ": names look like rank0:layer1:call1 (see nanprov calls)\n";
        return void(*exit_code = kUsageError);
      }
      query.rank = named->rank;
      query.layer = named->layer;
      query.call = named->call;
    }
    // What kernels are known is small (the calls CUPTI traced); the calls stream past it.
    auto traced = store::loadRun(*dir, store::RunScope::kTraced);
    if (!traced.ok()) return void(*exit_code = fail("kernels", traced.status()));
    report::CallKernelIndex index(*traced);
    bool found = false;
    std::optional<JsonArrayPrinter> list;
    if (opts->json) list.emplace();
    Status read = store::forEachCall(*dir, query, [&](const CallRecord& c) {
      report::KernelsOfCall k = index.of(c);
      if (c.device.isCpu()) k.kernels = {store::cpuKernelOf(c)};
      if (list) {
        nlohmann::json entry = {
            {"call", callName(c)},
            {"rank", c.rank},
            {"seq", c.seq},
            {"step", c.step},
            {"phase", phaseName(c.phase)},
            {"op", c.op},
            {"backend", c.backend},
            {"device", c.device.name()},
            {"attribution", k.attribution},
            {"kernels_from", k.from.empty() ? nlohmann::json(nullptr) : nlohmann::json(k.from)},
            {"unattributed", c.unattributed.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.unattributed)},
            {"inferred_from", k.inferred_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(k.inferred_from)},
            {"kernels", report::kernelsJson(k.kernels)}};
        list->add(entry);
      } else {
        printCall(c, k);
      }
      found = true;
      return true;
    });
    list.reset();
    std::fflush(stdout);
    if (!read.ok()) return void(*exit_code = fail("kernels", read));
    if (!found && !opts->call.empty()) {
      *exit_code =
          fail("kernels", Status::Error("no call named " + opts->call +
                                        " in this run; names look like rank0:layer1:call1 (see nanprov calls)"));
      return;
    }
    *exit_code = kClean;
  });
}

}  // namespace nanprov::cli
