// Reading the small files of a run (run.json, processes/*.json, a capture's audit result and
// kernel list) as the stores are read: regular files only, so a FIFO cannot hang a reader, and
// bounded in size, so a huge or hostile file cannot take its time and memory.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"

namespace nanprov::store {

inline constexpr int64_t kMaxRunFileBytes = 16 << 20;

// The file's bytes; nullopt when it does not exist; an error saying what is wrong otherwise.
StatusOr<std::optional<std::string>> readSmallFile(const std::string& path, int64_t max_bytes = kMaxRunFileBytes);

// The file parsed as JSON; a discarded value when it is missing, unreadable, too big or not JSON
// (for files whose absence or damage the readers already say in words).
nlohmann::json readJsonFile(const std::string& path, int64_t max_bytes = kMaxRunFileBytes);

}  // namespace nanprov::store
