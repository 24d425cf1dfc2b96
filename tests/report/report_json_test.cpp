#include "report/report_json.h"

#include <gtest/gtest.h>

#include "tests/report/synthetic_report.h"

namespace nanprov::report {
namespace {

using nlohmann::json;
using synthetic::edgeReport;
using synthetic::facts;

// The JSON renders the model alone, values as stored: the edge with its trail, kernels and capture.
TEST(ReportJson, TheEdgeCarriesWhatTheModelSaysOfIt) {
  Report r = edgeReport();
  r.first_edge->call.module = "layers.0\nattn";
  const json doc = reportJson(r);
  EXPECT_EQ(doc["outcome"], "edge");
  EXPECT_EQ(doc["clean"], false);
  const json& edge = doc["first_edge"];
  EXPECT_EQ(edge["name"], "rank0:layer0:call6");
  EXPECT_EQ(edge["module"], "layers.0\nattn") << "kept as stored";
  EXPECT_EQ(edge["origin"], "attention");
  EXPECT_EQ(edge["kind"], "source");
  EXPECT_EQ(edge["input_trail"]["largest_abs"], 9.3e19);
  EXPECT_EQ(edge["input_trail"]["previous_call"], nullptr);
  EXPECT_EQ(edge["kernels_from"], "run");
  EXPECT_EQ(edge["kernel_attribution"], "the ATen CPU op");
  ASSERT_EQ(edge["kernels"].size(), 1u);
  EXPECT_EQ(edge["kernels"][0]["device"], "cpu");
  EXPECT_EQ(edge["capture"], "runs/edge/captures/rank0-layer0-call6-fwd-seq12.safetensors");
  EXPECT_EQ(edge["capture_skipped"], nullptr);
  EXPECT_FALSE(doc["first_source_edge"].contains("origin")) << "the origin is the first edge's";
  EXPECT_EQ(doc["propagation"]["calls"], 12);
  EXPECT_EQ(doc["gradient_sentinel"]["parameters"], json::array({"embed.weight"}));
  EXPECT_EQ(doc["gradient_sentinel"]["nonfinite"], 1);
}

// Each edge names the node and GPU it ran on; what is not known is null, never "".
TEST(ReportJson, EachEdgeNamesItsDevice) {
  Report r = edgeReport();
  r.first_edge->device = DeviceIdentity{.host = "vm", .device = "cpu"};
  const json doc = reportJson(r);
  EXPECT_EQ(doc["first_edge"]["device_identity"], json({{"host", "vm"},
                                                        {"device", "cpu"},
                                                        {"gpu", nullptr},
                                                        {"gpu_uuid", nullptr},
                                                        {"pci_bus_id", nullptr},
                                                        {"driver", nullptr},
                                                        {"cuda_driver", nullptr},
                                                        {"cudnn", nullptr}}));
  EXPECT_EQ(doc["first_edge"]["device"], "cpu") << "the call's device stays the string it was";
  EXPECT_EQ(doc["first_source_edge"]["device_identity"]["host"], nullptr) << "its own, not the first edge's";
}

TEST(ReportJson, TheRunsFactsAreListed) {
  Report r{.run = facts()};
  r.run.summarised = Summarised{.calls = 5, .first_step = 1, .last_step = 2, .ranks = 1};
  r.run.missing_ranks = {1};
  r.run.unrecorded = {{1, "no store"}, {0, "a second process"}};
  r.run.job = "slurm:42.0";
  r.run.unchecked = {UncheckedAttention{.what = "w", .kind = "k", .count = 2}};
  const json doc = reportJson(r);
  EXPECT_EQ(doc["first_edge"], nullptr);
  EXPECT_EQ(doc["outcome"], "clean");
  EXPECT_EQ(doc["summary"], (json{{"ranks", 1}, {"calls", 24}, {"steps", 6}}));
  EXPECT_EQ(doc["coverage"]["summarised"]["calls"], 5);
  EXPECT_EQ(doc["coverage"]["unprobed"][0]["probe_module"], nullptr);
  EXPECT_EQ(doc["ranks"][0]["store"], "runs/edge/rank-0.sqlite");
  EXPECT_EQ(doc["ranks"][0]["meta"]["host"], "vm");
  EXPECT_EQ(doc["job"], "slurm:42.0");
  EXPECT_EQ(doc["missing_ranks"], json::array({1}));
  ASSERT_EQ(doc["unrecorded_ranks"].size(), 2u);
  EXPECT_EQ(doc["unrecorded_ranks"][0]["store_read"], true)
      << "rank 0's store was read: a second process of it had none";
  EXPECT_EQ(doc["unrecorded_ranks"][1]["store_read"], false);
  EXPECT_EQ(doc["step_unit"], "optimizer_step");
  EXPECT_EQ(doc["trail"]["on"], false);
}

// `calls --json` lists calls in the same shape as the report's edges.
TEST(ReportJson, ACallIsItsRecordAndItsHealth) {
  CallRecord c = synthetic::forward(1, 4, 2, 3, /*o_nan=*/1);
  c.injected = "O";
  const json j = callJson(c, classify(c));
  EXPECT_EQ(j["name"], "rank1:layer3:call4");
  EXPECT_EQ(j["kind"], "source");
  EXPECT_EQ(j["injected"], true);
  EXPECT_EQ(j["injected_tensor"], "O");
  EXPECT_EQ(j["fwd_seq"], nullptr);
  EXPECT_EQ(j["counts"]["O"]["nan"], 1);
  EXPECT_EQ(j["tensors"].size(), 4u);
}

}  // namespace
}  // namespace nanprov::report
