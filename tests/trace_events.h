// Checks of a Chrome trace-event file, shared by the unit and end-to-end tests of `nanprov trace`:
// the fields each event needs, nesting per track as Perfetto requires, and flows that pair up.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace trace_events {
using nlohmann::json;

// ns from the file's µs, as Perfetto reads them (llround(µs * 1000)).
inline int64_t ns(const json& us) { return std::llround(us.get<double>() * 1000.0); }

inline std::vector<json> eventsOf(const json& trace, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == ph) out.push_back(e);
  }
  return out;
}

// The pid of the process named "rank <r>", or nullopt.
inline std::optional<int64_t> pidOfRank(const json& trace, int rank) {
  for (const json& e : eventsOf(trace, "M")) {
    if (e["name"] == "process_name" && e["args"]["name"] == "rank " + std::to_string(rank))
      return e["pid"].get<int64_t>();
  }
  return std::nullopt;
}

// The tid of the track named `name` in process `pid`, or nullopt.
inline std::optional<int64_t> tidNamed(const json& trace, int64_t pid, const std::string& name) {
  for (const json& e : eventsOf(trace, "M")) {
    if (e["name"] == "thread_name" && e["pid"] == pid && e["args"]["name"] == name) return e["tid"].get<int64_t>();
  }
  return std::nullopt;
}

// Every event has what its phase needs; times are µs, at ns resolution, from the origin on.
inline void expectSchema(const json& trace) {
  ASSERT_TRUE(trace.is_object() && trace["traceEvents"].is_array()) << "not a trace-event file";
  const std::set<std::string> phases = {"X", "M", "s", "f", "i"};
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e["ph"].is_string() && phases.count(e["ph"].get<std::string>())) << e.dump();
    ASSERT_TRUE(e["name"].is_string() && !e["name"].get<std::string>().empty()) << e.dump();
    // Perfetto reads pid 0 as the idle task and ids as unsigned 32-bit numbers.
    ASSERT_TRUE(e["pid"].is_number_integer() && e["pid"] > 0 && e["pid"] <= UINT32_MAX) << e.dump();
    ASSERT_TRUE(e["tid"].is_number_integer() && e["tid"] > 0 && e["tid"] <= UINT32_MAX) << e.dump();
    if (e["ph"] == "M") continue;
    ASSERT_TRUE(e["ts"].is_number()) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0.0) << e.dump();
    EXPECT_NEAR(e["ts"].get<double>() * 1000.0, static_cast<double>(ns(e["ts"])), 1e-3)
        << "ts is µs at ns resolution: " << e.dump();
    if (e["ph"] == "X") {
      ASSERT_TRUE(e["dur"].is_number()) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
      EXPECT_TRUE(e["args"].is_object()) << e.dump();
    }
    if (e["ph"] == "s" || e["ph"] == "f") EXPECT_TRUE(e["id"].is_number_integer() && e["cat"].is_string()) << e.dump();
    if (e["ph"] == "f") EXPECT_EQ(e["bp"], "e") << e.dump();
    if (e["ph"] == "i") EXPECT_TRUE(e["s"] == "p" || e["s"] == "t" || e["s"] == "g") << e.dump();
  }
}

// The track an event is on: (pid, tid).
inline std::pair<int64_t, int64_t> trackOf(const json& e) { return {e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}; }

// The complete events of one track, as (start ns, end ns, name), in start order, outer first.
using TrackSlices = std::vector<std::tuple<int64_t, int64_t, std::string>>;
inline std::map<std::pair<int64_t, int64_t>, TrackSlices> slicesByTrack(const json& trace) {
  std::map<std::pair<int64_t, int64_t>, TrackSlices> tracks;
  for (const json& e : eventsOf(trace, "X")) {
    int64_t start = ns(e["ts"]);
    tracks[trackOf(e)].emplace_back(start, start + ns(e["dur"]), e["name"].get<std::string>());
  }
  for (auto& [key, slices] : tracks) {
    std::sort(slices.begin(), slices.end(), [](const auto& a, const auto& b) {
      return std::tuple(std::get<0>(a), -std::get<1>(a)) < std::tuple(std::get<0>(b), -std::get<1>(b));
    });
  }
  return tracks;
}

// On each track every slice lies inside the one it starts in, or starts after it ends.
inline void expectTracksNest(const json& trace) {
  for (const auto& [track, slices] : slicesByTrack(trace)) {
    std::vector<const std::tuple<int64_t, int64_t, std::string>*> open;
    for (const auto& s : slices) {
      while (!open.empty() && std::get<1>(*open.back()) <= std::get<0>(s)) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(std::get<1>(s), std::get<1>(*open.back()))
            << std::get<2>(s) << " overlaps " << std::get<2>(*open.back()) << " on pid " << track.first << " tid "
            << track.second;
      }
      open.push_back(&s);
    }
  }
}

// The names of the complete events on `track` whose span holds `at_ns`.
inline std::vector<std::string> slicesAt(const json& trace, std::pair<int64_t, int64_t> track, int64_t at_ns) {
  std::vector<std::string> names;
  auto tracks = slicesByTrack(trace);
  for (const auto& [start, end, name] : tracks[track]) {
    if (start <= at_ns && at_ns <= end) names.push_back(name);
  }
  return names;
}

// Every flow start has one end with its id, and each lies on a slice of its track; returns
// (start event, end event) per id.
inline std::map<int64_t, std::pair<json, json>> expectFlowsPair(const json& trace) {
  std::map<int64_t, std::pair<json, json>> flows;
  for (const json& e : eventsOf(trace, "s")) {
    EXPECT_TRUE(flows[e["id"]].first.is_null()) << "flow id used twice: " << e.dump();
    flows[e["id"]].first = e;
  }
  for (const json& e : eventsOf(trace, "f")) {
    EXPECT_TRUE(flows[e["id"]].second.is_null()) << "flow id ended twice: " << e.dump();
    flows[e["id"]].second = e;
  }
  for (const auto& [id, flow] : flows) {
    EXPECT_FALSE(flow.first.is_null()) << "flow " << id << " has no start";
    EXPECT_FALSE(flow.second.is_null()) << "flow " << id << " has no end";
    for (const json& end : {flow.first, flow.second}) {
      if (end.is_null()) continue;
      EXPECT_FALSE(slicesAt(trace, trackOf(end), ns(end["ts"])).empty()) << "flow event on no slice: " << end.dump();
    }
  }
  return flows;
}

}  // namespace trace_events
