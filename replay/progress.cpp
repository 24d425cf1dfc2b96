#include "replay/progress.h"

#include <cstdio>

namespace nanprov::replay {
namespace {

constexpr std::chrono::seconds kQuiet{2};  // replays shorter than this print nothing
constexpr std::chrono::seconds kEvery{5};  // then a line this often

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Progress::Progress() : ticker_([this] { tick(); }) {}

Progress::~Progress() {
  stage("");
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  ticker_.join();
  double total = secondsSince(start_);
  if (total < std::chrono::duration<double>(kQuiet).count()) return;
  std::string parts;
  for (const auto& [name, seconds] : done_) {
    if (seconds >= 0.05)
      parts += (parts.empty() ? "" : ", ") + name + " " + std::to_string(seconds).substr(0, 4) + " s";
  }
  std::fprintf(stderr, "nanprov replay: done in %.1f s (%s)\n", total, parts.c_str());
}

void Progress::stage(std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!stage_.empty()) done_.emplace_back(stage_, secondsSince(stage_start_));
  stage_ = std::move(name);
  stage_start_ = Clock::now();
}

void Progress::tick() {
  std::unique_lock<std::mutex> lock(mu_);
  auto next = start_ + kQuiet;
  while (!wake_.wait_until(lock, next, [this] { return stopping_; })) {
    if (!stage_.empty())
      std::fprintf(stderr, "nanprov replay: %s... (%.0f s so far)\n", stage_.c_str(), secondsSince(start_));
    next += kEvery;
  }
}

}  // namespace nanprov::replay
