#include "store/call_cursor.h"

#include "base/text.h"
#include "store/call_signature.h"
#include "store/rank_store.h"
#include "store/sqlite_rows.h"

namespace nanprov::store {

std::string seqList(const std::vector<int64_t>& seqs) {
  std::string list;
  for (int64_t seq : seqs) list += (list.empty() ? "" : ",") + std::to_string(seq);
  return list;
}

CallFilter CallFilter::of(const std::vector<int64_t>& seqs) {
  return {{"c.seq IN (" + seqList(seqs) + ")"}, {}, false};
}

CallFilter CallFilter::matching(const CallQuery& q) {
  CallFilter f;
  auto equal = [&f](const char* column, std::variant<int64_t, std::string> value) {
    f.conditions.push_back(std::string(column) + " = ?");
    f.args.push_back(std::move(value));
  };
  if (q.layer) equal("c.layer", *q.layer);
  if (q.call) equal("c.call", *q.call);
  if (q.step) equal("c.step", *q.step);
  if (q.first_step) {
    f.conditions.push_back("c.step >= ?");
    f.args.push_back(*q.first_step);
  }
  if (q.last_step) {
    f.conditions.push_back("c.step <= ?");
    f.args.push_back(*q.last_step);
  }
  if (q.phase) equal("c.phase", std::string(phaseName(*q.phase)));
  // Backend and module live in the signatures, a few rows: find theirs once, then test an id set.
  if (!q.backend.empty() || !q.module_glob.empty()) {
    std::string sigs = "c.sig IN (SELECT id FROM signatures WHERE 1";
    if (!q.backend.empty()) {
      sigs += " AND backend = ?";
      f.args.push_back(q.backend);
    }
    if (!q.module_glob.empty()) {
      sigs += " AND IFNULL(module, '') GLOB ?";
      f.args.push_back(q.module_glob);
    }
    f.conditions.push_back(sigs + ")");
  }
  if (q.not_clean) {
    f.conditions.push_back("c.health != 0");
    f.by_time = true;
  }
  return f;
}

StatusOr<CallCursor> CallCursor::open(sqlite3* db, const std::string& path, const CallFilter& filter) {
  std::string where;
  for (const std::string& c : filter.conditions) where += (where.empty() ? " WHERE " : " AND ") + c;
  // Stores written before deferred checks have no `modified` column (nothing was deferred there),
  // and those before dropout was recorded no `dropout_p` (nothing said it).
  const bool has_modified = sqlite::hasColumn(db, "calls", "modified");
  const bool has_dropout = sqlite::hasColumn(db, "calls", "dropout_p");
  NANPROV_ASSIGN_OR_RETURN(
      sqlite::Stmt calls,
      orNotAStore(
          path,
          sqlite::prepare(
              db,
              "SELECT "
              "c.seq,c.rank,c.step,c.layer,c.call,c.phase,IFNULL(c.fwd_seq,-1),s.op,s.backend,IFNULL(s.module,''),"
              "c.start_ns,c.end_ns,IFNULL(c.injected,''),s.device,IFNULL(n.text,''),c.recompute,c.health,c.max_abs,s."
              "tensors,"
              "c.detail,c.sig," +
                  std::string(has_modified ? "IFNULL(c.modified,'')" : "''") + "," +
                  (has_dropout ? "c.dropout_p" : "NULL") +
                  " "
                  "FROM calls c JOIN signatures s ON s.id = c.sig LEFT JOIN notes n ON n.id = c.note" +
                  where + (filter.by_time ? " ORDER BY c.step, c.start_ns, c.seq" : " ORDER BY c.seq"))));
  int i = 1;
  for (const auto& arg : filter.args) {
    if (const int64_t* n = std::get_if<int64_t>(&arg)) {
      sqlite3_bind_int64(calls.get(), i++, *n);
    } else {
      const std::string& text = std::get<std::string>(arg);
      sqlite3_bind_text(calls.get(), i++, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    }
  }
  // rowid keeps the probes' role order.
  NANPROV_ASSIGN_OR_RETURN(
      sqlite::Stmt tensors,
      orNotAStore(
          path,
          sqlite::prepare(
              db,
              "SELECT role,dtype,shape,numel,nan,posinf,neginf,max_abs,all_zero,IFNULL(masked_rows,-1) FROM tensors "
              "WHERE seq = ? ORDER BY rowid")));
  return CallCursor(db, path, std::move(calls), std::move(tensors));
}

Status CallCursor::readTensorRows(CallRecord* call) {
  sqlite3_stmt* s = tensors_.get();
  sqlite3_reset(s);
  sqlite3_bind_int64(s, 1, call->seq);
  return sqlite::eachRow(db_, s, path_, [this, call](sqlite3_stmt* row) {
    TensorHealth& t = call->tensors.emplace_back();
    std::string role, dtype, shape;
    sqlite::readRow(row, 0, role, dtype, shape, t.numel, t.nan, t.posinf, t.neginf, t.max_abs, t.all_zero,
                    t.masked_rows);
    auto r = parseRole(role);
    auto s = TensorShape::parse(shape);
    if (!r || !s) {
      return notAStore(path_, "call " + std::to_string(call->seq) + " has a tensor with role '" + printable(role) +
                                  "' and shape '" + printable(shape) + "', which nanprov never writes");
    }
    t.role = *r;
    t.dtype = DtypeName::intern(dtype);
    t.shape = *s;
    return Status::Ok();
  });
}

StatusOr<bool> CallCursor::next(CallRecord* out) {
  sqlite3_stmt* s = calls_.get();
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) return false;
  if (rc != SQLITE_ROW) return notAStore(path_, sqlite::errorOf(db_));
  CallRecord c;
  std::string phase, device;
  sqlite::readRow(s, 0, c.seq, c.rank, c.step, c.layer, c.call, phase, c.fwd_seq, c.op, c.backend, c.module, c.start_ns,
                  c.end_ns, c.injected, device, c.unattributed, c.recompute, c.health);
  parsePhase(phase, &c.phase);
  if (auto parsed = Device::parse(device)) c.device = *parsed;
  else
    return notAStore(path_, "call " + std::to_string(c.seq) + " ran on an unknown device '" + printable(device) + "'");
  // A clean call carries max |x| per tensor, any other its detail blob; both fill the tensors its
  // signature describes. Calls with neither have tensor rows.
  bool compact = sqlite3_column_type(s, 17) == SQLITE_BLOB, detailed = sqlite3_column_type(s, 19) == SQLITE_BLOB;
  if (compact || detailed) {
    int64_t sig = sqlite3_column_int64(s, 20);
    auto known = described_.find(sig);
    if (known == described_.end()) known = described_.emplace(sig, tensorsFromDescription(columnText(s, 18))).first;
    c.tensors = known->second;
    int col = compact ? 17 : 19;
    const void* blob = sqlite3_column_blob(s, col);
    size_t bytes = static_cast<size_t>(sqlite3_column_bytes(s, col));
    if (!(compact ? fillMaxAbs(blob, bytes, c.tensors) : fillDetail(blob, bytes, c.tensors))) {
      return notAStore(path_, "call " + std::to_string(c.seq) + " has tensor health that does not fit its signature");
    }
  } else {
    NANPROV_RETURN_IF_ERROR(readTensorRows(&c));
  }
  c.modified = columnText(s, 21);
  sqlite::readColumn(s, 22, c.dropout_p);
  *out = std::move(c);
  return true;
}

}  // namespace nanprov::store
