#include "store/schema.h"

namespace nanprov::store {

const char* const kStepSummaryColumns[20] = {
    "step",     "last_step", "layer",   "phase",  "calls",  "first_seq", "last_seq", "max_q", "max_k", "max_v",
    "max_mask", "max_o",     "max_lse", "max_do", "max_dq", "max_dk",    "max_dv",   "max_s", "max_p", "not_clean"};

const std::vector<const char*> kTrendColumns = {"layer",  "step",   "last_step",    "bucket_steps", "calls",
                                                "module", "logit",  "logit_source", "scores_dtype", "max_o",
                                                "max_dq", "max_dk", "max_dv"};
const std::vector<const char*> kTrendWarningColumns = {"layer",     "module",     "kind",   "step",         "value",
                                                       "from_step", "from_value", "source", "scores_dtype", "text"};
const std::vector<const char*> kReplicaDigestColumns = {"step", "parameter", "digest"};

const char* const kSchemaSql = R"sql(
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS signatures (
  id       INTEGER PRIMARY KEY,
  op       TEXT NOT NULL,
  backend  TEXT NOT NULL,
  module   TEXT,
  device   TEXT NOT NULL,
  tensors  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS notes (
  id   INTEGER PRIMARY KEY,
  text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
  seq      INTEGER PRIMARY KEY,
  rank     INTEGER NOT NULL,
  step     INTEGER NOT NULL,
  layer    INTEGER NOT NULL,
  call     INTEGER NOT NULL,
  phase    TEXT NOT NULL CHECK (phase IN ('fwd', 'bwd')),
  fwd_seq  INTEGER,
  recompute INTEGER NOT NULL DEFAULT 0,
  sig      INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns   INTEGER NOT NULL,
  injected TEXT,
  note     INTEGER,
  health   INTEGER NOT NULL DEFAULT 0,
  max_abs  BLOB,
  detail   BLOB,
  modified TEXT,
  dropout_p REAL
);
CREATE INDEX IF NOT EXISTS calls_not_clean ON calls(step, start_ns) WHERE health != 0;
CREATE TABLE IF NOT EXISTS tensors (
  seq         INTEGER NOT NULL,
  role        TEXT NOT NULL,
  dtype       TEXT NOT NULL,
  shape       TEXT NOT NULL,
  numel       INTEGER NOT NULL,
  nan         INTEGER NOT NULL,
  posinf      INTEGER NOT NULL,
  neginf      INTEGER NOT NULL,
  max_abs     REAL NOT NULL,
  all_zero    INTEGER NOT NULL,
  masked_rows INTEGER,
  UNIQUE (seq, role)
);
CREATE TABLE IF NOT EXISTS kernels (
  seq            INTEGER NOT NULL,
  correlation_id INTEGER NOT NULL,
  name           TEXT NOT NULL,
  grid_x INTEGER NOT NULL, grid_y INTEGER NOT NULL, grid_z INTEGER NOT NULL,
  block_x INTEGER NOT NULL, block_y INTEGER NOT NULL, block_z INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns   INTEGER NOT NULL,
  device   INTEGER NOT NULL,
  stream   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS kernels_by_call ON kernels(seq);
CREATE TABLE IF NOT EXISTS captures (
  seq     INTEGER NOT NULL,
  trigger TEXT NOT NULL,
  path    TEXT,
  bytes   INTEGER NOT NULL,
  skipped TEXT
);
CREATE TABLE IF NOT EXISTS sentinel (
  step      INTEGER NOT NULL,
  tensor    TEXT NOT NULL CHECK (tensor IN ('grad', 'param')),
  parameter TEXT NOT NULL,
  norm      REAL
);
CREATE TABLE IF NOT EXISTS module_checks (
  step          INTEGER NOT NULL,
  phase         TEXT NOT NULL CHECK (phase IN ('fwd', 'bwd')),
  module        TEXT NOT NULL,
  class         TEXT NOT NULL,
  inputs_finite INTEGER NOT NULL,
  nan           INTEGER NOT NULL,
  posinf        INTEGER NOT NULL,
  neginf        INTEGER NOT NULL,
  largest_input REAL NOT NULL,
  ord           INTEGER NOT NULL,
  time_ns       INTEGER NOT NULL,
  gradient      INTEGER NOT NULL,
  unchecked     TEXT NOT NULL DEFAULT '',
  inputs        TEXT NOT NULL DEFAULT 'finite'
);
CREATE TABLE IF NOT EXISTS collectives (
  step        INTEGER NOT NULL,
  ord         INTEGER NOT NULL,
  op          TEXT NOT NULL,
  grp         TEXT NOT NULL,
  group_size  INTEGER NOT NULL,
  tensors     INTEGER NOT NULL,
  in_checked  INTEGER NOT NULL,
  in_numel    INTEGER NOT NULL,
  in_nan      INTEGER NOT NULL,
  in_posinf   INTEGER NOT NULL,
  in_neginf   INTEGER NOT NULL,
  in_max_abs  REAL NOT NULL,
  out_checked INTEGER NOT NULL,
  out_numel   INTEGER NOT NULL,
  out_nan     INTEGER NOT NULL,
  out_posinf  INTEGER NOT NULL,
  out_neginf  INTEGER NOT NULL,
  out_max_abs REAL NOT NULL,
  time_ns     INTEGER NOT NULL
);
-- Digests of a rank's parameters that DDP replicates, after the step's update
-- (base/records/replica_digest.h): every step's of the whole model (parameter ''), and each
-- parameter's at the steps store/replica_digest_rows.h keeps.
CREATE TABLE IF NOT EXISTS replica_digests (
  step      INTEGER NOT NULL,
  parameter TEXT NOT NULL,
  digest    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS replica_digests_by_step ON replica_digests(step);
-- The store budget's summaries: one row per (step, layer, phase) for calls whose rows were pruned
-- (store/budget_keeper.h); a row may stand for the steps step..last_step once thinned. not_clean:
-- how many of its calls were not clean (a run that stayed non-finite past its first edge steps).
CREATE TABLE IF NOT EXISTS step_summaries (
  step      INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  layer     INTEGER NOT NULL,
  phase     TEXT NOT NULL,
  calls     INTEGER NOT NULL,
  first_seq INTEGER NOT NULL,
  last_seq  INTEGER NOT NULL,
  max_q REAL, max_k REAL, max_v REAL, max_mask REAL, max_o REAL, max_lse REAL,
  max_do REAL, max_dq REAL, max_dk REAL, max_dv REAL, max_s REAL, max_p REAL,
  not_clean INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (step, layer, phase)
) WITHOUT ROWID;
-- Each layer's trend (base/logit_trend.h): one row per bucket of steps (the steps step..last_step
-- were seen; buckets are aligned, bucket_steps = 2^k wide, k rising as the run grows), the largest attention logit and |x|
-- of O, dQ, dK, dV over its calls. Every call feeds it, whatever the budget keeps.
CREATE TABLE IF NOT EXISTS trends (
  layer        INTEGER NOT NULL,
  step         INTEGER NOT NULL,
  last_step    INTEGER NOT NULL,
  bucket_steps INTEGER NOT NULL,
  calls        INTEGER NOT NULL,
  module       TEXT,
  logit        REAL,
  logit_source TEXT,
  scores_dtype TEXT,
  max_o REAL, max_dq REAL, max_dk REAL, max_dv REAL,
  PRIMARY KEY (layer, step)
) WITHOUT ROWID;
-- The warnings the run printed or would have printed (one per layer and kind), when they came.
CREATE TABLE IF NOT EXISTS trend_warnings (
  layer        INTEGER NOT NULL,
  module       TEXT,
  kind         TEXT NOT NULL,
  step         INTEGER NOT NULL,
  value        REAL NOT NULL,
  from_step    INTEGER NOT NULL,
  from_value   REAL NOT NULL,
  source       TEXT NOT NULL,
  scores_dtype TEXT,
  text         TEXT NOT NULL,
  PRIMARY KEY (layer, kind)
);
CREATE TABLE IF NOT EXISTS steps (
  step   INTEGER PRIMARY KEY,
  end_ns INTEGER NOT NULL
);
)sql";

}  // namespace nanprov::store
