// A call's name, rank<R>:layer<L>:call<C> ("rank1:layer33:call45", the name the seeds use): made in
// the probes (the NVTX label, the capture's metadata), read back by the CLI (--call) and replay.
// One format, written here only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/records/call_record.h"

namespace nanprov {

// No job has more ranks; a larger number in a file name or in meta is not a rank.
inline constexpr int64_t kMaxRank = 1 << 24;

std::string callName(int rank, int64_t layer, int64_t call);
std::string callName(const CallRecord& call);

// A call's name read back: (rank, layer, call), or nullopt when `name` is not rank<R>:layer<L>:call<C>.
struct ParsedCallName {
  int rank = 0;
  int64_t layer = 0;
  int64_t call = 0;
};
std::optional<ParsedCallName> parseCallName(const std::string& name);

}  // namespace nanprov
