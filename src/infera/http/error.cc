#include "infera/http/error.h"

#include <cstdint>

#include "infera/http/sse.h"

namespace infera::http {
namespace {

constexpr std::string_view kInvalidRequest = "invalid_request_error";
constexpr std::string_view kServerError = "server_error";
constexpr std::string_view kRateLimit = "rate_limit_error";
constexpr std::string_view kUpstreamError = "upstream_error";
constexpr std::string_view kTimeout = "timeout_error";
constexpr std::string_view kCancelled = "cancelled";
constexpr std::string_view kAuthentication = "authentication_error";
constexpr std::string_view kPermission = "permission_error";  // OpenAI's 403 type


void append_optional_string(std::string& out, std::string_view value) {
  if (value.empty()) {
    out += "null";
  } else {
    append_json_string(out, value);
  }
}

std::string_view default_message(int status) {
  switch (status) {
    case 400:
      return "bad request";
    case 401:
      return "authentication required";
    case 403:
      return "forbidden";
    case 404:
      return "not found";
    case 405:
      return "method not allowed";
    case 408:
      return "request timed out";
    case 413:
      return "request body too large";
    case 429:
      return "too many requests";
    case 431:
      return "request headers too large";
    case 499:
      return "request cancelled";
    case 501:
      return "not implemented";
    case 502:
      return "upstream failure";
    case 503:
      return "service unavailable";
    case 504:
      return "upstream timed out";
    default:
      return "internal error";
  }
}

}  // namespace

HttpError classify_error(const Status& status, const ErrorContext& context) {
  INFERA_CHECK(!status.ok());
  const bool request =
      context.origin == ErrorOrigin::kRequestHeader || context.origin == ErrorOrigin::kRequestBody;
  if (context.origin == ErrorOrigin::kUpstream) {
    switch (status.code()) {
      case StatusCode::kDeadlineExceeded:
        return {504, kTimeout};
      case StatusCode::kCancelled:
        return {499, kCancelled};
      default:
        return {502, kUpstreamError};
    }
  }
  switch (status.code()) {
    case StatusCode::kOk:
      break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
      return {400, kInvalidRequest};
    case StatusCode::kNotFound:
      return {404, kInvalidRequest};
    case StatusCode::kResourceExhausted:
      if (context.origin == ErrorOrigin::kRequestBody) return {413, kInvalidRequest};
      if (context.origin == ErrorOrigin::kRequestHeader) return {431, kInvalidRequest};
      return {429, kRateLimit, context.retry_after};
    case StatusCode::kUnavailable:
      return {503, kServerError, context.retry_after};
    case StatusCode::kDeadlineExceeded:
      return request ? HttpError{408, kInvalidRequest} : HttpError{504, kTimeout};
    case StatusCode::kCancelled:
      return {499, kCancelled};
    case StatusCode::kUnimplemented:
      // The request line's method is not one this path serves (the path is known).
      if (context.origin == ErrorOrigin::kRequestHeader) return {405, kInvalidRequest};
      return {501, kInvalidRequest};
    case StatusCode::kUnauthenticated:
      return {401, kAuthentication};
    case StatusCode::kPermissionDenied:
      return {403, kPermission};
    case StatusCode::kDataLoss:
      return request ? HttpError{400, kInvalidRequest} : HttpError{500, kServerError};
    case StatusCode::kInternal:
      return {500, kServerError};
  }
  return {500, kServerError};
}


std::string error_body(const Status& status, const ErrorContext& context) {
  const HttpError e = classify_error(status, context);
  std::string out;
  out.reserve(96 + status.message().size());
  out += R"({"error":{"message":)";
  append_json_string(out, status.message().empty() ? default_message(e.status)
                                                   : std::string_view(status.message()));
  out += R"(,"type":)";
  append_json_string(out, e.type);
  out += R"(,"param":)";
  append_optional_string(out, context.param);
  out += R"(,"code":)";
  append_optional_string(out, context.code);
  out += "}}";
  return out;
}

Response error_response(const Status& status, const ErrorContext& context) {
  const HttpError e = classify_error(status, context);
  Response r = Response::json(e.status, error_body(status, context));
  if (e.retry_after.count() > 0) {
    r.headers.push_back({"Retry-After", std::to_string(e.retry_after.count())});
  }
  if (e.status == 401) r.headers.push_back({"WWW-Authenticate", "Bearer"});  // RFC 9110 11.6.1
  return r;
}

std::string sse_error_event(const Status& status, const ErrorContext& context) {
  return sse_event(error_body(status, context));
}

}  // namespace infera::http
