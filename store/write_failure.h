// The first write a rank store's writer could not make (a full disk, the file size limit of
// `ulimit -f`, another I/O error), kept where a full disk cannot lose it: a small file beside the
// store, `<store>.write-failure`, whose bytes are allocated when the store is made and overwritten
// in place through a shared mapping when the failure comes (store/mapped_counters.h). A store
// that never failed leaves none. Readers then say the store is incomplete from that step and why,
// rather than reading the calls it lacks as lost to a kill.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"

namespace nanprov::store {

class MappedCounters;

enum class WriteFailureKind : int64_t { kNone = 0, kDiskFull = 1, kFileSizeLimit = 2, kIoError = 3 };

struct WriteFailure {
  WriteFailureKind kind = WriteFailureKind::kNone;
  int64_t from_step = 0;  // the earliest step of a row that did not reach the store
};

// "the disk filled", "the file size limit (ulimit -f) was hit", "a write failed".
std::string writeFailureCause(WriteFailureKind kind);
// "the store is incomplete from step 12: the disk filled".
std::string writeFailureText(const WriteFailure& failure);

// What a failed write to the store at `store_path` met, said by SQLite as `error`. SQLite keeps no
// reliable errno for it (a full disk is SQLITE_FULL, the file size limit's EFBIG a plain I/O
// error), so the store's surroundings say: a file of the store at the file size limit (the process
// ignores SIGXFSZ, as Python does), a disk with no room left, else an I/O error.
WriteFailureKind writeFailureKindOf(sqlite3* db, const std::string& store_path, const std::string& error);

// "<store>.write-failure" beside `store_path` (the process's file behind a rank's link).
std::string writeFailurePathOf(const std::string& store_path);

// The writer's side: made with the store (its bytes allocated then), noted at each failure (the
// earliest step kept), removed at a close that never failed.
class WriteFailureRecord {
 public:
  static StatusOr<std::unique_ptr<WriteFailureRecord>> create(const std::string& store_path);
  ~WriteFailureRecord();
  WriteFailureRecord(const WriteFailureRecord&) = delete;
  WriteFailureRecord& operator=(const WriteFailureRecord&) = delete;

  // Keeps the first failure's kind and the earliest step; true the first time.
  bool note(WriteFailureKind kind, int64_t from_step);
  std::optional<WriteFailure> failure() const;
  void discardIfClean();  // at close: a store that never failed keeps no record

 private:
  WriteFailureRecord(std::string path, std::unique_ptr<MappedCounters> counts);
  std::string path_;
  std::unique_ptr<MappedCounters> counts_;
};

// The failure recorded beside the store at `store_path`; nullopt when there is none (or it is not
// one nanprov wrote).
std::optional<WriteFailure> readWriteFailure(const std::string& store_path);

}  // namespace nanprov::store
