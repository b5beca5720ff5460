// One upstream call relayed to the client, and the seams the exchange spine (exchange.h) works
// through, so that it can be driven without sockets:
//   - Downstream: the client's side of the exchange (an http::ResponseWriter in the server);
//   - Upstream: how a call reaches a worker (HttpUpstream: http::Client plus forward());
//   - the header rules: which of the client's headers go upstream.
//
// forward() sends the client's request to one worker and relays the answer back, byte for byte
// (the body bytes; framing is the transport's), chunk by chunk with backpressure (each
// downstream write is awaited before the next upstream read). The outcome says what happened,
// so the caller can retry elsewhere, mark the worker, and release load:
//   - kRetryable: the worker failed before any byte reached the client (refused, reset,
//     timeout to first byte, a 5xx header): nothing was sent downstream, try the next worker;
//   - kCompleted: the whole upstream response was relayed (any status, 4xx included);
//   - kBrokenStream: the worker failed after the first byte: the client got an OpenAI error
//     event and a clean end of stream;
//   - kClientGone: the client left; the upstream request was cancelled (its connection closed).
// Called from a request handler's coroutine; owns nothing beyond the call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "infera/common/clock.h"
#include "infera/common/status.h"
#include "infera/http/client.h"
#include "infera/http/server.h"
#include "infera/proxy/token_meter.h"

namespace infera::proxy {

// The client's side of one exchange. The server's is WriterDownstream; tests record.
class Downstream {
 public:
  virtual ~Downstream() = default;
  virtual net::awaitable<Status> write_head(int status, http::Headers headers) = 0;
  // Resumes once the bytes are accepted (backpressure); `last` also ends the body.
  virtual net::awaitable<Status> write(std::string_view bytes, bool last) = 0;
  virtual net::awaitable<Status> finish() = 0;
  virtual bool started() const = 0;      // the head went (or is going) to the client
  virtual bool client_gone() const = 0;  // the client closed, reset, or a write to it failed
};

class WriterDownstream final : public Downstream {
 public:
  explicit WriterDownstream(http::ResponseWriter& out) : out_(out) {}
  net::awaitable<Status> write_head(int status, http::Headers headers) override {
    return out_.write_head(status, std::move(headers));
  }
  net::awaitable<Status> write(std::string_view bytes, bool last) override {
    return out_.write(bytes, last);
  }
  net::awaitable<Status> finish() override { return out_.finish(); }
  bool started() const override { return out_.started(); }
  bool client_gone() const override { return out_.client_gone(); }

