// The layer × step picture of a run (`report --html`): per rank, phase, layer and step, the worst
// health of the attention calls there, and what makes it so. Built by streaming the run's calls,
// so its memory is bounded by ranks × rows × columns whatever the run's length and depth.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "base/records/call_record.h"
#include "base/status.h"
#include "report/audit_findings.h"

namespace nanprov::store {
struct RunData;  // store/reader.h: the model's types need no store header
}  // namespace nanprov::store

namespace nanprov::report {

// Ordered from best to worst: a cell shows the worst of its calls. An injected call is marked as
// injected whatever its values, since the report marks injected edges as injected. Unprobed: no
// checked call at all (the layer did not run then, ran unchecked, or its process had died).
enum class CellHealth { kUnprobed, kClean, kPropagated, kAuditFinding, kSourceEdge, kInjected };
// "unprobed" | "clean" | "propagated" | "audit-finding" | "source-edge" | "injected"
const char* cellHealthName(CellHealth h);

struct PictureCell {
  CellHealth health = CellHealth::kUnprobed;
  int64_t calls = 0, sources = 0, propagated = 0;
  std::string first_bad;                    // "rank0:layer1:call4: non-finite O, LSE", the first call here not clean
  std::vector<std::string> injected;        // "rank0:layer1:call4 O"
  std::vector<std::string> audit_findings;  // "rank0:layer1:call4 silent-wrong"
  bool first_edge = false;                  // holds the report's first edge
  bool first_source_edge = false;           // holds the first source edge, when that is a later call
};

// One row of a rank's picture: a layer, or in a deep model a band of consecutive layer numbers.
struct PictureRow {
  int64_t first_layer = 0, last_layer = 0;  // the layers seen in it
  std::string module;                       // the first layer's module path, as first seen ("" when none)
};

struct RankPicture {
  int rank = 0;
  std::map<int64_t, PictureRow> rows;  // row number (layer / layers_per_row, rounded down) → row
  // (row, phase, column) → cell; a missing cell is unprobed.
  std::map<std::tuple<int64_t, Phase, int64_t>, PictureCell> cells;

  const PictureCell& cell(int64_t row, Phase phase, int64_t column) const;
};

struct HealthPicture {
  // Above this many steps a column holds several, so that a long run's page stays small enough
  // to open: each cell is then the worst of its steps.
  static constexpr int64_t kMaxColumns = 200;
  // Above this many layers a row holds a band of them, for the same reason: a model of 20,000
  // layers draws 20,000 rows otherwise. Each cell is then the worst of its layers.
  static constexpr int64_t kMaxRows = 256;

  int64_t steps_per_column = 1;
  int64_t layers_per_row = 1;  // row r holds layers [r·layers_per_row, (r+1)·layers_per_row)
  int64_t columns = 0;         // column c holds steps [c·steps_per_column, (c+1)·steps_per_column)
  std::vector<Phase> phases;   // the phases any call of the run had, fwd first
  std::vector<RankPicture> ranks;
};

// Reads every call of the run from its stores, and marks the report's audit findings, its first
// edge and (when it is a later call) its first source edge.
StatusOr<HealthPicture> drawHealthPicture(const store::RunData& run, const std::vector<AuditFinding>& findings,
                                          const CallRecord* first_edge, const CallRecord* first_source_edge);

}  // namespace nanprov::report
