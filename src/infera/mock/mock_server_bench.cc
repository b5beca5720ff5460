// Capacity of one `infera engine mock` process (issue 5: >= 2,000 concurrent streams and
// >= 50,000 streamed output tokens/s at --speedup-ratio 100, without errors), so that
// benchmarks of the gateway measure the router, not the mock. The benchmark starts the real
// binary on an ephemeral port and drives it with a closed loop of N concurrent streamed
// completions through infera's own http::Client and SseParser; every event is parsed and
// every stream must end with [DONE] after exactly max_tokens tokens.
//
//   build/<rel>/bench/engine_server_bench --benchmark_filter=MockEngineStreams
//   INFERA_BENCH_SECONDS=20 ... (measurement window, default 10 s after a 3 s warm-up)
//
// Args: streams, max_tokens, max_num_seqs, kv_events (0/1).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <atomic>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "infera/common/metrics.h"
#include "infera/common/subprocess.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/http/net.h"
#include "infera/http/sse.h"

namespace infera::mock {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Load {
  http::Endpoint endpoint;
  http::Client* client = nullptr;
  uint32_t max_tokens = 0;
  std::string prompt_head;  // shared by every request (a system prompt)
  Clock::time_point measure_from;
  Clock::time_point measure_to;

  std::atomic<uint64_t> tokens_in_window{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<int64_t> open_streams{0};
  std::atomic<int64_t> peak_streams{0};
  metrics::Histogram ttft{metrics::latency_buckets_seconds()};
  metrics::Histogram itl{metrics::fast_latency_buckets_seconds()};
};

net::awaitable<void> stream_loop(Load* load, uint32_t worker) {
  http::SseParser parser;
  http::SseEvent ev;
  for (uint64_t round = 0; Clock::now() < load->measure_to; ++round) {
    http::Request req;
    req.method = http::Method::kPost;
    req.target = "/v1/completions";
    req.headers.push_back(http::Header{"Content-Type", "application/json"});
    req.body = R"({"model":"bench","prompt":")" + load->prompt_head + " question " +
               std::to_string(worker) + " round " + std::to_string(round) +
               R"(","max_tokens":)" + std::to_string(load->max_tokens) +
               R"(,"ignore_eos":true,"stream":true})";
    const Clock::time_point sent = Clock::now();
    auto opened = co_await load->client->stream(load->endpoint, std::move(req));
    if (!opened.ok()) {
      load->errors.fetch_add(1);
      continue;
    }
    http::ClientStream& up = opened.value();
    if (up.status() != 200) {
      load->errors.fetch_add(1);
      continue;
    }
    const int64_t open = load->open_streams.fetch_add(1) + 1;
    for (int64_t peak = load->peak_streams.load(); open > peak;) {
      if (load->peak_streams.compare_exchange_weak(peak, open)) break;
    }
    parser.reset();
    uint32_t tokens = 0;
    bool done = false;
    bool failed = false;
    Clock::time_point last = sent;
    for (;;) {
      Result<std::string_view> piece = co_await up.read();
      if (!piece.ok()) {
        failed = true;
        break;
      }
      if (piece->empty()) break;
      const Clock::time_point now = Clock::now();
      const bool in_window = now >= load->measure_from && now < load->measure_to;
      parser.feed(*piece);
      uint32_t got = 0;
      while (parser.next(ev)) {
        if (ev.done()) {
          done = true;
        } else {
          ++got;
        }
      }
      if (got > 0) {
        const double since = std::chrono::duration<double>(now - last).count();
        if (tokens == 0) {
          load->ttft.observe(since);
        } else {
          load->itl.observe(since);
        }
        last = now;
        tokens += got;
        if (in_window) load->tokens_in_window.fetch_add(got, std::memory_order_relaxed);
      }
    }
    load->open_streams.fetch_sub(1);
    load->requests.fetch_add(1);
    if (failed || !done || tokens != load->max_tokens || !parser.status().ok()) {
      load->errors.fetch_add(1);
    }
  }
}

double scrape_lag(const http::Endpoint& endpoint) {
  http::EventLoop loop(1);
  http::Client client;
  auto fetch = [](http::Client* c, http::Endpoint to) -> net::awaitable<std::string> {
    http::Request req;
    req.target = "/metrics";
    auto r = co_await c->request(to, std::move(req));
    co_return r.ok() ? r->body : std::string();
  };
  auto f = net::co_spawn(loop.context(), fetch(&client, endpoint), net::use_future);
  auto samples = metrics::parse_text(f.get());
  return samples.ok() ? metrics::sum_of(*samples, "infera_engine_lag_seconds") : -1;
}

