#include "store/rank_store.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "base/numbers.h"
#include "base/records/device_identity.h"
#include "store/meta_values.h"
#include "store/run_counters_meta.h"
#include "store/run_dir.h"
#include "store/schema.h"
#include "store/sqlite_rows.h"
#include "store/task_run_files.h"

namespace nanprov::store {
namespace {
constexpr const char* kTableList =
    "('meta','signatures','notes','calls','tensors','kernels','captures','sentinel','steps','step_summaries','trends','"
    "trend_warnings')";

// The rank's device as its probes described it (base/records/device_identity.h). The GPU's facts
// only where they describe a CUDA device: a CPU run's process may have read a cuDNN version it
// never used. A store older than the record has its host alone, the device unknown.
DeviceIdentity deviceIdentityOf(const StoreMeta& meta) {
  auto text = [&meta](const char* key) {
    const std::string* value = metaText(meta, key);
    return value ? *value : std::string();
  };
  DeviceIdentity id{.host = text(kMetaHost), .device = text(kMetaDescribedDevice)};
  const std::optional<Device> device = Device::parse(id.device);
  if (!device) id.device.clear();
  if (!device || device->isCpu()) return id;
  id.gpu = text(kMetaGpu);
  id.gpu_uuid = text(kMetaGpuUuid);
  id.pci_bus_id = text(kMetaPciBusId);
  id.driver = text(kMetaDriver);
  id.cuda_driver = text(kMetaCudaDriver);
  id.cudnn = text(kMetaCudnnLoaded);
  if (id.cudnn.empty()) id.cudnn = text(kMetaCudnn);
  return id;
}
}  // namespace

std::string columnText(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

Status notAStore(const std::string& path, const std::string& why) {
  return Status::Error(path + ": not a readable nanprov store (" + why +
                       "); the file is damaged or was not written by nanprov");
}

StatusOr<sqlite::Db> openRankStore(const std::string& path, RankInfo* info) {
  std::error_code ec;
  if (access(path.c_str(), R_OK) != 0 && errno == EACCES) {
    return Status::Error(path + ": permission denied; make it readable (chmod u+r) or read the run as its owner");
  }
  if (std::filesystem::file_size(path, ec) == 0 && !ec) return notAStore(path, "empty file");
  NANPROV_ASSIGN_OR_RETURN(sqlite::Db db, orNotAStore(path, sqlite::open(path, sqlite::Mode::kReadOnly)));
  // Views, virtual tables and generated columns run a query of the file's choosing on every
  // read (an endless recursive view hangs every reader): nanprov's tables are plain tables.
  NANPROV_ASSIGN_OR_RETURN(
      sqlite::Stmt shape,
      orNotAStore(path, sqlite::prepare(db.get(), "SELECT name, type FROM sqlite_master WHERE name IN " +
                                                      std::string(kTableList) +
                                                      " AND (type != 'table' OR sql LIKE 'CREATE VIRTUAL%' OR EXISTS "
                                                      "(SELECT 1 FROM pragma_table_xinfo(name) WHERE hidden > 1))")));
  if (sqlite3_step(shape.get()) == SQLITE_ROW) {
    return notAStore(path, "its " + columnText(shape.get(), 0) + " is a " + columnText(shape.get(), 1) +
                               " whose rows are computed, not a plain table");
  }
  NANPROV_RETURN_IF_ERROR(sqlite::eachRowOf(db.get(), path, "SELECT key, value FROM meta", [info](sqlite3_stmt* s) {
    info->meta[columnText(s, 0)] = columnText(s, 1);
    return Status::Ok();
  }));
  info->counters = runCountersOf(info->meta, &info->counters_unreadable);
  info->device = deviceIdentityOf(info->meta);
  const std::string* version = metaText(info->meta, "schema_version");
  if (!version) return notAStore(path, "no schema_version");
  if (*version != std::to_string(kSchemaVersion)) {
    return Status::Error(path + ": store schema version " + *version + ", this nanprov reads " +
                         std::to_string(kSchemaVersion) + "; use the nanprov that wrote the run");
  }
  info->path = path;
  info->write_failure = readWriteFailure(path);
  // The rank the process learnt (meta.rank); a store whose process had not yet written it is the
  // rank its name links it to, or, left under its process name, the rank the environment guessed.
  auto named = rankOfStoreName(std::filesystem::path(path).filename().string());
  info->rank = named.value_or(0);
  for (const char* key : {"rank_guess", "rank"}) {
    const std::string* text = metaText(info->meta, key);
    if (!text || (named && std::string(key) == "rank_guess")) continue;
    auto rank = parseInteger(*text, 0, kMaxRank);
    if (!rank) return notAStore(path, std::string("meta.") + key + " is not a rank number");
    info->rank = static_cast<int>(*rank);
  }
  // A store copied or renamed to another rank's name would be read as that rank.
  if (named && *named != info->rank) {
    return Status::Error(path + ": its meta.rank is " + std::to_string(info->rank) +
                         ", but the file is named for rank " + std::to_string(*named) +
                         "; a store was renamed or copied: give it back its name " + rankStoreName(info->rank) +
                         " or remove it");
  }
  return db;
}

bool isRunDir(const std::string& dir) { return holdsRunFile(dir); }

bool areRunDirs(const RunDirs& dirs) {
  return std::all_of(dirs.all.begin(), dirs.all.end(), [](const std::string& dir) { return isRunDir(dir); });
}

StatusOr<std::vector<std::string>> storesOf(const RunDirs& dirs) {
  NANPROV_ASSIGN_OR_RETURN(std::vector<std::string> paths, rankStorePaths(dirs));
  if (paths.empty()) {
    std::string named;
    for (const std::string& dir : dirs.all) named += (named.empty() ? "" : " and ") + dir;
    return Status::Error(named + (dirs.all.size() == 1 ? " holds" : " hold") +
                         " no rank store (rank-<r>.sqlite): the run recorded no attention "
                         "call, or it is not a nanprov run directory");
  }
  return paths;
}

}  // namespace nanprov::store
