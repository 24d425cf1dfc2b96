#include "report/health_picture.h"

#include <algorithm>

#include "base/records/call_health.h"
#include "base/records/call_name.h"
#include "base/text.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

// "rank0:layer1:call4: non-finite O, LSE" or "...: non-finite input Q"
std::string badCallText(const CallRecord& call, const CallHealth& health) {
  if (health.kind == EdgeKind::kPropagated)
    return callName(call) + ": non-finite input " + joined(health.nonfinite_inputs);
  return callName(call) + ": non-finite " + joined(health.nonfinite_outputs);
}

// Steps per column: one, unless the run is longer than the picture's columns (steps recorded
// per rank bound the calls' steps, up to the calls after the last boundary).
int64_t stepsPerColumn(const store::RunData& run) {
  int64_t steps = 0;
  for (const store::RankInfo& r : run.ranks) steps = std::max(steps, r.steps + 1);
  return std::max<int64_t>(1, (steps + HealthPicture::kMaxColumns - 1) / HealthPicture::kMaxColumns);
}

// The row of `layer`: its band of layers_per_row, rounded toward -infinity (layer -1 is "unknown").
int64_t rowOf(const HealthPicture& picture, int64_t layer) {
  const int64_t n = picture.layers_per_row;
  return layer >= 0 ? layer / n : -((-(layer + 1)) / n) - 1;
}

// The worst of two cells, as one: what a band of layers shows.
void mergeInto(PictureCell& into, PictureCell&& from) {
  into.health = std::max(into.health, from.health);
  into.calls += from.calls, into.sources += from.sources, into.propagated += from.propagated;
  if (into.first_bad.empty()) into.first_bad = std::move(from.first_bad);
  into.injected.insert(into.injected.end(), from.injected.begin(), from.injected.end());
  into.audit_findings.insert(into.audit_findings.end(), from.audit_findings.begin(), from.audit_findings.end());
  into.first_edge |= from.first_edge, into.first_source_edge |= from.first_source_edge;
}

// Doubles the layers a row holds until no rank has more than kMaxRows rows, merging the cells.
void widenRows(HealthPicture& picture) {
  auto tooMany = [&] {
    return std::any_of(picture.ranks.begin(), picture.ranks.end(), [](const RankPicture& r) {
      return static_cast<int64_t>(r.rows.size()) > HealthPicture::kMaxRows;
    });
  };
  while (tooMany() && picture.layers_per_row <= INT64_MAX / 2) {
    picture.layers_per_row *= 2;
    for (RankPicture& r : picture.ranks) {
      std::map<int64_t, PictureRow> rows;
      for (auto& [old, row] : r.rows) {
        auto [it, fresh] = rows.try_emplace(rowOf(picture, row.first_layer), row);
        if (!fresh) {
          it->second.first_layer = std::min(it->second.first_layer, row.first_layer);
          it->second.last_layer = std::max(it->second.last_layer, row.last_layer);
        }
      }
      std::map<std::tuple<int64_t, Phase, int64_t>, PictureCell> cells;
      for (auto& [key, cell] : r.cells) {
        // Each old row lies within one new row: its first layer says which.
        const int64_t row = rowOf(picture, r.rows.at(std::get<0>(key)).first_layer);
        mergeInto(cells[{row, std::get<1>(key), std::get<2>(key)}], std::move(cell));
      }
      r.rows = std::move(rows);
      r.cells = std::move(cells);
    }
  }
}

RankPicture& rankOf(HealthPicture& picture, int rank) {
  for (RankPicture& r : picture.ranks) {
    if (r.rank == rank) return r;
  }
  picture.ranks.push_back({.rank = rank});
  return picture.ranks.back();
}

// The cell of a call the report names, if the picture has it (a rank it does not draw has none).
PictureCell* cellAt(HealthPicture& picture, int64_t rank, int64_t layer, Phase phase, int64_t step) {
  for (RankPicture& r : picture.ranks) {
    if (r.rank != rank) continue;
    auto it = r.cells.find({rowOf(picture, layer), phase, std::max<int64_t>(step, 0) / picture.steps_per_column});
    return it == r.cells.end() ? nullptr : &it->second;
  }
  return nullptr;
}

}  // namespace

const char* cellHealthName(CellHealth h) {
  switch (h) {
    case CellHealth::kUnprobed: return "unprobed";
    case CellHealth::kClean: return "clean";
    case CellHealth::kPropagated: return "propagated";
    case CellHealth::kAuditFinding: return "audit-finding";
    case CellHealth::kSourceEdge: return "source-edge";
    case CellHealth::kInjected: return "injected";
  }
  return "unprobed";
}