 private:
  http::ResponseWriter& out_;
};

// Headers that belong to one hop and are never forwarded (RFC 9110 7.6.1), plus Host, which
// the client sets for the worker, and Content-Length, which follows the body sent.
bool hop_by_hop(std::string_view name);

// The W3C trace context a worker gets when the gateway traces: `traceparent` names the
// router's span as the worker's parent and replaces the client's (with the client's
// `tracestate` when the client's trace continues; without one for a trace the router started).
// Empty: the client's trace headers pass unchanged.
struct TraceHeaders {
  std::string_view traceparent;
  std::string_view tracestate;
};

// The request sent to a worker: the client's method, target and end-to-end headers, the
// gateway's request id (replacing the client's X-Request-Id), the trace context, and `body` (the
// client's own, or a stage's rewrite of it).
http::Request upstream_request(const http::Request& client, std::string_view request_id,
                               std::string body, TraceHeaders trace = {});

// The client's own deadlines bound each wait (connect, first byte, silence inside a stream:
// http::ClientOptions); `deadline` bounds the whole exchange: every socket wait is armed for
// the smaller of its own timeout and the time left, so a wait still pending at the deadline
// ends then (kRetryable before the first byte, kBrokenStream after it).
struct ForwardOptions {
  Nanos deadline = Nanos::max();  // on `clock`
  // Set by a caller that may give this call up (SGLang's paired prefill failed) while the
  // client has seen nothing: once true, forward answers kRetryable instead of starting the
  // client's response. Checked on the same strand as the write it guards, so either the
  // response has started (and the caller may no longer give up) or it never will.
  const bool* abandoned = nullptr;
  // Called once, when the first body piece arrived and before it is written to the client: for
  // a stream, the worker has computed the prompt (its first token is on the way), which the
  // router's load model counts as the end of the request's prefill.
  std::function<void()> on_first_byte;
  // Fed every body piece as it is relayed (generated tokens, inter-token gaps); may be null.
  TokenMeter* meter = nullptr;
};

enum class ForwardResult { kCompleted, kRetryable, kBrokenStream, kClientGone };
std::string_view forward_result_name(ForwardResult result);

struct ForwardOutcome {
  ForwardResult result = ForwardResult::kRetryable;
  int upstream_status = 0;  // 0: no response header
  Status error;             // why it failed (ok when completed)
  Nanos first_byte{0};      // steady-clock time the first body byte reached us; 0: none
  uint64_t body_bytes = 0;
};

// Forwards `request` to `to`. The response header is held back until the first body piece
// arrives, so a worker that dies between its header and its first token is still retryable.
net::awaitable<ForwardOutcome> forward(http::Client& client, http::Endpoint to,
                                       http::Request request, Downstream& out,
                                       ForwardOptions options, const Clock& clock);

// An upstream response being received, whatever carries it (an HTTP ClientStream, a NATS reply
// inbox): what relay_response() reads. Owned by the call that opened it.
class OpenedResponse {
 public:
  virtual ~OpenedResponse() = default;
  virtual int status() const = 0;
  virtual std::string_view header(std::string_view name) const = 0;
  // The next body piece, or an empty view at the end; waits no longer than `deadline`.
  virtual net::awaitable<Result<std::string_view>> read(std::chrono::steady_clock::time_point deadline) = 0;
  virtual bool done() const = 0;  // the body has been read completely
  // Cancels the exchange: the worker sees the request go away. Idempotent.
  virtual void close() = 0;
};

// The relay loop every transport shares: forward()'s rules from an opened response on (a 5xx
// header is retryable, the header waits for the first body piece, backpressure, the broken-
// stream error event). `deadline`: options.deadline on the steady clock.
net::awaitable<ForwardOutcome> relay_response(OpenedResponse& up, Downstream& out,
                                              const ForwardOptions& options, const Clock& clock,
                                              std::chrono::steady_clock::time_point deadline);
// The outcome of a call that failed before any response: retryable, or the client's leaving.
ForwardOutcome open_failed(Status error, const Downstream& out, const ForwardOptions& options,
                           const Clock& clock);
// The request's deadline (on `clock`) as a point on the steady clock that socket timers use.
std::chrono::steady_clock::time_point steady_deadline(Nanos deadline, const Clock& clock);

// How the spine reaches workers. Both calls run on the calling coroutine's executor and honour
// its cancellation (a cancelled call closes its connection, so the worker sees it go).
class Upstream {
 public:
  virtual ~Upstream() = default;
  // One call whose answer is relayed to the client (forward()).
  virtual net::awaitable<ForwardOutcome> relay(const http::Endpoint& to, http::Request request,
                                               Downstream& out, ForwardOptions options) = 0;
  // One call whose whole answer comes back to the spine (a prefill call); no wait of it runs
  // past `deadline` (on the clock the spine was given).
  virtual net::awaitable<http::ClientResult<http::Response>> fetch(const http::Endpoint& to,
                                                                   http::Request request,
                                                                   Nanos deadline) = 0;
};

class HttpUpstream final : public Upstream {
 public:
  HttpUpstream(http::Client& client, const Clock& clock) : client_(client), clock_(clock) {}
  net::awaitable<ForwardOutcome> relay(const http::Endpoint& to, http::Request request,
                                       Downstream& out, ForwardOptions options) override;
  net::awaitable<http::ClientResult<http::Response>> fetch(const http::Endpoint& to,
                                                           http::Request request,
                                                           Nanos deadline) override;

 private:
  http::Client& client_;
  const Clock& clock_;
};

}  // namespace infera::proxy