void BM_MockEngineStreams(benchmark::State& state) {
  const auto streams = static_cast<uint32_t>(state.range(0));
  const auto max_tokens = static_cast<uint32_t>(state.range(1));
  const auto max_num_seqs = static_cast<uint32_t>(state.range(2));
  const bool kv_events = state.range(3) != 0;
  const char* env_seconds = std::getenv("INFERA_BENCH_SECONDS");
  const double seconds = env_seconds ? std::atof(env_seconds) : 10.0;

  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }

  for (auto _ : state) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("infera_engine_bench_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::vector<std::string> argv = {std::string(INFERA_BINARY_DIR) + "/bin/infera",
                                     "engine",
                                     "mock",
                                     "--host",
                                     "127.0.0.1",
                                     "--port",
                                     "0",
                                     "--model",
                                     "bench",
                                     "--speedup-ratio",
                                     "100",
                                     "--max-num-seqs",
                                     std::to_string(max_num_seqs),
                                     "--num-gpu-blocks",
                                     "262144",
                                     "--log-level",
                                     "warn"};
    if (kv_events) {
      argv.push_back("--kv-events-config");
      argv.push_back(R"({"enable_kv_cache_events":true,"endpoint":"tcp://127.0.0.1:*",)"
                     R"("replay_endpoint":"tcp://127.0.0.1:*","topic":"bench"})");
    }
    SpawnOptions o;
    o.stdout_path = (dir / "stdout").string();
    o.stderr_path = (dir / "stderr").string();
    auto engine = Subprocess::spawn(argv, o);
    if (!engine.ok()) {
      state.SkipWithError(engine.status().to_string().c_str());
      return;
    }
    static const std::regex kReady(R"(listening on http://127\.0\.0\.1:(\d+))");
    std::smatch m;
    std::string out;
    const auto ready_by = Clock::now() + std::chrono::seconds(30);
    while (!std::regex_search(out = read_file(dir / "stdout"), m, kReady)) {
      if (Clock::now() > ready_by || !engine->running()) {
        state.SkipWithError(("engine did not start: " + read_file(dir / "stderr")).c_str());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }

    double lag = -1;
    Load load;
    load.endpoint = http::Endpoint{"127.0.0.1", static_cast<uint16_t>(std::stoi(m[1].str()))};
    load.max_tokens = max_tokens;
    for (int i = 0; i < 48; ++i) load.prompt_head += "shared system prompt words ";
    const auto warmup = std::chrono::seconds(3);
    load.measure_from = Clock::now() + warmup;
    load.measure_to = load.measure_from + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(seconds));
    {
      http::EventLoop loop(2);
      http::ClientOptions co;
      co.max_idle_per_endpoint = streams + 16;
      co.read_timeout = std::chrono::milliseconds(60'000);
      http::Client client(co);
      load.client = &client;
      std::vector<std::future<void>> done;
      done.reserve(streams);
      for (uint32_t i = 0; i < streams; ++i) {
        done.push_back(net::co_spawn(loop.next_context(), stream_loop(&load, i), net::use_future));
      }
      // Mid-window, the engine's own view: how far its model clock trails real time.
      std::this_thread::sleep_until(load.measure_from + (load.measure_to - load.measure_from) / 2);
      lag = scrape_lag(load.endpoint);
      for (auto& f : done) f.wait();
      for (auto& f : done) {
        try {
          f.get();
        } catch (const std::exception&) {
          load.errors.fetch_add(1);
        }
      }
    }
    const int code = engine->stop(std::chrono::milliseconds(10'000));
    std::filesystem::remove_all(dir);

    state.counters["streams"] = static_cast<double>(streams);
    state.counters["peak_open_streams"] = static_cast<double>(load.peak_streams.load());
    state.counters["tokens_per_s"] = static_cast<double>(load.tokens_in_window.load()) / seconds;
    state.counters["requests"] = static_cast<double>(load.requests.load());
    state.counters["errors"] = static_cast<double>(load.errors.load());
    state.counters["ttft_p50_ms"] = load.ttft.quantile(0.5) * 1e3;
    state.counters["ttft_p99_ms"] = load.ttft.quantile(0.99) * 1e3;
    state.counters["itl_p50_ms"] = load.itl.quantile(0.5) * 1e3;
    state.counters["engine_lag_s"] = lag;
    state.counters["engine_exit"] = code;
  }
}

// streams, max_tokens, max_num_seqs, kv_events
BENCHMARK(BM_MockEngineStreams)
    ->ArgNames({"streams", "max_tokens", "max_num_seqs", "kv_events"})
    ->Args({2000, 200, 2048, 0})
    ->Args({2000, 200, 2048, 1})
    ->Args({2000, 200, 256, 1})
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kSecond);

}  // namespace
}  // namespace infera::mock

BENCHMARK_MAIN();
