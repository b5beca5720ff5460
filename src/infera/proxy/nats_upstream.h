// NatsUpstream: `--request-transport nats`, the router side (docs/nats.md, "Requests over
// NATS"). A call publishes the upstream request on the worker's subject NS.requests.<worker>
// (the worker named by the endpoint's host:port, its id in discovery) with a reply inbox of
// the process's one NATS connection, and reads the relay's frames (nats/request_wire.h) as an
// OpenedResponse, so relay() runs the same relay loop as the HTTP transport (forward.h:
// retryable before the first body byte, the header held back until it, backpressure, the
// broken-stream error event) and fetch() reads a whole answer.
//
// Retry before the first byte: no relay subscribed (the server's 503 "no responders" arrives at
// once), no head within the first-byte timeout, an error frame or a 5xx head are retryable.
// After it: a frame out of sequence (lost or duplicated: never relayed), an error frame, or
// silence past the read timeout end the stream as broken. Flow control: the relay sends at
// most `window` data frames beyond the last one this side acknowledged; frames read are
// acknowledged every window/2 (cumulatively), and a frame with Infera-Last needs none. A head
// may carry the body's first bytes and end the answer itself. Cancellation: a call closed before its end (the client left, the deadline)
// publishes Infera-Cancel to the relay, which closes the engine's connection.
//
// Threading: calls run on the calling coroutine's executor; frames arrive on the NATS client's
// thread and are handed over through a small queue and a timer posted on that executor. The
// client outlives the upstream.
#pragma once

#include <chrono>

#include "infera/proxy/forward.h"

namespace infera::nats {
class Client;
}  // namespace infera::nats

namespace infera::proxy {

struct NatsUpstreamOptions {
  std::string ns = "infera";
  uint32_t window = 64;  // data frames in flight per call
  std::chrono::milliseconds first_byte_timeout{300'000};  // request sent -> the relay's head
  std::chrono::milliseconds read_timeout{60'000};         // silence inside an answer
  size_t max_body_bytes = size_t{64} << 20;               // fetch() answers
};

class NatsUpstream final : public Upstream {
 public:
  NatsUpstream(nats::Client& bus, NatsUpstreamOptions options, const Clock& clock)
      : bus_(bus), options_(std::move(options)), clock_(clock) {}

  net::awaitable<ForwardOutcome> relay(const http::Endpoint& to, http::Request request,
                                       Downstream& out, ForwardOptions options) override;
  net::awaitable<http::ClientResult<http::Response>> fetch(const http::Endpoint& to,
                                                           http::Request request,
                                                           Nanos deadline) override;

 private:
  nats::Client& bus_;
  NatsUpstreamOptions options_;
  const Clock& clock_;
};

}  // namespace infera::proxy
