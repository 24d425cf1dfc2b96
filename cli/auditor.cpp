#include "cli/auditor.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/child_process.h"
#include "base/numbers.h"
#include "base/text.h"
#include "cli/build_info.h"
#include "cli/install_layout.h"
#include "replay/engine_request.h"
#include "store/audit_file.h"
#include "store/capture_file.h"
#include "store/mapped_counters.h"
#include "store/run_dir.h"

namespace nanprov::cli {
namespace {
namespace fs = std::filesystem;

// How often the captures directory is looked at while the training runs: the rotation waits for
// the judge to catch up, so a slow look paces it (one listing of a small directory, cheap).
constexpr auto kWatchEvery = std::chrono::milliseconds(250);

}  // namespace

Auditor::Auditor(std::string run_dir) : dir_(std::move(run_dir)), engine_(installLayout().replay_engine) {}

Auditor::~Auditor() { stopWatching(); }

void Auditor::stopWatching() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Auditor::start() {
  if (access(engine_.c_str(), X_OK) != 0) {
    std::cerr << "nanprov: the audit cannot judge anything: replay engine missing at " << printable(engine_)
              << "; build nanprov (./scripts/test)\n";
    return;
  }
  thread_ = std::thread([this] { watch(); });
}

void Auditor::finish() {
  stopWatching();
  if (access(engine_.c_str(), X_OK) == 0) sweep();
}

void Auditor::watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    sweep();
    lock.lock();
    wake_.wait_for(lock, kWatchEvery, [this] { return stop_; });
  }
}

// Every capture file whose header says it was taken for the audit, judged once. Files appear
// whole (written aside and renamed), so one that is listed can be read.
void Auditor::sweep() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(dir_) / "captures", ec)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".safetensors" || seen_.count(path)) continue;
    seen_.insert(path);
    auto meta = store::readCaptureMetadata(path);
    if (!meta.ok() || meta->count("trigger") == 0 || meta->at("trigger") != captureTriggerName(CaptureTrigger::kAudit))
      continue;
    auto judged = store::readAuditFile(path);
    if (judged.ok() && *judged) continue;
    judge(path);
  }
}

// One engine for the whole run, judging one capture per request (its audit-serve mode), so
// LibTorch loads once. An engine that dies on a capture costs that capture only: the next request
// starts a new one. Each judgement is counted in the rank's audit progress, which the probes read
// to pace the rotation; a clean call's capture is then deleted (its judgement stays), so a run
// that audits for days does not fill the disk.
void Auditor::judge(const std::string& capture) {
  auto meta = store::readCaptureMetadata(capture);
  int code = 3;
  int64_t took_ns = 0;
  std::string said, failure;
  if (!engine_child_) {
    auto child = LineChild::start(replay::engineArgv(engine_, {.output = replay::EngineOutput::kAuditServe}),
                                  {{"OMP_NUM_THREADS", "1"}});
    if (child.ok()) engine_child_ = std::move(*child);
    else failure = "the replay engine did not start: " + child.status().message();
  }
  if (engine_child_) {
    auto answer = engine_child_->ask(capture);
    if (!answer.ok()) {
      engine_child_.reset();  // it crashed on this capture; the next one gets a new engine
      failure = "the replay engine failed on it: " + answer.status().message();
    } else {
      // "<exit code>\t<nanoseconds>\t<text>" (replay_main.cpp, serveAudits).
      size_t tab = answer->find('\t'), tab2 = tab == std::string::npos ? tab : answer->find('\t', tab + 1);
      code = parseInteger(answer->substr(0, tab), 0, 255).value_or(3);
      if (tab2 != std::string::npos) {
        took_ns = parseInteger(answer->substr(tab + 1, tab2 - tab - 1), 0, INT64_MAX).value_or(0);
        said = answer->substr(tab2 + 1);
      }
    }
  }
  // The rotation's own are the budget's: the first pass and new regimes are judged whatever they cost.
  const bool by_rotation = meta.ok() && meta->count("audit.by_rotation") && meta->at("audit.by_rotation") == "1";
  countJudged(meta.ok() && meta->count("rank") ? meta->at("rank") : "", took_ns, by_rotation);
  if (failure.empty() && code == 0) {
    std::error_code ec;
    std::filesystem::remove(capture, ec);  // ok: the judgement says so; nothing to replay
    return;
  }
  if (failure.empty() && code == 1) {
    std::cerr << "nanprov: " << printable(said) << "\n";  // a finding: said at once, not at the end
    return;
  }
  auto judged = store::readAuditFile(capture);
  if (judged.ok() && *judged) return;  // not audited, and the engine said why
  std::string why = failure.empty() ? "the replay engine failed (exit " + std::to_string(code) + ")" : failure;
  nlohmann::json doc = {{"format", store::kAuditFormat},
                        {"call", meta.ok() ? (*meta)["call"] : "?"},
                        {"step", meta.ok() ? (*meta)["step"] : "?"},
                        {"phase", meta.ok() ? (*meta)["phase"] : "?"},
                        {"capture", capture},
                        {"audited", false},
                        {"not_audited_why", why},
                        {"finding", false}};
  if (Status st = store::writeAuditFile(capture, doc); !st.ok())
    std::cerr << "nanprov: " << printable(st.message()) << "\n";
}

void Auditor::countJudged(const std::string& rank_text, int64_t took_ns, bool by_rotation) {
  auto rank = parseInteger(rank_text, 0, kMaxRank);
  if (!rank) return;
  auto& counters = progress_[static_cast<int>(*rank)];
  if (!counters) {
    auto opened = store::MappedCounters::open(
        (fs::path(dir_) / store::auditProgressName(static_cast<int>(*rank))).string(), store::kAuditProgressSlots);
    if (!opened.ok()) return;  // the rotation then waits: it never sees this judged
    counters = std::move(*opened);
  }
  counters->add(store::kAuditJudgeNs, took_ns);
  if (by_rotation) counters->add(store::kRotationJudgeNs, took_ns);
  counters->add(store::kAuditsJudged);
}

}  // namespace nanprov::cli
