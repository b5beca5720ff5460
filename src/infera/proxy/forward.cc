#include "infera/proxy/forward.h"

#include <algorithm>
#include <optional>

#include "infera/http/error.h"
#include "infera/http/net.h"
#include "infera/http/sse.h"

namespace infera::proxy {
namespace {

bool is_event_stream(std::string_view content_type) {
  return content_type.rfind(http::kSseContentType, 0) == 0;
}

enum class Race { kDone, kExpired, kCancelled };

// Awaits `op` for at most `left`. kDone: `*out` holds its result. kExpired: the time ran out
// first; `op` was cancelled, which closes its upstream connection. kCancelled: this coroutine
// was cancelled while waiting (the client went away). The client's own timeouts bound each
// wait to `own_limit`; this keeps the whole request within its deadline. A wait that cannot
// outlast the deadline (own_limit <= left, the usual case) is awaited without a timer, so the
// relay of a stream far from its deadline allocates nothing per piece.
template <typename T>
net::awaitable<Race> within(net::awaitable<T> op, Nanos left, Nanos own_limit,
                            std::optional<T>* out) {
  if (own_limit <= left) {
    out->emplace(co_await std::move(op));
    co_return Race::kDone;
  }
  net::steady_timer timer(co_await net::this_coro::executor);
  timer.expires_after(std::max(left, Nanos(0)));
  auto raced = co_await (std::move(op) || timer.async_wait(use_nothrow));
  if (raced.index() == 0) {
    out->emplace(std::move(std::get<0>(raced)));
    co_return Race::kDone;
  }
  const auto [ec] = std::get<1>(raced);
  co_return ec ? Race::kCancelled : Race::kExpired;
}

// The time left until `deadline` on `clock`.
Nanos time_left(Nanos deadline, const Clock& clock) {
  return deadline == Nanos::max() ? Nanos::max() : deadline - clock.now();
}

// The next piece of the body (a read waits at most `read_timeout`); kDeadlineExceeded when
// the deadline comes first, kCancelled when the caller is cancelled.
net::awaitable<Result<std::string_view>> read_within(http::ClientStream& up, Nanos deadline,
                                                     const Clock& clock, Nanos read_timeout) {
  std::optional<Result<std::string_view>> piece;
  const Race race = co_await within(up.read(), time_left(deadline, clock), read_timeout, &piece);
  if (race == Race::kExpired) co_return deadline_exceeded("request deadline exceeded");
  if (race == Race::kCancelled) co_return cancelled("the request was cancelled");
  co_return std::move(*piece);
}

}  // namespace

std::string_view forward_result_name(ForwardResult result) {
  switch (result) {
    case ForwardResult::kCompleted: return "completed";
    case ForwardResult::kRetryable: return "retryable";
    case ForwardResult::kBrokenStream: return "broken_stream";
    case ForwardResult::kClientGone: return "client_gone";
  }
  return "?";
}

net::awaitable<ForwardOutcome> forward(http::Client& client, http::Endpoint to,
                                       http::Request request, http::ResponseWriter& out,
                                       ForwardOptions options, const Clock& clock) {
  ForwardOutcome o;
  const http::ClientOptions& limits = client.options();
  // The longest a stream() call may wait: connect, send the request, then the response header.
  const Nanos open_limit = limits.connect_timeout + limits.write_timeout + limits.response_timeout;
  const Nanos read_limit = limits.read_timeout;
  std::optional<http::ClientResult<http::ClientStream>> answer;
  const Race race = co_await within(client.stream(to, std::move(request)),
                                    time_left(options.deadline, clock), open_limit, &answer);
  if (race != Race::kDone) {
    // Nothing went downstream. Past the deadline the caller stops retrying.
    o.error = race == Race::kExpired
                  ? deadline_exceeded("the request deadline passed before the worker answered")
                  : cancelled("the request was cancelled");
    o.result = race == Race::kExpired ? ForwardResult::kRetryable : ForwardResult::kClientGone;
    co_return o;
  }
  http::ClientResult<http::ClientStream>& opened = *answer;
  if (!opened.ok()) {
    o.error = opened.error().status;
    o.result = out.client_gone() || o.error.code() == StatusCode::kCancelled
                   ? ForwardResult::kClientGone
                   : ForwardResult::kRetryable;
    co_return o;
  }
  http::ClientStream& up = opened.value();
  o.upstream_status = up.status();
  if (up.status() >= 500) {
    // The worker could not serve it; nothing went downstream, so another worker may.
    up.close();
    o.error = unavailable("worker answered HTTP " + std::to_string(up.status()));
    o.result = ForwardResult::kRetryable;
    co_return o;
  }

  // Hold the header back until the first piece of body.
  Result<std::string_view> piece = co_await read_within(up, options.deadline, clock, read_limit);
  if (!piece.ok()) {
    up.close();
    o.error = piece.status();
    o.result = out.client_gone() || o.error.code() == StatusCode::kCancelled
                   ? ForwardResult::kClientGone
                   : ForwardResult::kRetryable;
    co_return o;
  }
  o.first_byte = clock.now();
  const std::string content_type(up.header("Content-Type"));
  const bool sse = is_event_stream(content_type);
  http::Headers headers;
  if (!content_type.empty()) headers.push_back({"Content-Type", content_type});
  if (sse) headers.push_back({"Cache-Control", "no-cache"});
  Status wrote = co_await out.write_head(up.status(), std::move(headers));
  if (!wrote.ok()) {
    up.close();
    o.error = wrote;
    o.result = ForwardResult::kClientGone;
    co_return o;
  }

  for (;;) {
    if (piece->empty()) {  // the body is complete
      (void)co_await out.finish();
      o.result = ForwardResult::kCompleted;
      co_return o;
    }
    o.body_bytes += piece->size();
    wrote = co_await out.write(*piece);
    if (!wrote.ok()) {
      // The client left (or stalled past the write deadline): cancel the upstream request.
      up.close();
      o.error = wrote;
      o.result = ForwardResult::kClientGone;
      co_return o;
    }
    piece = co_await read_within(up, options.deadline, clock, read_limit);
    if (piece.ok()) continue;
    if (out.client_gone() || piece.status().code() == StatusCode::kCancelled) {
      up.close();
      o.error = piece.status();
      o.result = ForwardResult::kClientGone;
      co_return o;
    }
    // The worker failed mid-body: end the stream cleanly with an OpenAI error event.
    up.close();
    o.error = piece.status();
    o.result = ForwardResult::kBrokenStream;
    if (sse) {
      std::string tail = http::sse_error_event(o.error, {.origin = http::ErrorOrigin::kUpstream});
      tail += http::kSseDone;
      (void)co_await out.write(tail);
    }
    (void)co_await out.finish();
    co_return o;
  }
}

}  // namespace infera::proxy
