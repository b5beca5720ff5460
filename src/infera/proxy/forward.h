// One upstream attempt: send the client's request to one worker and relay the answer back,
// byte for byte (the body bytes; framing is the transport's), chunk by chunk with
// backpressure (each downstream write is awaited before the next upstream read). The outcome
// says what happened, so the caller can retry elsewhere, mark the worker, and release load:
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

namespace infera::proxy {

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
                                       http::Request request, http::ResponseWriter& out,
                                       ForwardOptions options, const Clock& clock);

}  // namespace infera::proxy
