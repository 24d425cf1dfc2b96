// End-to-end: a capture keeps each tensor's strides, storage offset and pointer alignment from the
// run, and `nanprov replay` rebuilds them (or says it could not). The run is real CPU training
// whose q, k and v are views into one fused projection at storage offsets 1, 17 and 33.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

json replayJson(const fs::path& capture) {
  Result r = sh(nanprov() + " replay " + capture.string() + " --json");
  return json::parse(r.out, nullptr, false);
}

fs::path firstCapture(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir / "captures")) {
    if (entry.path().extension() == ".safetensors") return entry.path();
  }
  return {};
}

TEST(ReplayLayout, FusedProjectionViewsReplayAtTheirStorageOffsetAndAlignment) {
  TrainedRun r =
      train("fused-qkv", "--capture step=0,phase=fwd", "", std::string(NANPROV_TEST_SCRIPTS) + "/fused_qkv_views.py");
  ASSERT_EQ(r.train.code, 0) << r.train.out;
  const fs::path capture = firstCapture(r.dir);
  ASSERT_FALSE(capture.empty()) << r.train.out;
  json d = replayJson(capture);
  ASSERT_TRUE(d.contains("layouts")) << d.dump(1);
  const json& layouts = d["layouts"];
  // [B, H, S, D] views of the [B, S, 1 + 3E] projection (E = 16): strides (S(1+3E), D, 1+3E, 1).
  const std::vector<int64_t> strides = {5 * 49, 8, 49, 1};
  const std::map<std::string, int64_t> offsets = {{"Q", 1}, {"K", 17}, {"V", 33}};
  for (const auto& [role, offset] : offsets) {
    const json& l = layouts[role];
    EXPECT_EQ(l["recorded"]["storage_offset"], offset) << role << " " << l.dump();
    EXPECT_EQ(l["recorded"]["strides"], json(strides)) << role << " " << l.dump();
    EXPECT_EQ(l["replayed"]["storage_offset"], offset) << role << " " << l.dump();
    EXPECT_EQ(l["replayed"]["strides"], json(strides)) << role << " " << l.dump();
    EXPECT_EQ(l["replayed"]["alignment"], l["recorded"]["alignment"]) << role << " " << l.dump();
    EXPECT_EQ(l["faithful"], true) << role << " " << l.dump();
  }
  // The CPU allocator aligns the projection to 64 bytes: q, one float in, is 4-byte aligned.
  EXPECT_EQ(layouts["Q"]["recorded"]["alignment"], 4) << layouts.dump();
  // The replay itself ran on the rebuilt views.
  for (const json& b : d["backends"]) EXPECT_EQ(b["status"], "ran") << b.dump();
  Result text = sh(nanprov() + " replay " + capture.string());
  EXPECT_NE(text.out.find("rebuilt as in the run (strides, storage offset, alignment)"), std::string::npos) << text.out;
}

TEST(ReplayLayout, ACaptureWithoutLayoutFactsSaysItReplayedContiguous) {
  const fs::path file = runDir("layout-unrecorded") / "call.safetensors";
  Result made = saveCapture(file, "q = torch.randn(1, 2, 4, 8)", "'Q': q, 'K': q.clone(), 'V': q.clone()");
  ASSERT_EQ(made.code, 0) << made.out;
  json d = replayJson(file);
  ASSERT_TRUE(d.contains("layouts")) << d.dump(1);
  EXPECT_EQ(d["layouts"]["Q"]["faithful"], false) << d["layouts"].dump();
  EXPECT_EQ(d["layouts"]["Q"]["note"], "layout not recorded, replayed contiguous") << d["layouts"].dump();
  EXPECT_TRUE(d["layouts"]["Q"]["recorded"]["storage_offset"].is_null());
  Result text = sh(nanprov() + " replay " + file.string());
  EXPECT_NE(text.out.find("layout: Q: layout not recorded, replayed contiguous"), std::string::npos) << text.out;

  // Strides recorded (an older nanprov kept them), offset and alignment not: said so.
  const fs::path strided = runDir("layout-strides-only") / "call.safetensors";
  made = saveCapture(strided, "q = torch.randn(1, 2, 4, 8)", "'Q': q, 'K': q.clone(), 'V': q.clone()",
                     "'phase': 'fwd', 'stride.Q': '[64,1,16,2]'");
  ASSERT_EQ(made.code, 0) << made.out;
  d = replayJson(strided);
  EXPECT_EQ(d["layouts"]["Q"]["replayed"]["strides"], json({64, 1, 16, 2})) << d["layouts"].dump();
  EXPECT_EQ(d["layouts"]["Q"]["note"],
            "storage offset and alignment not recorded: replayed with the run's strides at "
            "storage offset 0, 256-byte aligned")
      << d["layouts"].dump();
}

TEST(ReplayLayout, AMalformedLayoutIsOneClearError) {
  const fs::path file = runDir("layout-malformed") / "call.safetensors";
  Result made = saveCapture(file, "q = torch.randn(1, 2, 4, 8)", "'Q': q, 'K': q.clone(), 'V': q.clone()",
                            "'phase': 'fwd', 'align.K': '24'");
  ASSERT_EQ(made.code, 0) << made.out;
  Result r = sh(nanprov() + " replay " + file.string() + " 2>&1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("align.K '24' is not a power of two from 1 to 256"), std::string::npos) << r.out;
}

}  // namespace
