// Parsing one HTTP/1.1 request the way the server does: the same Beast parser, limits and checks,
// from a complete byte string instead of a socket. For the fuzz target and tests; the server
// itself reads incrementally. Pure function: any thread.
#pragma once

#include <cstddef>
#include <string_view>

#include "infera/common/status.h"
#include "infera/http/error.h"
#include "infera/http/message.h"

namespace infera::http {

struct RequestLimits {
  size_t max_header_bytes = size_t{16} * 1024;      // request line + headers
  size_t max_body_bytes = size_t{8} * 1024 * 1024;  // after chunked decoding
};

// Why a request could not be read, and how to answer it.
struct RequestError {
  Status status;       // kInvalidArgument (malformed), kResourceExhausted (limit), kDataLoss (cut)
  ErrorOrigin origin;  // kRequestHeader or kRequestBody
};

// Parses exactly one request from `bytes`. Bytes after the request are ignored (a pipelined
// next request). A request cut short is kDataLoss.
Result<Request> parse_request(std::string_view bytes, const RequestLimits& limits);

}  // namespace infera::http
