#include "infera/proxy/forward.h"

#include "infera/http/error.h"
#include "infera/http/sse.h"

namespace infera::proxy {
namespace {

bool is_event_stream(std::string_view content_type) {
  return content_type.rfind(http::kSseContentType, 0) == 0;
}

// A wait that timed out at the request's deadline says so (not which socket wait it was).
Status at_deadline(Status error, Nanos deadline, const Clock& clock) {
  if (error.code() == StatusCode::kDeadlineExceeded && clock.now() >= deadline) {
    return deadline_exceeded("request deadline exceeded");
  }
  return error;
}

// The HTTP transport's opened response.
class HttpOpened final : public OpenedResponse {
 public:
  explicit HttpOpened(http::ClientStream& s) : s_(s) {}
  int status() const override { return s_.status(); }
  std::string_view header(std::string_view name) const override { return s_.header(name); }
  net::awaitable<Result<std::string_view>> read(std::chrono::steady_clock::time_point deadline) override {
    return s_.read(deadline);
  }
  bool done() const override { return s_.done(); }
  void close() override { s_.close(); }

 private:
  http::ClientStream& s_;
};

}  // namespace

std::chrono::steady_clock::time_point steady_deadline(Nanos deadline, const Clock& clock) {
  const Nanos now = clock.now();
  if (deadline == Nanos::max()) return std::chrono::steady_clock::time_point::max();
  const auto left = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      deadline > now ? deadline - now : Nanos(0));
  return std::chrono::steady_clock::now() + left;
}

bool hop_by_hop(std::string_view name) {
  for (std::string_view h :
       {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
        "upgrade", "content-length", "host", "proxy-authorization", "proxy-authenticate"}) {
    if (http::iequals(name, h)) return true;
  }
  return false;
}

http::Request upstream_request(const http::Request& client, std::string_view request_id,
                               std::string body, TraceHeaders trace) {
  http::Request up;
  up.method = client.method;
  up.target = client.target;
  up.body = std::move(body);
  up.headers.reserve(client.headers.size() + 3);
  const bool traced = !trace.traceparent.empty();
  for (const http::Header& h : client.headers) {
    if (hop_by_hop(h.name) || http::iequals(h.name, "x-request-id")) continue;
    if (traced && (http::iequals(h.name, "traceparent") || http::iequals(h.name, "tracestate"))) continue;
    up.headers.push_back(h);
  }
  up.headers.push_back({"X-Request-Id", std::string(request_id)});
  if (traced) {
    up.headers.push_back({"traceparent", std::string(trace.traceparent)});
    if (!trace.tracestate.empty()) up.headers.push_back({"tracestate", std::string(trace.tracestate)});
  }
  return up;
}

net::awaitable<ForwardOutcome> HttpUpstream::relay(const http::Endpoint& to, http::Request request,
                                                   Downstream& out, ForwardOptions options) {
  return forward(client_, to, std::move(request), out, std::move(options), clock_);
}

net::awaitable<http::ClientResult<http::Response>> HttpUpstream::fetch(const http::Endpoint& to,
                                                                       http::Request request,
                                                                       Nanos deadline) {
  auto answer = co_await client_.request(to, std::move(request), steady_deadline(deadline, clock_));
  if (answer.ok()) co_return answer;
  co_return http::ClientError{at_deadline(answer.error().status, deadline, clock_),
                              answer.error().before_first_byte};
}

std::string_view forward_result_name(ForwardResult result) {
  switch (result) {
    case ForwardResult::kCompleted: return "completed";
    case ForwardResult::kRetryable: return "retryable";
    case ForwardResult::kBrokenStream: return "broken_stream";
    case ForwardResult::kClientGone: return "client_gone";
  }
  return "?";
}

ForwardOutcome open_failed(Status error, const Downstream& out, const ForwardOptions& options,
                           const Clock& clock) {
  ForwardOutcome o;
  o.error = at_deadline(std::move(error), options.deadline, clock);
  o.result = out.client_gone() || o.error.code() == StatusCode::kCancelled
                 ? ForwardResult::kClientGone
                 : ForwardResult::kRetryable;
  return o;
}

net::awaitable<ForwardOutcome> forward(http::Client& client, http::Endpoint to,
                                       http::Request request, Downstream& out,
                                       ForwardOptions options, const Clock& clock) {
  // Every wait (connect, send, header, each piece of the body) ends by the request's deadline.
  const auto deadline = steady_deadline(options.deadline, clock);
  auto opened = co_await client.stream(to, std::move(request), deadline);
  if (!opened.ok()) co_return open_failed(opened.error().status, out, options, clock);
  HttpOpened up(opened.value());
  co_return co_await relay_response(up, out, options, clock, deadline);
}

net::awaitable<ForwardOutcome> relay_response(OpenedResponse& up, Downstream& out,
                                              const ForwardOptions& options, const Clock& clock,
                                              std::chrono::steady_clock::time_point deadline) {
  ForwardOutcome o;
  o.upstream_status = up.status();
  if (up.status() >= 500) {
    // The worker could not serve it; nothing went downstream, so another worker may.
    up.close();
    o.error = unavailable("worker answered HTTP " + std::to_string(up.status()));
    o.result = ForwardResult::kRetryable;
    co_return o;
  }

  // Hold the header back until the first piece of body.
  Result<std::string_view> piece = co_await up.read(deadline);
  if (!piece.ok()) {
    up.close();
    ForwardOutcome failed = open_failed(piece.status(), out, options, clock);
    failed.upstream_status = o.upstream_status;
    co_return failed;
  }
  if (options.abandoned && *options.abandoned) {
    up.close();
    o.error = cancelled("the call was given up before its answer reached the client");
    o.result = ForwardResult::kRetryable;
    co_return o;
  }
  o.first_byte = clock.now();
  if (options.on_first_byte) options.on_first_byte();
  const std::string content_type(up.header("Content-Type"));
  const bool sse = is_event_stream(content_type);
  if (options.meter != nullptr) options.meter->start(sse);
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
    if (options.meter != nullptr) options.meter->feed(*piece, clock.now());
    // The worker's last piece and the end of the body go to the client in one write.
    const bool last = up.done();
    wrote = co_await out.write(*piece, last);
    if (!wrote.ok()) {
      // The client left (or stalled past the write deadline): cancel the upstream request.
      up.close();
      o.error = wrote;
      o.result = ForwardResult::kClientGone;
      co_return o;
    }
    if (last) {
      o.result = ForwardResult::kCompleted;
      co_return o;
    }
    // The read waits no longer than the request's deadline (a silent worker would otherwise hold
    // the stream for the whole idle timeout).
    piece = co_await up.read(deadline);
    if (!piece.ok()) piece = at_deadline(piece.status(), options.deadline, clock);
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
      (void)co_await out.write(tail, false);
    }
    (void)co_await out.finish();
    co_return o;
  }
}

}  // namespace infera::proxy
