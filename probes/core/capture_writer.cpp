#include "probes/core/capture_writer.h"

#include <filesystem>
#include <utility>

#include "base/log_once.h"
#include "probes/core/session.h"

namespace nanprov::probes {

void CaptureWriter::push(CaptureJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
      queue_.push_back(std::move(job));
      wake_.notify_all();
      return;
    }
  }
  job.row.skipped = "the process was exiting: capture files were no longer written";
  job.row.path.clear();
  job.row.bytes = 0;
  session_.recordCapture(std::move(job.row));
}

bool CaptureWriter::waitIdle(std::chrono::seconds limit) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_for(lock, limit, [this] { return queue_.empty() && !busy_; });
}

void CaptureWriter::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void CaptureWriter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, and everything is written
    CaptureJob job = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    write(job);
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

void CaptureWriter::write(CaptureJob& job) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(session_.runDir()) / "captures";
  std::error_code ec;
  fs::create_directories(dir, ec);
  Status st = ec ? Status::Error("cannot create " + dir.string() + ": " + ec.message())
                 : store::writeCapture((dir / job.row.path).string(), job.file);
  if (!st.ok()) {
    logOnce("capture write", "a capture was not written: " + st.message());
    if (job.row.trigger == CaptureTrigger::kAudit) session_.capturePolicy().auditLost();  // never to be judged
    job.row.skipped = "writing failed: " + st.message();
    job.row.path.clear();
    job.row.bytes = 0;
  } else {
    job.row.path = "captures/" + job.row.path;
  }
  session_.recordCapture(std::move(job.row));
}

}  // namespace nanprov::probes
