// The store's schema, one SQLite database per rank (rank-<r>.sqlite). Documented for users in
// store/README.md, because people query it with `nanprov sql`.
#pragma once

namespace nanprov {

inline constexpr int kSchemaVersion = 3;  // 2: kernels, calls.device, calls.unattributed; 3: captures

// Idempotent: every statement is CREATE ... IF NOT EXISTS.
extern const char* const kSchemaSql;

}  // namespace nanprov
