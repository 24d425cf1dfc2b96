#include "store/capture_file.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <tuple>

#include "base/json_text.h"
#include "base/records/dtype.h"
#include "base/text.h"
#include "store/file_replace.h"

namespace nanprov::store {
namespace {

// A header this large is not a capture; refuse before allocating for it.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Deeper than any header nanprov or safetensors writes (tensor entries sit at depth 3).
constexpr int kMaxHeaderDepth = 16;

// What safetensors itself demands of the header text, checked before any JSON is parsed: it
// begins with '{' (no BOM, no padding in front), may end in spaces only (no NULs), and nests
// shallowly. A hostile header is refused in one pass over its bytes, before a parser would spend
// gigabytes of memory on forty million levels of brackets.
Status checkHeaderText(std::string_view text) {
  if (text.empty() || text.front() != '{') return Status::Error("the header does not begin with '{'");
  size_t last = text.find_last_not_of(' ');
  if (text[last] != '}') return Status::Error("the header does not end with '}' (only spaces may pad it)");
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i <= last; ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxHeaderDepth)
        return Status::Error("the header nests deeper than " + std::to_string(kMaxHeaderDepth) + " levels");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return Status::Ok();
}

Status broken(const std::string& source, const std::string& why) {
  return Status::Error(source + ": not a readable capture (" + why + "); re-capture the call, or check the copy");
}

}  // namespace

const CaptureTensor* CaptureFile::tensor(const std::string& name) const {
  for (const CaptureTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Status writeCapture(const std::string& path, const CaptureFile& file) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = file.metadata;
  uint64_t offset = 0;
  for (const CaptureTensor& t : file.tensors) {
    if (t.name == "__metadata__" || t.name.empty())
      return Status::Error("capture tensor with a reserved or empty name");
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    if (dtypeSize(t.dtype) == 0 || numel * dtypeSize(t.dtype) != t.bytes.size()) {
      return Status::Error("capture tensor " + t.name + ": " + std::to_string(t.bytes.size()) +
                           " bytes do not make shape " + shapeText(t.shape) + " of " + t.dtype);
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = jsonText(header);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  return replaceFile(path, "capture", [&](std::ostream& out) {
    uint64_t n = text.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const CaptureTensor& t : file.tensors) {
      out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
    }
  });
}

namespace {

// Where each tensor's bytes lie in the file (offsets from the file's start), with the header
// checked: what every reader needs before touching the data.
struct CaptureLayout {
  CaptureFile file;                                  // tensors without their bytes
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [begin, end) of file.tensors[i]
};

// `head` holds at least the file's first 8 bytes and the header after them when they exist;
// `file_size` is the whole file's.
StatusOr<CaptureLayout> parseLayout(std::string_view head, uint64_t file_size, const std::string& source) {
  if (file_size < 8 || head.size() < 8) {
    return broken(source, "truncated: " + std::to_string(file_size) + " bytes, no header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[static_cast<size_t>(i)]);
  if (n > kMaxHeaderBytes) return broken(source, "header length " + std::to_string(n) + " is implausibly large");
  if (n > file_size - 8 || n > head.size() - 8) {
    return broken(source, "header length " + std::to_string(n) + " runs past the end of the file (" +
                              std::to_string(file_size) + " bytes)");
  }
  std::string_view text = head.substr(8, static_cast<size_t>(n));
  if (Status st = checkHeaderText(text); !st.ok()) return broken(source, st.message());
  text = text.substr(0, text.find_last_not_of(' ') + 1);
  nlohmann::json header = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return broken(source, "the header is not a JSON object");
  const uint64_t data_size = file_size - 8 - n;
  const uint64_t data_start = 8 + n;

  CaptureLayout layout;
  CaptureFile& file = layout.file;
  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return broken(source, "__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) return broken(source, "metadata value of " + m.key() + " is not a string");
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      // A newer or foreign format may mean something else by the same keys.
      if (auto format = file.metadata.find("format");
          format != file.metadata.end() && format->second != kCaptureFormat) {
        return Status::Error(source + ": capture format '" + printable(format->second) + "', this nanprov reads '" +
                             kCaptureFormat + "'; replay it with the nanprov that wrote it");
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets") ||
        !entry["dtype"].is_string() || !entry["shape"].is_array() || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      return broken(source, "tensor " + name + " lacks dtype, shape or data_offsets");
    }
    CaptureTensor t;
    t.name = name;
    t.dtype = entry["dtype"].get<std::string>();
    const size_t size = dtypeSize(t.dtype);
    if (size == 0) return broken(source, "tensor " + name + " has unknown dtype '" + t.dtype + "'");
    uint64_t numel = 1;
    for (const nlohmann::json& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return broken(source, "tensor " + name + " has a bad dimension");
      uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / dim) {
        return broken(source, "tensor " + name + " has an impossibly large shape");
      }
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const nlohmann::json& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return broken(source, "tensor " + name + " has non-numeric data_offsets");
    }
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return broken(source, "tensor " + name + " has data_offsets [" + std::to_string(begin) + "," +
                                std::to_string(end) + "] out of range of the " + std::to_string(data_size) +
                                "-byte data");
    }
    if (end - begin != numel * size) {
      return broken(source, "tensor " + name + " has shape " + shapeText(t.shape) + " of " + t.dtype + " = " +
                                std::to_string(numel * size) + " bytes, but its offsets span " +
                                std::to_string(end - begin));
    }
    spans.push_back({begin, end, name});
    file.tensors.push_back(std::move(t));
  }
  // The tensors must tile the data exactly: no overlap, no hole (as safetensors itself demands).
  // By (begin, end): a zero-size tensor at offset x sorts before the tensor that starts at x.
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t expected = 0;
  for (const Span& s : spans) {
    if (s.begin < expected) return broken(source, "tensor " + s.name + " overlaps the tensor before it");
    if (s.begin > expected) return broken(source, "unused bytes before tensor " + s.name);
    expected = s.end;
  }
  if (expected != data_size)
    return broken(source, "the data holds " + std::to_string(data_size - expected) + " bytes no tensor covers");
  // Keep the writer's order (data order), not JSON's alphabetical one.
  std::map<std::string, uint64_t> order;
  for (const Span& s : spans) order[s.name] = s.begin;
  std::stable_sort(file.tensors.begin(), file.tensors.end(),
                   [&](const CaptureTensor& a, const CaptureTensor& b) { return order[a.name] < order[b.name]; });
  for (const CaptureTensor& t : file.tensors) {
    auto span = std::find_if(spans.begin(), spans.end(), [&](const Span& s) { return s.name == t.name; });
    layout.spans.emplace_back(data_start + span->begin, data_start + span->end);
  }
  return layout;
}

// The file's layout, from its first 8 bytes and its header only. `in` is left after the header.
StatusOr<CaptureLayout> readLayout(const std::string& path, std::ifstream& in) {
  std::error_code ec;
  auto type = std::filesystem::status(path, ec).type();
  if (type == std::filesystem::file_type::not_found) return Status::Error(path + ": no such capture file");
  // Only regular files: a FIFO would block the read forever, a directory reads as nothing.
  if (type != std::filesystem::file_type::regular) return broken(path, "not a regular file");
  in.open(path, std::ios::binary);
  if (!in) return Status::Error(path + ": no such capture file");
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) return broken(path, "cannot read its size: " + ec.message());
  std::string head(8, '\0');
  in.read(head.data(), 8);
  head.resize(static_cast<size_t>(in.gcount()));
  if (head.size() == 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[static_cast<size_t>(i)]);
    if (n <= kMaxHeaderBytes && n <= file_size - 8) {
      head.resize(8 + static_cast<size_t>(n));
      in.read(head.data() + 8, static_cast<std::streamsize>(n));
      head.resize(8 + static_cast<size_t>(in.gcount()));
    }
  }
  return parseLayout(head, file_size, path);
}

}  // namespace

