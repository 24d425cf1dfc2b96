// Where runs live on disk: a run directory holds run.json, rank-<r>.sqlite per rank, captures/.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/records/call_name.h"
#include "base/status.h"

namespace nanprov::store {

inline constexpr const char* kDefaultRunsRoot = "nanprov-runs";

// The run directories read as one run: one, or one per node of a multi-node job, each written by
// that node's own `nanprov run` on its local disk (store/job.h checks that they are one job's).
struct RunDirs {
  RunDirs(std::string dir) : all{std::move(dir)} {}    // NOLINT: one directory is the usual run
  RunDirs(const char* dir) : all{std::string(dir)} {}  // NOLINT
  explicit RunDirs(std::vector<std::string> dirs) : all(std::move(dirs)) {}
  std::vector<std::string> all;
};

// A new directory name for a run started now: <root>/<UTC timestamp>.
std::string newRunDirName(const std::string& root);

// The run directories under `root`, newest first: by when `nanprov run` started each (run.json's
// started_ns), else, for older runs, when its run.json was last written. Names do not order
// them: `--out nanprov-runs/edge` is a run too.
StatusOr<std::vector<std::string>> runsNewestFirst(const std::string& root);

// `given` when not empty, else the newest run under ./nanprov-runs that recorded data (the newest
// of all when none did). Fails with a message that
// says what to do when there is none or it is not a run directory.
StatusOr<std::string> resolveRunDir(const std::string& given);

std::string rankStoreName(int rank);  // "rank-<r>.sqlite"
// A process that records before it knows its rank (before its process group is up) writes
// "process-<pid>.sqlite" and "process-<pid>.tally". Once the rank is known the rank's names link
// to them ("rank-<r>.sqlite" → "process-<pid>.sqlite"), and at its exit the files take those names.
// A store left under its process name (the process died before it learnt its rank) is read by
// the rank its meta gives (rank, else rank_guess), when no other store holds that rank.
std::string processStoreName(int pid);
std::string processTallyName(int pid);
std::string callTallyName(int rank);      // "rank-<r>.tally" (store/mapped_counters.h)
std::string auditProgressName(int rank);  // "rank-<r>.audit-progress" (store/mapped_counters.h)
// "rank-<r>.worker-calls" (store/mapped_counters.h, 1 counter): the attention calls the rank's
// DataLoader worker processes ran, which check nothing and own no store.
std::string workerCallsName(int rank);
// The worker-call counters in `dir`: rank → path.
std::map<int, std::string> workerCallPaths(const std::string& dir);
// "rank-<r>.unrecorded": left by a process of rank r that could not create its store, holding
// its pid and why. When the file under that rank's store name is no database, readers leave it
// out and the rank is unrecorded; when it is a store (another process of the same rank made it
// first), it is read, and the note says what that process lost.
std::string unrecordedNoteName(int rank);

// The ranks whose workers trained unrecorded, from their notes in `dir`: rank → why.
std::map<int, std::string> unrecordedRanks(const std::string& dir);

// Paths of the rank stores in `dirs`, ordered by rank. Everything named rank-*.sqlite must be a
// readable regular file named for exactly one rank the way nanprov names them: a FIFO, socket,
// device or dangling link (which would block or mislead every reader), a name that is no rank
// number, or two files claiming one rank ("rank-0" and "rank-00", or one rank in two of the
// directories) fail with one line saying which. A file of a rank with an unrecorded note is left
// out when it is no database.
StatusOr<std::vector<std::string>> rankStorePaths(const RunDirs& dirs);

// The rank a store's file name claims (rank-<r>.sqlite), or nullopt when it is not so named.
std::optional<int> rankOfStoreName(const std::string& filename);

// The call tally beside a store: a process's own (process-<pid>.tally) for a store written under
// its process's name, or linked to one; else its rank's. Readers open tallies without following
// links, so a linked rank's tally is read through the process's name.
std::string callTallyPathOf(const std::string& store_path, int rank);
// The process's file a rank's name links to (process-<pid>.*, beside it); else `path` itself.
std::string processFileBehind(const std::string& path);

// The call tallies in `dir` (regular files named rank-<r>.tally): rank → path.
std::map<int, std::string> callTallyPaths(const std::string& dir);

// Whether `dir` holds anything named like a rank store, readable or not.
bool holdsRankStores(const std::string& dir);

}  // namespace nanprov::store
