// A canned OpenAI-compatible upstream for measuring the gateway's own cost: it answers
// /v1/completions and /v1/chat/completions at once with a fixed one-token completion (one JSON
// answer, or an SSE stream when the body asks for one: one chunk per `max_tokens`, each its own
// write, as an engine emits tokens), so the engine side of a run costs
// almost nothing. Not an engine: no tokenizer, no KV cache, no events (`infera engine mock` is
// the simulated engine). It reports the model `canned` on /v1/models and block size 16 on
// /metrics, as the gateway's probe expects. It also takes OTLP/HTTP trace exports (POST
// /v1/traces, answered 200 unread), so a second one is the collector of the tracing benchmark.
//
// Usage: canned_engine PORT [IO_THREADS]   (PORT 0: any free port, printed on stdout)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "infera/common/log.h"
#include "infera/common/signals.h"
#include "infera/http/event_loop.h"
#include "infera/http/server.h"
#include "infera/http/sse.h"

namespace {

using infera::http::Method;
using infera::http::Request;
using infera::http::Response;
using infera::http::ResponseWriter;
namespace net = infera::net;

constexpr std::string_view kAnswer =
    R"({"id":"cmpl-canned","object":"text_completion","created":0,"model":"canned",)"
    R"("choices":[{"index":0,"text":" ok","logprobs":null,"finish_reason":"length"}],)"
    R"("usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}})";
constexpr std::string_view kChunk =
    R"({"id":"cmpl-canned","object":"text_completion","created":0,"model":"canned",)"
    R"("choices":[{"index":0,"text":" ok","logprobs":null,"finish_reason":"length"}]})";

bool wants_stream(std::string_view body) {
  return body.find("\"stream\":true") != std::string_view::npos ||
         body.find("\"stream\": true") != std::string_view::npos;
}

// The request's "max_tokens" (1 when absent or not a number), at most 100,000.
long max_tokens(std::string_view body) {
  constexpr std::string_view kKey = "\"max_tokens\":";
  const size_t at = body.find(kKey);
  if (at == std::string_view::npos) return 1;
  const long n = std::strtol(std::string(body.substr(at + kKey.size(), 12)).c_str(), nullptr, 10);
  return n < 1 ? 1 : std::min(n, 100'000L);
}

net::awaitable<Response> complete(Request& request, ResponseWriter& out) {
  if (!wants_stream(request.body)) co_return Response::json(200, std::string(kAnswer));
  if (!(co_await out.write_head(200, infera::http::kSseContentType)).ok()) co_return Response{};
  const std::string chunk = infera::http::sse_event(kChunk);
  for (long left = max_tokens(request.body); left > 1; --left) {
    if (!(co_await out.write(chunk)).ok()) co_return Response{};
  }
  (void)co_await out.write(chunk + std::string(infera::http::kSseDone), /*last=*/true);
  co_return Response{};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: canned_engine PORT [IO_THREADS]\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const int threads = argc == 3 ? std::atoi(argv[2]) : 1;
  if (port < 0 || port > 65535 || threads < 1 || threads > 64) {
    std::fprintf(stderr, "canned_engine: PORT must be 0..65535 and IO_THREADS 1..64\n");
    return 2;
  }
  // Before the loop's threads exist, which inherit the mask.
  const infera::TerminationSignals signals = infera::block_termination_signals();
  infera::set_log_level(infera::LogLevel::kWarn);

  infera::http::Routes routes;
  routes.add(Method::kPost, "/v1/completions", complete);
  routes.add(Method::kPost, "/v1/chat/completions", complete);
  routes.add(Method::kGet, "/v1/models", [](Request&, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::json(200, R"({"object":"list","data":[{"id":"canned","object":"model"}]})");
  });
  routes.add(Method::kGet, "/metrics", [](Request&, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::text(200, "vllm:cache_config_info{block_size=\"16\"} 1\n");
  });
  routes.add(Method::kPost, "/v1/traces", [](Request&, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::json(200, "{}");
  });
  routes.add(Method::kGet, "/health", [](Request&, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::text(200, "ok");
  });
  infera::http::EventLoop loop(threads);
  infera::http::ServerOptions options;
  options.host = "127.0.0.1";
  options.port = static_cast<uint16_t>(port);
  auto server = infera::http::Server::start(loop, options, std::move(routes));
  if (!server.ok()) {
    std::fprintf(stderr, "canned_engine: %s\n", server.status().message().c_str());
    return 1;
  }
  std::printf("%u\n", static_cast<unsigned>((*server)->port()));
  std::fflush(stdout);
  signals.wait();
  (*server)->shutdown(std::chrono::milliseconds(1000));
  return 0;
}
