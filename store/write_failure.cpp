#include "store/write_failure.h"

#include <sys/resource.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "store/mapped_counters.h"
#include "store/run_dir.h"

namespace nanprov::store {
namespace {

// The record's slots: 0 the kind (0: none yet), 1 the earliest step not stored.
constexpr size_t kKindSlot = 0, kStepSlot = 1, kSlots = 2;
constexpr const char* kSuffix = ".write-failure";

}  // namespace

std::string writeFailureCause(WriteFailureKind kind) {
  switch (kind) {
    case WriteFailureKind::kDiskFull: return "the disk filled";
    case WriteFailureKind::kFileSizeLimit: return "the file size limit (ulimit -f) was hit";
    case WriteFailureKind::kIoError: return "a write to it failed";
    case WriteFailureKind::kNone: break;
  }
  return "nothing failed";
}

std::string writeFailureText(const WriteFailure& failure) {
  return "the store is incomplete from step " + std::to_string(failure.from_step) + ": " +
         writeFailureCause(failure.kind);
}

WriteFailureKind writeFailureKindOf(sqlite3* db, const std::string& store_path, const std::string& error) {
  const int err = sqlite3_system_errno(db);
  if (err == EFBIG) return WriteFailureKind::kFileSizeLimit;
  // A page or a WAL frame more would have passed the limit: the largest file is within a few of it.
  constexpr int64_t kNearTheLimit = 1 << 20;
  rlimit limit{};
  if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    int64_t largest = 0;
    for (const char* suffix : {"", "-wal", "-journal"}) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(store_path + suffix, ec);
      if (!ec) largest = std::max(largest, static_cast<int64_t>(size));
    }
    if (largest + kNearTheLimit >= static_cast<int64_t>(limit.rlim_cur)) return WriteFailureKind::kFileSizeLimit;
  }
  if (err == ENOSPC || err == EDQUOT || error.find("disk is full") != std::string::npos)
    return WriteFailureKind::kDiskFull;
  struct statvfs disk{};
  const std::string dir = std::filesystem::path(store_path).parent_path().string();
  if (statvfs(dir.empty() ? "." : dir.c_str(), &disk) == 0 &&
      static_cast<int64_t>(disk.f_bavail) * static_cast<int64_t>(disk.f_frsize) < kNearTheLimit) {
    return WriteFailureKind::kDiskFull;
  }
  return WriteFailureKind::kIoError;
}

std::string writeFailurePathOf(const std::string& store_path) { return processFileBehind(store_path) + kSuffix; }

WriteFailureRecord::WriteFailureRecord(std::string path, std::unique_ptr<MappedCounters> counts)
    : path_(std::move(path)), counts_(std::move(counts)) {}

WriteFailureRecord::~WriteFailureRecord() = default;

StatusOr<std::unique_ptr<WriteFailureRecord>> WriteFailureRecord::create(const std::string& store_path) {
  const std::string path = store_path + kSuffix;
  std::error_code ec;
  std::filesystem::remove(path, ec);  // a record left by an earlier process of this name is not ours
  NANPROV_ASSIGN_OR_RETURN(auto counts, MappedCounters::open(path, kSlots));
  return std::unique_ptr<WriteFailureRecord>(new WriteFailureRecord(path, std::move(counts)));
}

bool WriteFailureRecord::note(WriteFailureKind kind, int64_t from_step) {
  const bool first = counts_->get(kKindSlot) == 0;
  from_step = std::max<int64_t>(0, from_step);
  // The step first, so a reader that sees a kind sees its step; a later failure only lowers it.
  if (first || from_step < counts_->get(kStepSlot)) counts_->set(kStepSlot, from_step);
  if (first) counts_->set(kKindSlot, static_cast<int64_t>(kind));
  return first;
}

std::optional<WriteFailure> WriteFailureRecord::failure() const {
  const int64_t kind = counts_->get(kKindSlot);
  if (kind == 0) return std::nullopt;
  return WriteFailure{static_cast<WriteFailureKind>(kind), counts_->get(kStepSlot)};
}

void WriteFailureRecord::discardIfClean() {
  if (failure()) return;
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

std::optional<WriteFailure> readWriteFailure(const std::string& store_path) {
  auto counts = readMappedCounters(writeFailurePathOf(store_path), kSlots);
  if (!counts || (*counts)[kKindSlot] < 1 || (*counts)[kKindSlot] > static_cast<int64_t>(WriteFailureKind::kIoError)) {
    return std::nullopt;
  }
  return WriteFailure{static_cast<WriteFailureKind>((*counts)[kKindSlot]), (*counts)[kStepSlot]};
}

}  // namespace nanprov::store
