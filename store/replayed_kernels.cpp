#include "store/replayed_kernels.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "store/capture_file.h"
#include "store/file_replace.h"
#include "store/small_file.h"

namespace nanprov::store {

std::string replayedKernelsPath(const std::string& capture_path) {
  return captureSidecarPath(capture_path, ".kernels.json");
}

Status writeReplayedKernels(const std::string& capture_path, const ReplayedKernels& replayed) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelRecord& k : replayed.kernels) {
    kernels.push_back({{"name", k.name},
                       {"grid", {k.grid[0], k.grid[1], k.grid[2]}},
                       {"block", {k.block[0], k.block[1], k.block[2]}},
                       {"start_ns", k.start_ns},
                       {"end_ns", k.end_ns},
                       {"device", k.device},
                       {"stream", k.stream},
                       {"correlation_id", k.correlation_id}});
  }
  nlohmann::json doc = {
      {"gpu", replayed.gpu}, {"backend", replayed.backend}, {"phase", replayed.phase}, {"kernels", kernels}};
  return replaceFile(
      replayedKernelsPath(capture_path), "kernel list", [&](std::ostream& out) { out << doc.dump(1) << "\n"; }, ".tmp");
}

StatusOr<std::optional<ReplayedKernels>> readReplayedKernels(const std::string& capture_path) {
  std::string path = replayedKernelsPath(capture_path);
  NANPROV_ASSIGN_OR_RETURN(std::optional<std::string> text, readSmallFile(path));
  if (!text) return std::optional<ReplayedKernels>();
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&] {
    return Status::Error(path + " is not a replay's kernel list; delete it and run nanprov replay again");
  };
  if (!doc.is_object() || !doc["kernels"].is_array()) return bad();
  ReplayedKernels out;
  try {
    out.gpu = doc.value("gpu", "");
    out.backend = doc.value("backend", "");
    out.phase = doc.value("phase", "");
    for (const nlohmann::json& k : doc["kernels"]) {
      KernelRecord r;
      r.name = k.at("name").get<std::string>();
      for (int i = 0; i < 3; ++i) {
        r.grid[i] = k.at("grid").at(i).get<int>();
        r.block[i] = k.at("block").at(i).get<int>();
      }
      r.start_ns = k.at("start_ns").get<int64_t>();
      r.end_ns = k.at("end_ns").get<int64_t>();
      r.device = k.value("device", 0);
      r.stream = k.value("stream", int64_t{-1});
      r.correlation_id = k.value("correlation_id", int64_t{0});
      out.kernels.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception&) {
    return bad();
  }
  return std::optional<ReplayedKernels>(std::move(out));
}

}  // namespace nanprov::store
