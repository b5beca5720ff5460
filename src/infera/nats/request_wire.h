// The wire of `--request-transport nats` (docs/nats.md, "Requests over NATS"): what the router
// and a worker's relay say to each other, as NATS header blocks plus raw payload bytes. Pure
// functions over untrusted bytes (nothing throws; every field is checked), used by the router's
// NatsUpstream (proxy/nats_upstream.h) and the worker's RequestRelay (request_relay.h).
//
//   router -> NS.requests.<worker>, reply = a router inbox:
//     Infera-Method, Infera-Target, Infera-Window (data frames the relay may send ahead of the
//     router's acknowledgements), Infera-Body-Length, and the request's end-to-end HTTP headers
//     as Http-<Name>; payload: the body, or its first part when the message would exceed the
//     server's max_payload. Further parts follow on the same subject with Infera-Continue: <the
//     router inbox> and Infera-Part: k (NATS keeps one publisher's order on one subject).
//   relay -> the router inbox, each frame with Infera-Seq: 0, 1, 2, ... and Infera-Kind:
//     head (Infera-Status, the response's Http-<Name> headers, Infera-Control: <relay inbox>;
//     payload: the body's first bytes when the engine had sent them with its head),
//     data (payload: body bytes), end, error (Infera-Error: message). A head or data frame with
//     Infera-Last: 1 also ends the answer (no end frame follows): a whole non-streamed answer
//     is then one message.
//   router -> the relay's control inbox: Infera-Ack: <seq> (cumulative: every data frame up to
//     it was taken for the client; sent once half the window is unacknowledged, so the relay
//     always has credit) or Infera-Cancel: 1 (the client left: stop the engine call).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"
#include "infera/http/message.h"

namespace infera::nats {

// Header blocks take some of max_payload; bodies are cut into parts of at most this much less.
inline constexpr size_t kFrameOverhead = 4096;
inline constexpr uint32_t kDefaultWindow = 64;

// One message of a request: its header block and its slice of the body.
struct RequestPart {
  std::string headers;
  std::string_view payload;  // into the request's body
};
// The messages that carry `request` within `max_payload` each (the first holds the head).
// kInvalidArgument for a header the wire cannot carry (CR/LF in a value) or a max_payload
// below the overhead.
Result<std::vector<RequestPart>> encode_request(const http::Request& request, std::string_view inbox,
                                                uint32_t window, size_t max_payload);

struct RequestHead {
  bool continuation = false;     // a later part: only `inbox` and `part` are set
  std::string inbox;             // continuation: the request it belongs to
  uint32_t part = 0;
  http::Method method = http::Method::kGet;
  std::string target;
  http::Headers headers;
  uint32_t window = kDefaultWindow;
  uint64_t body_length = 0;
};
Result<RequestHead> decode_request(std::string_view header_block);

enum class ReplyKind : uint8_t { kHead, kData, kEnd, kError };
struct ReplyFrame {
  ReplyKind kind = ReplyKind::kData;
  uint64_t seq = 0;
  int status = 0;          // head
  http::Headers headers;   // head
  std::string control;     // head: the relay's control inbox
  std::string error;       // error
  bool last = false;       // head or data: this frame also ends the answer
};
std::string reply_head(uint64_t seq, int status, const http::Headers& headers, std::string_view control,
                       bool last = false);
std::string reply_data(uint64_t seq, bool last = false);
std::string reply_end(uint64_t seq);
std::string reply_error(uint64_t seq, std::string_view message);
Result<ReplyFrame> decode_reply(std::string_view header_block);

struct Control {
  std::optional<uint64_t> ack;
  bool cancel = false;
};
std::string control_ack(uint64_t seq);
std::string control_cancel();
Result<Control> decode_control(std::string_view header_block);

}  // namespace infera::nats