StatusOr<CaptureFile> parseCapture(const std::string& bytes, const std::string& source) {
  NANPROV_ASSIGN_OR_RETURN(auto layout, parseLayout(bytes, bytes.size(), source));
  for (size_t i = 0; i < layout.spans.size(); ++i) {
    auto [begin, end] = layout.spans[i];
    layout.file.tensors[i].bytes.assign(bytes.begin() + static_cast<std::ptrdiff_t>(begin),
                                        bytes.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return std::move(layout.file);
}

StatusOr<CaptureFile> readCapture(const std::string& path) {
  std::ifstream in;
  NANPROV_ASSIGN_OR_RETURN(auto layout, readLayout(path, in));
  // Each tensor read straight into its own buffer: a capture of a big call is hundreds of MB,
  // and the data follows the header in tensor order, so this is one sequential pass.
  for (size_t i = 0; i < layout.spans.size(); ++i) {
    auto [begin, end] = layout.spans[i];
    std::vector<uint8_t>& bytes = layout.file.tensors[i].bytes;
    bytes.resize(static_cast<size_t>(end - begin));
    in.seekg(static_cast<std::streamoff>(begin));
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (static_cast<uint64_t>(in.gcount()) != end - begin) {
      return broken(path,
                    "tensor " + layout.file.tensors[i].name + " was cut short while reading (was the file truncated?)");
    }
  }
  return std::move(layout.file);
}

Status checkCapture(const std::string& path) { return readCaptureMetadata(path).status(); }

StatusOr<std::map<std::string, std::string>> readCaptureMetadata(const std::string& path) {
  std::ifstream in;
  NANPROV_ASSIGN_OR_RETURN(auto layout, readLayout(path, in));
  return std::move(layout.file.metadata);
}

std::string captureSidecarPath(const std::string& capture_path, const std::string& suffix) {
  std::filesystem::path p(capture_path);
  if (p.extension() == ".safetensors") p.replace_extension();
  return p.string() + suffix;
}

}  // namespace nanprov::store
