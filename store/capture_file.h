// Capture files: every tensor of one attention call plus a metadata block, in the safetensors
// format (https://github.com/huggingface/safetensors), so Python users open them with
// `safetensors` too. Layout: an 8-byte little-endian header length N, N bytes of JSON
// ({"__metadata__": {...strings...}, "<name>": {"dtype", "shape", "data_offsets"}}), then the
// data. The reader trusts nothing: every hostile or broken file is a Status with one line.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace nanprov::store {

// The "format" metadata of the captures this build writes and reads.
inline constexpr const char* kCaptureFormat = "nanprov-capture 1";

struct CaptureTensor {
  std::string name;   // role: Q K V mask O LSE dO dQ dK dV
  std::string dtype;  // safetensors spelling: F64 F32 F16 BF16 BOOL I64 ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // dense row-major, little-endian
};

struct CaptureFile {
  std::map<std::string, std::string> metadata;
  std::vector<CaptureTensor> tensors;

  const CaptureTensor* tensor(const std::string& name) const;
};

// Writes `file` to `path` through a temporary file and a rename, so a reader never sees half.
Status writeCapture(const std::string& path, const CaptureFile& file);

StatusOr<CaptureFile> readCapture(const std::string& path);
// Every check readCapture makes that needs no tensor data: the header, and the offsets against
// the file's size. Reads a few KB of a capture of any size.
Status checkCapture(const std::string& path);
// The same checks, and the header's metadata (the call, its trigger...).
StatusOr<std::map<std::string, std::string>> readCaptureMetadata(const std::string& path);
// A file kept next to a capture: CAPTURE with ".safetensors" replaced by `suffix` (".kernels.json").
std::string captureSidecarPath(const std::string& capture_path, const std::string& suffix);
// The same checks on bytes in memory (what the fuzz tests drive).
StatusOr<CaptureFile> parseCapture(const std::string& bytes, const std::string& source);

}  // namespace nanprov::store
