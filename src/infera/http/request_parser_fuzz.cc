// libFuzzer target for the server's request-parsing path: the same Beast parser, limits, checks
// and conversion the server uses (wire.h), fed two ways: whole (parse_request) and in growing
// windows of 1..64 bytes, as socket reads deliver it. Both must agree, never crash or hang, and
// accepted requests must respect the limits. Input: byte 0 picks the window step, the rest is
// the request.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "infera/http/request_parser.h"
#include "infera/http/wire.h"

namespace {

using infera::http::Request;
using infera::http::RequestLimits;

constexpr RequestLimits kLimits{.max_header_bytes = 2048, .max_body_bytes = 8192};

// Drives a parser the way http::async_read does over a flat buffer: the parser sees everything
// received and not yet consumed; the window grows by `step` bytes per read.
infera::Result<Request> parse_in_windows(std::string_view bytes, size_t step) {
  namespace wire = infera::http::wire;
  wire::RequestParser parser;
  wire::configure(parser, kLimits);
  size_t consumed = 0;
  size_t received = 0;
  while (!parser.is_done()) {
    if (received == bytes.size()) return infera::data_loss("request is incomplete");
    received = std::min(bytes.size(), received + step);
    for (;;) {
      const bool header_phase = !parser.is_header_done();
      infera::beast::error_code ec;
      const size_t n =
          parser.put(infera::net::buffer(bytes.data() + consumed, received - consumed), ec);
      consumed += n;
      if (ec == infera::bhttp::error::need_more) break;
      if (ec) {
        auto err = wire::classify_request_error(ec, header_phase);
        return err ? err->status : infera::data_loss("request is incomplete");
      }
      if (header_phase && parser.is_header_done()) {
        auto err = wire::validate_request_header(parser, consumed, kLimits);
        if (err) return err->status;
        parser.eager(true);
      }
      if (parser.is_done() || n == 0 || consumed == received) break;
    }
  }
  return wire::take_request(parser);
}

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = 1 + (data[0] % 64);
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto whole = infera::http::parse_request(bytes, kLimits);
  auto windows = parse_in_windows(bytes, step);
  // Both accept a request or both refuse it. How they refuse may differ: given the whole bytes
  // Beast validates the request line before the header is complete, while incrementally it
  // waits for the end of the header (a header that never ends then is "incomplete", which the
  // server answers with its header deadline), and a limit can fire before a syntax error.
  check(whole.ok() == windows.ok());
  if (whole.ok()) {
    const Request& a = whole.value();
    const Request& b = windows.value();
    check(a.method == b.method && a.target == b.target && a.body == b.body);
    check(a.headers.size() == b.headers.size());
    check(a.body.size() <= kLimits.max_body_bytes);
    check(!a.target.empty() && a.target.front() == '/');
    check(a.target.starts_with(a.path()));
  }
  return 0;
}
