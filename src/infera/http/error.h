// The one mapping from infera::Status to an HTTP answer: status code, OpenAI error body
// {"error": {"message", "type", "param", "code"}}, Retry-After for overload; and the SSE error
// event a proxy sends once a stream has started (the status line is gone by then).
// Pure functions of their arguments: any thread.
//
//   co_return error_response(invalid_argument("'messages' must be an array"),
//                            {.param = "messages"});                      // 400
//   co_return error_response(not_found("model 'x' does not exist"), {.code = "model_not_found"});
//   co_await out.write(sse_error_event(status, {.origin = ErrorOrigin::kUpstream}));
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "infera/common/json_string.h"
#include "infera/common/status.h"
#include "infera/http/message.h"

namespace infera::http {

// Where a failure arose. The same StatusCode means different answers: a limit on the client's
// request is 413/431, on the server's capacity 429; an unavailable worker is 502, no worker 503.
enum class ErrorOrigin {
  kServer,         // this process: overload, no worker, a bug
  kRequestHeader,  // the client's request line or headers
  kRequestBody,    // the client's request body
  kUpstream,       // a worker this process talked to
};

struct ErrorContext {
  ErrorOrigin origin = ErrorOrigin::kServer;
  std::string_view param;               // OpenAI "param": the offending request field; "" -> null
  std::string_view code;                // OpenAI "code", e.g. "model_not_found"; "" -> null
  std::chrono::seconds retry_after{1};  // sent with 429 and 503
};

struct HttpError {
  int status = 500;
  std::string_view type;  // OpenAI "type": invalid_request_error, rate_limit_error, ...
  std::chrono::seconds retry_after{0};  // 0: no Retry-After header
};

// StatusCode (+ origin) -> HTTP status:
//   kInvalidArgument, kOutOfRange, kFailedPrecondition -> 400; kNotFound -> 404;
//   kResourceExhausted -> 413 (request body), 431 (request header), 429 (server);
//   kUnavailable -> 503 (server), kDeadlineExceeded -> 504 (408 for a slow client request);
//   kCancelled -> 499; kUnimplemented -> 501 (405 for the request header: a method the path does
//   not serve); kUnauthenticated -> 401 (with WWW-Authenticate: Bearer); kDataLoss -> 400
//   (request), kInternal -> 500;
//   any failure of a worker (kUpstream) -> 502, except kDeadlineExceeded 504, kCancelled 499.
// An ok Status is a bug.
HttpError classify_error(const Status& status, const ErrorContext& context = {});

// {"error":{"message":...,"type":...,"param":...,"code":...}}
std::string error_body(const Status& status, const ErrorContext& context = {});

// The whole answer: status, Content-Type: application/json, Retry-After when overloaded.
Response error_response(const Status& status, const ErrorContext& context = {});

// The event to send after a stream has started: `data: {"error":{...}}\n\n` (what the OpenAI
// SDKs raise on). Follow it with kSseDone and finish the stream to end it cleanly.
std::string sse_error_event(const Status& status, const ErrorContext& context = {});

// common/json_string.h: JSON string literals from untrusted bytes.
using ::infera::append_json_string;

}  // namespace infera::http
