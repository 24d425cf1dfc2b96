// Status and StatusOr: library code reports failure as a value, never by throwing across a
// module boundary. The CLI turns a Status into one line and an exit code; the probes log it and
// carry on, because they run inside someone's training job.
// Both are [[nodiscard]]: a result dropped without a look does not compile quietly. A caller that
// means to go on whatever happened says so (`.ignore()`, with a comment saying why).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace nanprov {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  const std::string& message() const {
    static const std::string kOk = "ok";
    return message_ ? *message_ : kOk;
  }
  // The same failure with what was being done in front ("reading runs/a: disk I/O error"), added
  // on the way up; Ok stays Ok.
  Status withContext(std::string_view context) const {
    return ok() ? Status() : Status(std::string(context) + ": " + *message_);
  }
  // Visibly discards the result: the caller goes on whatever it was.
  void ignore() const {}

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : value_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(value_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(value_); }
  T& value() { return std::get<T>(value_); }
  const T& value() const { return std::get<T>(value_); }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> value_;
};

#define NANPROV_RETURN_IF_ERROR(expr) \
  do {                                \
    ::nanprov::Status _st = (expr);   \
    if (!_st.ok()) return _st;        \
  } while (0)

// As NANPROV_RETURN_IF_ERROR, returning the failure with `context` in front (Status::withContext).
#define NANPROV_RETURN_IF_ERROR_WITH(expr, context) \
  do {                                              \
    ::nanprov::Status _st = (expr);                 \
    if (!_st.ok()) return _st.withContext(context); \
  } while (0)

// NANPROV_ASSIGN_OR_RETURN(auto rows, readRows(db)): declares `rows` from a StatusOr's value, or
// returns its Status from the enclosing function.
#define NANPROV_CONCAT_INNER(a, b) a##b
#define NANPROV_CONCAT(a, b) NANPROV_CONCAT_INNER(a, b)
#define NANPROV_ASSIGN_OR_RETURN(lhs, expr) \
  NANPROV_ASSIGN_OR_RETURN_IMPL(NANPROV_CONCAT(_statusor_, __LINE__), lhs, expr)
#define NANPROV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp.value())

}  // namespace nanprov
