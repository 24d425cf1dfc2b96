// The capture format: round trip, the bytes on disk, Python's safetensors opening it, and a
// loader that turns every hostile or broken file into one clear error (fuzzed).
#include "store/capture_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/records/dtype.h"
#include "tests/temp_dir.h"

namespace nanprov::store {
namespace {
namespace fs = std::filesystem;

CaptureFile sample() {
  CaptureFile f;
  f.metadata = {{"op", "aten::_scaled_dot_product_cudnn_attention_backward"}, {"phase", "bwd"}, {"scale", "0.125"}};
  f.tensors.push_back({"dO", "BF16", {2, 3}, std::vector<uint8_t>(12, 0x3f)});
  f.tensors.push_back({"mask", "BOOL", {3, 3}, {1, 1, 0, 1, 1, 1, 0, 0, 0}});
  f.tensors.push_back({"LSE", "F32", {2}, std::vector<uint8_t>(8, 0)});
  return f;
}

std::string fileBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A file with the given header text and `data_size` zero bytes of data.
std::string craft(const std::string& header, size_t data_size) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + header + std::string(data_size, '\0');
}

TEST(CaptureFile, RoundTripsTensorsMetadataAndOrder) {
  fs::path dir = testing::freshDir("capture");
  fs::path path = dir / "edge.safetensors";
  ASSERT_TRUE(writeCapture(path.string(), sample()).ok());
  EXPECT_FALSE(fs::exists(path.string() + ".partial"));
  auto back = readCapture(path.string());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->metadata.at("op"), "aten::_scaled_dot_product_cudnn_attention_backward");
  ASSERT_EQ(back->tensors.size(), 3u);
  EXPECT_EQ(back->tensors[0].name, "dO") << "data order, not JSON's";
  EXPECT_EQ(back->tensor("mask")->bytes, sample().tensors[1].bytes);
  EXPECT_EQ(back->tensor("dO")->shape, (std::vector<int64_t>{2, 3}));

  std::string raw = fileBytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[static_cast<size_t>(i)]);
  EXPECT_EQ((8 + n) % 8, 0u) << "data starts 8-byte aligned";
  EXPECT_NE(raw.find("\"__metadata__\""), std::string::npos);
  EXPECT_EQ(raw.size(), 8 + n + 12 + 9 + 8);
}

TEST(CaptureFile, PythonSafetensorsOpensIt) {
  fs::path path = testing::freshDir("capture-py") / "edge.safetensors";
  ASSERT_TRUE(writeCapture(path.string(), sample()).ok());
  std::string script =
      "import sys\n"
      "try:\n"
      "    from safetensors import safe_open\n"
      "except ImportError:\n"
      "    sys.exit(77)\n"
      "with safe_open(sys.argv[1], framework='numpy') as f:\n"
      "    assert f.metadata()['phase'] == 'bwd', f.metadata()\n"
      "    assert sorted(f.keys()) == ['LSE', 'dO', 'mask'], list(f.keys())\n"
      "    assert f.get_tensor('mask').tolist()[2] == [False, False, False]\n"
      "    assert f.get_slice('dO').get_shape() == [2, 3]\n";
  fs::path py = path.parent_path() / "open.py";
  std::ofstream(py) << script;
  int rc = std::system((std::string(NANPROV_PYTHON) + " " + py.string() + " " + path.string()).c_str());
  if (WEXITSTATUS(rc) == 77) GTEST_SKIP() << "this Python has no safetensors";
  EXPECT_EQ(WEXITSTATUS(rc), 0);
}

void expectRefused(const std::string& bytes, const std::string& why) {
  auto r = parseCapture(bytes, "x.safetensors");
  ASSERT_FALSE(r.ok()) << "accepted a file that " << why;
  EXPECT_NE(r.status().message().find(why), std::string::npos) << why << " / " << r.status().message();
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line";
}

