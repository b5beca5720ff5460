// Internal to the http module (server.cc, client.cc, wire.cc): conversions between Beast
// messages and the plain values of message.h, the request-parser setup and checks shared by the
// server and parse_request(), and the mapping from I/O error codes to Status. Includes Beast:
// never include it from a header of another module. Pure functions: any thread.
#pragma once

#include <optional>
#include <string_view>

#include "infera/common/status.h"
#include "infera/http/message.h"
#include "infera/http/net.h"
#include "infera/http/request_parser.h"

namespace infera::http::wire {

using RequestParser = bhttp::request_parser<bhttp::string_body>;

bhttp::verb to_verb(Method method);
Method from_verb(bhttp::verb verb);

// Header limit, body limit, as the server reads requests. The parser stops after the header
// (not eager), so that the bytes it consumed measure the header.
void configure(RequestParser& parser, const RequestLimits& limits);

// Maps an error from reading a request (header or body phase) to the answer; nullopt when the
// peer simply went away (EOF, reset) and nothing should be written.
std::optional<RequestError> classify_request_error(beast::error_code ec, bool header_phase);

// Checks a parsed request header beyond Beast's grammar: its size, `header_bytes` from the first
// byte to the end of the blank line, against the limit (Beast applies its header_limit to the
// fields only when the whole header arrives at once), and the target form. The failure says
// how to answer.
std::optional<RequestError> validate_request_header(const RequestParser& parser,
                                                    size_t header_bytes,
                                                    const RequestLimits& limits);

// Moves the parsed request out of `parser` into a plain Request.
Request take_request(RequestParser& parser);

// Copies fields into plain headers.
void copy_headers(const bhttp::fields& fields, Headers& out);
// Sets plain headers on a Beast message, skipping the headers the transport owns
// (Content-Length, Transfer-Encoding, Connection).
void set_headers(bhttp::fields& fields, const Headers& headers);

// A reason phrase for statuses Beast does not know (499).
std::string_view reason_phrase(int status);
// The status line and fields of `head` as they go on the wire, ending with the empty line: the
// text ResponseWriter gathers into one write with the first body bytes (Beast's serializer
// writes a head on its own).
std::string serialize_head(const bhttp::response_header<>& head);
// The request line and fields of `head`, ending with the empty line (the client sends it and the
// body in one gathered write).
std::string serialize_head(const bhttp::request_header<>& head);

// Feeds the bytes already in `buffer` to `parser`, without I/O, and consumes what it took: true
// when the part being read is done (the header when `header_only`, else the whole message),
// false when it needs bytes that have not arrived or, for a buffer_body parser, when its body
// buffer is full. A parse error is left in `ec` (need_more and need_buffer are not errors). The
// bytes taken are added to `*consumed` when given. Beast's async reads do the same first, but
// post their completion when no read was needed: one more turn of the event loop (a
// zero-timeout epoll_wait) per read of a request or response that had already arrived.
template <bool isRequest, class Body>
bool parse_buffered(bhttp::parser<isRequest, Body>& parser, beast::flat_buffer& buffer,
                    bool header_only, beast::error_code& ec, size_t* consumed = nullptr) {
  ec = {};
  const auto part_done = [&] {
    return header_only ? parser.is_header_done() : parser.is_done();
  };
  while (!part_done() && buffer.size() > 0) {
    const size_t n = parser.put(buffer.data(), ec);
    buffer.consume(n);
    if (consumed != nullptr) *consumed += n;
    if (ec == bhttp::error::need_more || ec == bhttp::error::need_buffer) {
      ec = {};
      break;
    }
    if (ec || n == 0) break;
  }
  return !ec && part_done();
}

}  // namespace infera::http::wire
