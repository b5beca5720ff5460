// Transport benchmarks: requests/s of a trivial handler through the pooled keep-alive client on
// loopback (server and client each on their own one-thread loop), streamed SSE events/s through
// server and client, and SSE parse / framing throughput.
#include <benchmark/benchmark.h>

#include <atomic>
#include <future>
#include <string>

#include "infera/common/log.h"
#include "infera/http/client.h"
#include "infera/http/net.h"
#include "infera/http/server.h"
#include "infera/http/sse.h"

namespace infera::http {
namespace {

// A typical streamed chat completion event (vLLM shape, one token).
const std::string kChunkJson =
    R"({"id":"chatcmpl-4d1b","object":"chat.completion.chunk","created":1731000000,)"
    R"("model":"Qwen/Qwen3-0.6B","choices":[{"index":0,"delta":{"content":" token"},)"
    R"("logprobs":null,"finish_reason":null}]})";

struct Loopback {
  Loopback() {
    set_log_level(LogLevel::kWarn);
    Routes routes;
    routes.add(Method::kGet, "/health", [](Request&, ResponseWriter&) -> net::awaitable<Response> {
      co_return Response::text(200, "ok");
    });
    routes.add(Method::kGet, "/stream",
               [](Request& r, ResponseWriter& out) -> net::awaitable<Response> {
                 const int events = std::stoi(std::string(r.query()));
                 Status s = co_await out.write_head(200, kSseContentType);
                 const std::string event = sse_event(kChunkJson);
                 for (int i = 0; s.ok() && i < events; ++i) s = co_await out.write(event);
                 if (s.ok()) s = co_await out.write(kSseDone);
                 co_return Response{};
               });
    server = std::move(Server::start(server_loop, ServerOptions{}, std::move(routes)).value());
    endpoint = Endpoint{"127.0.0.1", server->port()};
  }
  ~Loopback() {
    server->shutdown(std::chrono::milliseconds(1000));
    server.reset();
  }
  EventLoop server_loop{1};
  EventLoop client_loop{1};
  std::unique_ptr<Server> server;
  Client client;
  Endpoint endpoint;
};

// Sends `total` requests from `concurrency` coroutines and waits for all of them.
void run_batch(Loopback& lb, int concurrency, int total, std::atomic<int>& failures) {
  std::atomic<int> next{0};
  std::vector<std::future<void>> done;
  for (int c = 0; c < concurrency; ++c) {
    auto p = std::make_shared<std::promise<void>>();
    done.push_back(p->get_future());
    net::co_spawn(
        net::make_strand(lb.client_loop.context()),
        [&]() -> net::awaitable<void> {
          while (next.fetch_add(1) < total) {
            Request req;
            req.target = "/health";
            auto r = co_await lb.client.request(lb.endpoint, std::move(req));
            if (!r.ok() || r->status != 200) failures.fetch_add(1);
          }
        },
        [p](std::exception_ptr) { p->set_value(); });
  }
  for (auto& f : done) f.wait();
}

void BM_KeepAliveRequests(benchmark::State& state) {
  Loopback lb;
  const int concurrency = static_cast<int>(state.range(0));
  constexpr int kBatch = 2000;
  std::atomic<int> failures{0};
  for (auto _ : state) run_batch(lb, concurrency, kBatch, failures);
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["failures"] = failures.load();
  state.counters["connections"] = static_cast<double>(lb.server->stats().connections_accepted);
}
BENCHMARK(BM_KeepAliveRequests)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_StreamedEvents(benchmark::State& state) {
  Loopback lb;
  const int events = static_cast<int>(state.range(0));
  int64_t bytes = 0;
  for (auto _ : state) {
    std::promise<int64_t> done;
    net::co_spawn(
        net::make_strand(lb.client_loop.context()),
        [&]() -> net::awaitable<void> {
          Request req;
          req.target = "/stream?" + std::to_string(events);
          auto opened = co_await lb.client.stream(lb.endpoint, std::move(req));
          int64_t n = 0;
          if (opened.ok()) {
            for (;;) {
              auto piece = co_await opened->read();
              if (!piece.ok() || piece->empty()) break;
              n += static_cast<int64_t>(piece->size());
            }
          }
          done.set_value(n);
        },
        [](std::exception_ptr) {});
    bytes += done.get_future().get();
  }
  state.SetItemsProcessed(state.iterations() * events);
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_StreamedEvents)->Arg(10000)->UseRealTime()->Unit(benchmark::kMillisecond);

std::string openai_stream(int events) {
  std::string s;
  for (int i = 0; i < events; ++i) append_sse_event(s, kChunkJson);
  s += kSseDone;
  return s;
}

// Feeds the stream in pieces of state.range(0) bytes, as reads deliver it.
void BM_SseParse(benchmark::State& state) {
  const std::string stream = openai_stream(10000);
  const size_t piece = static_cast<size_t>(state.range(0));
  size_t events = 0;
  for (auto _ : state) {
    SseParser parser;
    SseEvent ev;
    for (size_t pos = 0; pos < stream.size(); pos += piece) {
      parser.feed(std::string_view(stream).substr(pos, piece));
      while (parser.next(ev)) {
        benchmark::DoNotOptimize(ev.data.data());
        ++events;
      }
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
  state.counters["events"] = static_cast<double>(events);
}
BENCHMARK(BM_SseParse)->Arg(64)->Arg(1460)->Arg(16384);

void BM_SseFrame(benchmark::State& state) {
  std::string out;
  for (auto _ : state) {
    out.clear();
    for (int i = 0; i < 1000; ++i) append_sse_event(out, kChunkJson);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * out.size()));
}
BENCHMARK(BM_SseFrame);

}  // namespace
}  // namespace infera::http

BENCHMARK_MAIN();
