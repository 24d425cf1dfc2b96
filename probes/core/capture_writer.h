// CaptureWriter: the one background thread that writes capture files, in order, so the training
// thread never waits on disk. Each file's row (written, or skipped with the reason) goes to the
// store once the file is done. The thread starts with the first file and is joined at exit.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "base/records/call_record.h"
#include "store/capture_file.h"

namespace nanprov::probes {

struct CaptureJob {
  CaptureRecord row;
  store::CaptureFile file;
  std::string unattributed;  // why the call's kernels are unknown
};

class Session;

class CaptureWriter {
 public:
  // Rows go to `session`'s store, files under its run directory.
  explicit CaptureWriter(Session& session) : session_(session) {}
  CaptureWriter(const CaptureWriter&) = delete;
  CaptureWriter& operator=(const CaptureWriter&) = delete;
  // Only reached stopped: the owner stops it at exit, or leaks it when a write is stuck.
  ~CaptureWriter() = default;

  // Queues a file; after stop() it is recorded as not written.
  void push(CaptureJob job);
  // Waits, at most `limit`, until every queued file is written.
  bool waitIdle(std::chrono::seconds limit);
  // Ends the thread and joins it. Call once waitIdle() said it is idle: a thread stuck writing
  // would hold the join.
  void stop();

 private:
  void run();
  void write(CaptureJob& job);

  Session& session_;
  std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<CaptureJob> queue_;
  std::thread thread_;
  bool stopping_ = false;
  bool busy_ = false;
};

}  // namespace nanprov::probes
