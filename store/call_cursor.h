// Private to store/: the calls of one rank store, read one at a time with their tensors, so a
// reader holds one call of a 10M-call store at a time, not all of them.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/records/call_record.h"
#include "store/reader.h"
#include "store/sqlite_db.h"

namespace nanprov::store {

// Which calls of a store to read, as SQL over `c` (calls), and in which order.
struct CallFilter {
  std::vector<std::string> conditions;                   // ANDed; none: every call
  std::vector<std::variant<int64_t, std::string>> args;  // bound to their ?s, in order
  // By (step, start_ns, seq), through the index over calls that are not clean, instead of by seq.
  bool by_time = false;

  static CallFilter all() { return {}; }
  static CallFilter notClean() { return {{"c.health != 0"}, {}, true}; }
  static CallFilter of(const std::vector<int64_t>& seqs);
  static CallFilter matching(const CallQuery& query);
};

// "1,5,9": seqs for an IN list.
std::string seqList(const std::vector<int64_t>& seqs);

class CallCursor {
 public:
  static StatusOr<CallCursor> open(sqlite3* db, const std::string& path, const CallFilter& filter);
  // Reads the next call into *out: true, or false at the end.
  StatusOr<bool> next(CallRecord* out);

 private:
  CallCursor(sqlite3* db, std::string path, sqlite::Stmt calls, sqlite::Stmt tensors)
      : db_(db), path_(std::move(path)), calls_(std::move(calls)), tensors_(std::move(tensors)) {}
  Status readTensorRows(CallRecord* call);

  sqlite3* db_;
  std::string path_;
  sqlite::Stmt calls_;
  sqlite::Stmt tensors_;  // the tensor rows of one call, for calls stored before detail blobs
  std::unordered_map<int64_t, std::vector<TensorHealth>> described_;  // signature id → its tensors, parsed once
};

}  // namespace nanprov::store
