#include "cli/auditor.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/build_info.h"
#include "base/child_process.h"
#include "store/audit_file.h"
#include "store/capture_file.h"

namespace nanprov::cli {
namespace {
namespace fs = std::filesystem;

// How often the captures directory is looked at while the training runs.
constexpr auto kWatchEvery = std::chrono::seconds(2);

}  // namespace

Auditor::Auditor(std::string run_dir) : dir_(std::move(run_dir)), engine_(build::kReplayEngine) {}

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
    std::cerr << "nanprov: the audit cannot judge anything: replay engine missing at " << engine_
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
    auto meta = readCaptureMetadata(path);
    if (!meta.ok() || meta->count("trigger") == 0 || meta->at("trigger") != "audit") continue;
    auto judged = readAuditFile(path);
    if (judged.ok() && *judged) continue;
    judge(path);
  }
}

// One engine process per call: a failure in one (a kind the reference cannot rebuild, a crash)
// costs that call only, and is kept as its judgement so the report can say why.
void Auditor::judge(const std::string& capture) {
  int code = 0;
  // One thread each: the judging shares the machine with the training.
  auto said = captureOutput({engine_, capture, "auto", "", "audit", ""}, {{"OMP_NUM_THREADS", "1"}}, &code);
  if (said.ok() && (code == 0 || code == 1)) {
    if (code == 1) std::cerr << "nanprov: " << *said;  // a finding: said at once, not at the end
    return;
  }
  auto judged = readAuditFile(capture);
  if (judged.ok() && *judged) return;  // not audited, and the engine said why
  auto meta = readCaptureMetadata(capture);
  std::string why = said.ok() ? "the replay engine failed (exit " + std::to_string(code) + ")"
                              : "the replay engine did not start: " + said.status().message();
  nlohmann::json doc = {{"format", kAuditFormat}, {"call", meta.ok() ? (*meta)["call"] : "?"},
                        {"step", meta.ok() ? (*meta)["step"] : "?"}, {"phase", meta.ok() ? (*meta)["phase"] : "?"},
                        {"capture", capture}, {"audited", false}, {"not_audited_why", why}, {"finding", false}};
  if (Status st = writeAuditFile(capture, doc); !st.ok()) std::cerr << "nanprov: " << st.message() << "\n";
}

}  // namespace nanprov::cli
