// Replay's progress on stderr. A big call (S=4096 and up) takes seconds per backend, and a
// silent minute reads as a hang: once a replay has run 2 s, a line names the current stage every
// few seconds, and at the end one line says where the time went. Short replays print nothing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace nanprov::replay {

class Progress {
 public:
  Progress();
  ~Progress();  // stops the ticker; prints the summary when the replay took 2 s or more
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // The stage now running ("reference", "backend cudnn", ...); the previous one ends.
  void stage(std::string name);

 private:
  using Clock = std::chrono::steady_clock;
  void tick();

  Clock::time_point start_ = Clock::now();
  Clock::time_point stage_start_ = start_;
  std::string stage_;
  std::vector<std::pair<std::string, double>> done_;  // stage, seconds
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread ticker_;
};

}  // namespace nanprov::replay
