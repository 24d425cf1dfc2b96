// The audit's judge inside `nanprov run --audit`: while the training runs, a thread here watches
// the run's captures/ for audit captures (which calls, see probes/core/capture_policy.h) and has the
// replay engine, one long-lived process, judge each against the float64 reference, which keeps
// CAPTURE.audit.json (store/audit_file.h) and prints a line. The
// training process only copies the tensors out; all judging happens here, off its threads and
// its streams. A finding is printed as soon as it is judged, not when the run ends.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "base/child_process.h"
#include "store/mapped_counters.h"

namespace nanprov::cli {

class Auditor {
 public:
  explicit Auditor(std::string run_dir);
  ~Auditor();  // stops the thread: what is left stays unjudged
  Auditor(const Auditor&) = delete;
  Auditor& operator=(const Auditor&) = delete;

  void start();
  // After the training ended: stops watching, then judges every audit capture left.
  void finish();

 private:
  void stopWatching();
  void watch();
  void sweep();
  void judge(const std::string& capture);
  // One more of `rank`'s audit captures judged, in `took_ns`: the probes pace the rotation by it.
  void countJudged(const std::string& rank, int64_t took_ns, bool by_rotation);

  std::string dir_;
  std::string engine_;
  std::unique_ptr<LineChild> engine_child_;  // the engine in audit-serve mode, started on first use
  std::map<int, std::unique_ptr<store::MappedCounters>> progress_;  // rank → its rank-<r>.audit-progress
  std::set<std::string> seen_;  // capture files looked at: by the thread, then by finish() after it
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace nanprov::cli