const PictureCell& RankPicture::cell(int64_t row, Phase phase, int64_t column) const {
  static const PictureCell kUnprobedCell;
  auto it = cells.find({row, phase, column});
  return it == cells.end() ? kUnprobedCell : it->second;
}

StatusOr<HealthPicture> drawHealthPicture(const store::RunData& run, const std::vector<AuditFinding>& findings,
                                          const CallRecord* first_edge, const CallRecord* first_source_edge) {
  HealthPicture picture;
  picture.steps_per_column = stepsPerColumn(run);
  // Every rank that left a store gets its rows, even one that checked nothing.
  for (const store::RankInfo& r : run.ranks) rankOf(picture, r.rank);
  bool phase_seen[2] = {false, false};
  std::map<int, int64_t> steps_of;
  for (const store::RankInfo& r : run.ranks) steps_of[r.rank] = r.steps;
  Status damaged = Status::Ok();
  Status read = store::forEachCall(store::RunDirs(run.dirs), store::CallQuery{}, [&](const CallRecord& c) {
    // A call's step counts the boundaries its rank recorded before it, so a step far past them
    // is a damaged store; drawing up to it would make a page of any size.
    auto recorded = steps_of.find(c.rank);
    if (recorded == steps_of.end() || c.step > recorded->second + 1) {
      damaged = Status::Error("rank " + std::to_string(c.rank) + " holds a call at step " + std::to_string(c.step) +
                              " past the steps it recorded: the store is damaged");
      return false;
    }
    RankPicture& r = rankOf(picture, c.rank);
    auto [row, fresh] = r.rows.try_emplace(rowOf(picture, c.layer), PictureRow{c.layer, c.layer, c.module});
    row->second.first_layer = std::min(row->second.first_layer, c.layer);
    row->second.last_layer = std::max(row->second.last_layer, c.layer);
    if (fresh && static_cast<int64_t>(r.rows.size()) > HealthPicture::kMaxRows) widenRows(picture);
    const int64_t column = std::max<int64_t>(c.step, 0) / picture.steps_per_column;
    picture.columns = std::max(picture.columns, column + 1);
    phase_seen[c.phase == Phase::kBackward] = true;
    PictureCell& cell = r.cells[{rowOf(picture, c.layer), c.phase, column}];  // widening keeps `r` (ranks stay)
    ++cell.calls;
    CellHealth health = CellHealth::kClean;
    const CallHealth h = classify(c);
    if (h.kind != EdgeKind::kClean) {
      ++(h.kind == EdgeKind::kSourceEdge ? cell.sources : cell.propagated);
      health = h.kind == EdgeKind::kSourceEdge ? CellHealth::kSourceEdge : CellHealth::kPropagated;
      if (cell.first_bad.empty()) cell.first_bad = badCallText(c, h);
    }
    if (!c.injected.empty()) {
      health = CellHealth::kInjected;
      cell.injected.push_back(callName(c) + " " + c.injected);
    }
    cell.health = std::max(cell.health, health);
    return true;
  });
  if (!read.ok()) return read;
  if (!damaged.ok()) return damaged;
  for (Phase p : {Phase::kForward, Phase::kBackward}) {
    if (phase_seen[p == Phase::kBackward]) picture.phases.push_back(p);
  }
  // Audit findings name their call by (rank, layer, step, phase), as the report lists them.
  for (const AuditFinding& f : findings) {
    Phase phase;
    if (!f.layer || !parsePhase(f.phase, &phase))
      continue;  // a finding whose call is not known: listed in the findings table only
    if (PictureCell* cell = cellAt(picture, f.rank, *f.layer, phase, f.step)) {
      cell->audit_findings.push_back(f.name + " " + f.verdict.value_or("?"));
      cell->health = std::max(cell->health, CellHealth::kAuditFinding);
    }
  }
  if (const CallRecord* c = first_edge) {
    if (PictureCell* cell = cellAt(picture, c->rank, c->layer, c->phase, c->step)) cell->first_edge = true;
  }
  if (const CallRecord* c = first_source_edge) {
    if (PictureCell* cell = cellAt(picture, c->rank, c->layer, c->phase, c->step)) cell->first_source_edge = true;
  }
  std::sort(picture.ranks.begin(), picture.ranks.end(),
            [](const RankPicture& a, const RankPicture& b) { return a.rank < b.rank; });
  return picture;
}

}  // namespace nanprov::report