TEST(CaptureFile, HostileHeadersAreRefusedWithTheReason) {
  expectRefused("abc", "truncated");
  expectRefused(std::string("\xe8\x03\x00\x00\x00\x00\x00\x00", 8) + "{}", "runs past the end");  // claims 1000
  expectRefused(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8), "implausibly large");
  expectRefused(craft("[1,2]", 0), "does not begin with '{'");
  expectRefused(craft("{\"a\": }", 0), "not a JSON object");
  expectRefused(craft("{\"Q\": 3}", 0), "lacks dtype");
  expectRefused(craft(R"({"Q": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}})", 1), "unknown dtype 'Q7'");
  expectRefused(craft(R"({"Q": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4), "offsets span 4");
  expectRefused(craft(R"({"Q": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}})", 4), "out of range");
  expectRefused(craft(R"({"Q": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4), "out of range");
  expectRefused(craft(R"({"Q": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4), "bad dimension");
  expectRefused(craft(R"({"Q": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                         "K": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})",
                      8),
                "overlaps");
  expectRefused(craft(R"({"Q": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8), "unused bytes");
  expectRefused(craft(R"({"Q": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 9), "no tensor covers");
  expectRefused(craft(R"({"__metadata__": {"a": 1}})", 0), "not a string");
  expectRefused(
      craft(R"({"Q": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 4]}})", 4),
      "impossibly large");
  auto missing = readCapture("/nonexistent/capture.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no such capture file"), std::string::npos);
}

// What safetensors refuses, nanprov refuses: text before the '{' or NULs after the '}'.
TEST(CaptureFile, HeadersSafetensorsRefusesAreRefused) {
  const std::string header = R"({"Q": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  expectRefused(craft(header + std::string(8, '\0'), 4), "only spaces may pad it");
  expectRefused(craft("\xef\xbb\xbf" + header, 4), "does not begin with '{'");
  expectRefused(craft(" " + header, 4), "does not begin with '{'");
  EXPECT_TRUE(parseCapture(craft(header + "       ", 4), "padded").ok()) << "spaces are the padding safetensors writes";
}

// Deep or endless nesting is refused in one pass, before a JSON parser would spend gigabytes.
TEST(CaptureFile, DeepHeadersAreRefusedBeforeParsing) {
  expectRefused(craft("{\"a\":" + std::string(40'000'000, '[') + std::string(40'000'000, ']') + "}", 0),
                "nests deeper");
  expectRefused(craft(std::string(49'000'000, '['), 0), "does not begin with '{'");
  expectRefused(craft("{" + std::string(49'000'000, '['), 0), "does not end with '}'");
  std::string strings =
      R"({"__metadata__": {"k": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"{{{{{{{{{{{{{{{{{{{{{{{{"}})";
  EXPECT_TRUE(parseCapture(craft(strings, 0), "brackets in strings").ok()) << "brackets inside strings do not nest";
}

TEST(CaptureFile, ZeroSizeTensorsAreValid) {
  auto zero_first = parseCapture(craft(R"({"E": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]},
                                           "Q": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                                       4),
                                 "zero");
  ASSERT_TRUE(zero_first.ok()) << zero_first.status().message();
  auto zero_after = parseCapture(craft(R"({"Q": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                           "Z": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})",
                                       4),
                                 "zero");
  ASSERT_TRUE(zero_after.ok()) << zero_after.status().message();
  EXPECT_EQ(zero_after->tensors.size(), 2u);
}

TEST(CaptureFile, FuzzedFilesNeverCrashTheLoader) {
  fs::path path = testing::freshDir("capture-fuzz") / "edge.safetensors";
  ASSERT_TRUE(writeCapture(path.string(), sample()).ok());
  const std::string good = fileBytes(path);
  ASSERT_TRUE(parseCapture(good, "good").ok());
  // Every truncation is refused.
  for (size_t len = 0; len < good.size(); ++len) {
    EXPECT_FALSE(parseCapture(good.substr(0, len), "cut").ok()) << "accepted a file cut at " << len;
  }
  // Random corruption: any outcome but a crash or an accepted file whose tensors disagree with it.
  std::mt19937 rng(42);
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bad = good;
    for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
      bad[rng() % bad.size()] = static_cast<char>(rng());
    }
    auto r = parseCapture(bad, "fuzz");
    if (!r.ok()) {
      ++refused;
      continue;
    }
    for (const CaptureTensor& t : r->tensors) {
      uint64_t numel = 1;
      for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
      EXPECT_EQ(t.bytes.size(), numel * dtypeSize(t.dtype));
    }
  }
  EXPECT_GT(refused, 100) << "corruption should mostly be caught";
}

}  // namespace
}  // namespace nanprov::store
