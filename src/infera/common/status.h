// Expected failures as values: Status and Result<T> (Abseil-shaped, no exceptions).
// Bugs are not statuses: they abort through INFERA_CHECK (check.h). Status is a plain value type;
// any thread may create, copy or read one. The one mapping from Status to an HTTP answer lives
// in the http module (error mapping), never here.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "infera/common/check.h"

namespace infera {

enum class StatusCode {
  kOk,
  kInvalidArgument,     // the caller sent something malformed (HTTP 400)
  kNotFound,            // a named thing does not exist (HTTP 404)
  kFailedPrecondition,  // state does not allow it; retrying will not help until it changes
  kOutOfRange,          // a value is outside its allowed range
  kResourceExhausted,   // a limit was hit (body too large, queue full: 413 / 429)
  kUnavailable,         // try again later, possibly elsewhere (HTTP 503)
  kDeadlineExceeded,    // a deadline passed (HTTP 504)
  kCancelled,           // the caller went away
  kUnimplemented,       // a feature that does not exist yet
  kDataLoss,            // input was truncated or corrupt
  kUnauthenticated,     // no valid credentials (HTTP 401)
  kPermissionDenied,    // known, but not allowed (HTTP 403)
  kInternal,            // an invariant of a dependency broke (HTTP 500)
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string to_string() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status failed_precondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status resource_exhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status deadline_exceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status unauthenticated(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status permission_denied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status that explains why there is none. Accessing the value of an error
// Result is a bug (aborts).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    INFERA_CHECK(!std::get<Status>(data_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(data_);
  }
  T& value() & {
    INFERA_CHECK(ok());
    return std::get<T>(data_);
  }
  const T& value() const& {
    INFERA_CHECK(ok());
    return std::get<T>(data_);
  }
  T&& value() && {
    INFERA_CHECK(ok());
    return std::get<T>(std::move(data_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace infera

// Returns the Status from the enclosing function when `expr` is not ok.
#define INFERA_RETURN_IF_ERROR(expr)        \
  do {                                      \
    ::infera::Status infera_status_ = (expr); \
    if (!infera_status_.ok()) return infera_status_; \
  } while (false)

// The same inside a coroutine (co_return).
#define INFERA_CO_RETURN_IF_ERROR(expr)        \
  do {                                         \
    ::infera::Status infera_status_ = (expr);  \
    if (!infera_status_.ok()) co_return infera_status_; \
  } while (false)

#define INFERA_CONCAT_INNER_(a, b) a##b
#define INFERA_CONCAT_(a, b) INFERA_CONCAT_INNER_(a, b)
// `INFERA_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its Status.
#define INFERA_ASSIGN_OR_RETURN(decl, expr) \
  INFERA_ASSIGN_OR_RETURN_IMPL_(INFERA_CONCAT_(infera_result_, __LINE__), decl, expr)
// NOLINTBEGIN(bugprone-macro-parentheses): `tmp` is a name being declared and `decl` a
// declaration (`auto x`); neither can be parenthesized.
#define INFERA_ASSIGN_OR_RETURN_IMPL_(tmp, decl, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  decl = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
