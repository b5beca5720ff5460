// The gateway's polling of each worker's own /metrics (gateway/engine_poller.h), in-process
// against fake workers on loopback: real HTTP, the real fleet. A fake worker's /metrics can be
// switched between a good page and the ways a page goes wrong (missing, garbage, without the
// gauges, too big, never answered); the test reads what the gateway recorded from
// /v1/admin/workers and what it logged from its stderr.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "infera/common/log.h"
#include "infera/config/server_config.h"
#include "infera/discovery/worker.h"
#include "infera/gateway/fleet.h"
#include "infera/gateway/gateway.h"
#include "infera/http/client.h"
#include "infera/http/net.h"
#include "infera/http/server.h"
#include "infera/kv/active_load.h"
#include "infera/kv/engine_signals.h"
#include "infera/kv/index.h"
#include "tests/support/etcd_process.h"
#include "tests/support/gateway_harness.h"

namespace infera {
namespace {

using testing::eventually;
using Ms = std::chrono::milliseconds;

// What the fake worker's /metrics serves.
enum class Page {
  kGauges,
  kNotFound,
  kGarbage,
  kNoGauges,
  kTooLargeChunked,
  kTooLargeLength,
  kHang
};

constexpr size_t kBigPageBytes = size_t{3} << 20;  // over the poller's 2 MiB limit

// A fake engine: non-streamed completions, /v1/models, and a /metrics page chosen by `page`.
class FakeWorker {
 public:
  explicit FakeWorker(http::EventLoop& loop) {
    http::Routes routes;
    routes.add(http::Method::kPost, "/v1/completions",
               [this](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
                 completions.fetch_add(1);
                 co_return http::Response::json(
                     200, R"({"id":"cmpl-1","object":"text_completion","model":"fake-model",)"
                          R"("choices":[{"index":0,"text":"hi","finish_reason":"length"}]})");
               });
    routes.add(http::Method::kGet, "/v1/models",
               [this](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
                 models_requests.fetch_add(1);
                 co_return http::Response::json(
                     200, R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})");
               });
    routes.add(http::Method::kGet, "/metrics",
               [this](http::Request&, http::ResponseWriter& w) -> net::awaitable<http::Response> {
                 co_return co_await metrics(w);
               });
    server = http::Server::start(loop, {}, std::move(routes)).value();
  }

  // The gauges of two label sets (two DP ranks) that the kGauges page serves.
  void set_gauges(int waiting0, int waiting1, int running0, int running1, double usage0,
                  double usage1) {
    std::ostringstream out;
    out << "# TYPE vllm:num_requests_waiting gauge\n"
        << "vllm:num_requests_waiting{engine=\"0\",model_name=\"fake-model\"} " << waiting0 << "\n"
        << "vllm:num_requests_waiting{engine=\"1\",model_name=\"fake-model\"} " << waiting1 << "\n"
        << "vllm:num_requests_running{engine=\"0\",model_name=\"fake-model\"} " << running0 << "\n"
        << "vllm:num_requests_running{engine=\"1\",model_name=\"fake-model\"} " << running1 << "\n"
        << "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"fake-model\"} " << usage0 << "\n"
        << "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"fake-model\"} " << usage1 << "\n"
        << "vllm:cache_config_info{block_size=\"16\"} 1\n";
    std::lock_guard lock(mu);
    gauges = out.str();
  }

  // /metrics requests answered with `p` so far.
  int served(Page p) {
    std::lock_guard lock(mu);
    return static_cast<int>(arrivals[static_cast<size_t>(p)].size());
  }
  // When each of them arrived.
  std::vector<std::chrono::steady_clock::time_point> arrived(Page p) {
    std::lock_guard lock(mu);
    return arrivals[static_cast<size_t>(p)];
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server->port()); }
  std::string id() const { return "127.0.0.1:" + std::to_string(server->port()); }

  std::unique_ptr<http::Server> server;
  std::atomic<Page> page{Page::kGauges};
  std::atomic<int> metrics_requests{0};
  std::atomic<int> models_requests{0};
  std::atomic<int> completions{0};
  std::atomic<int> hanging{0};          // kHang requests being held now
  std::atomic<int> max_hanging{0};      // the most held at once
  std::atomic<int> hangs_abandoned{0};  // kHang requests whose client went away

 private:
  net::awaitable<http::Response> metrics(http::ResponseWriter& w) {
    const Page p = page.load();
    std::string body;
    {
      std::lock_guard lock(mu);
      arrivals[static_cast<size_t>(p)].push_back(std::chrono::steady_clock::now());
      body = gauges;
    }
    metrics_requests.fetch_add(1);
    switch (p) {
      case Page::kGauges:
        co_return http::Response::text(200, body);
      case Page::kNotFound:
        co_return http::Response::text(404, "Not Found");
      case Page::kGarbage:
        co_return http::Response::text(200, "<html><body>\x01\x02 no metrics here</body></html>\n");
      case Page::kNoGauges:
        co_return http::Response::text(200,
                                       "# HELP other other\nother_metric 1\n"
                                       "vllm:cache_config_info{block_size=\"16\"} 1\n");
      case Page::kTooLargeLength:
        co_return http::Response::text(200, big_page());
      case Page::kTooLargeChunked: {
        // No Content-Length: the limit must hold while the body streams in. One chunk, written
        // at once, so that a slow (sanitized, shared) machine spends its poll deadline reading
        // the page rather than writing it piece by piece.
        if (!(co_await w.write_head(200, "text/plain")).ok()) co_return http::Response{};
        (void)co_await w.write(big_page());
        co_return http::Response{};
      }
      case Page::kHang: {
        const int now_held = hanging.fetch_add(1) + 1;
        int seen = max_hanging.load();
        while (now_held > seen && !max_hanging.compare_exchange_weak(seen, now_held)) {
        }
        // Held until the gateway gives up (the server cancels the wait when it closes).
        net::steady_timer t(co_await net::this_coro::executor);
        t.expires_after(std::chrono::seconds(30));
        (void)co_await t.async_wait(use_nothrow);
        if (w.client_gone()) hangs_abandoned.fetch_add(1);
        hanging.fetch_sub(1);
        co_return http::Response{};
      }
    }
    co_return http::Response::text(500, "unknown page");
  }

  static std::string big_page() {
    std::string line = "# " + std::string(1022, 'x') + "\n";
    std::string page;
    page.reserve(kBigPageBytes);
    while (page.size() < kBigPageBytes) page += line;
    return page;
  }

  std::mutex mu;  // guards gauges and arrivals
  std::string gauges;
  std::vector<std::chrono::steady_clock::time_point> arrivals[7];  // by Page
};

// Captures this process's stderr (where INFERA_LOG writes, one write() per line) into a
// temporary file while it lives.
class StderrCapture {
 public:
  StderrCapture()
      : path_(std::filesystem::temp_directory_path() /
              ("infera_engine_metrics_" + std::to_string(::getpid()) + ".log")) {
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    std::filesystem::remove(path_);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  std::vector<std::string> lines() const {
    std::ifstream in(path_);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  std::string text() const {
    std::string all;
    for (const std::string& l : lines()) all += l + "\n";
    return all;
  }

 private:
  std::filesystem::path path_;
  int saved_ = -1;
};

// Whether a log line has the field `key=value` (exactly: not a prefix of a longer value).
bool has_field(const std::string& line, const std::string& key, const std::string& value) {
  const std::string field = " " + key + "=" + value;
  for (size_t at = line.find(field); at != std::string::npos; at = line.find(field, at + 1)) {
    const size_t end = at + field.size();
    if (end == line.size() || line[end] == ' ') return true;
  }
  return false;
}

constexpr const char* kFailedMsg = "cannot read the engine's load from its /metrics";
constexpr const char* kRecoveredMsg = "reading the engine's load from its /metrics again";

class EngineMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override { set_log_level(LogLevel::kInfo); }

  void start_gateway(const FakeWorker& worker, const std::string& interval_s,
                     std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--host",   "127.0.0.1",     "--port",
                                  "0",        "--router-seed", "7",
                                  "--worker", worker.url(),    "--engine-metrics-interval-s",
                                  interval_s};
    args.insert(args.end(), extra.begin(), extra.end());
    auto g = testing::start_gateway(args);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gateway_ = std::move(*g);
    endpoint_ = http::Endpoint{"127.0.0.1", gateway_->port()};
  }

  http::Response call(http::Method method, std::string target, std::string body = {}) {
    return testing::call(loop_, client_, endpoint_, method, std::move(target), std::move(body));
  }

  // The worker's entry of /v1/admin/workers (null when it is not there).
  boost::json::value worker_json(const FakeWorker& worker) {
    const http::Response r = call(http::Method::kGet, "/v1/admin/workers");
    if (r.status != 200) return nullptr;
    const boost::json::value v = boost::json::parse(r.body);
    for (const boost::json::value& w : v.at("workers").as_array()) {
      if (w.at("worker_id").as_string() == worker.id()) return w;
    }
    return nullptr;
  }

  // The gateway's last reading of the worker's engine (null when it has none).
  boost::json::value engine_load(const FakeWorker& worker) {
    const boost::json::value w = worker_json(worker);
    return w.is_object() ? w.at("engine_load") : boost::json::value(nullptr);
  }

  bool reading_is(const FakeWorker& worker, int64_t waiting, int64_t running, double usage) {
    const boost::json::value e = engine_load(worker);
    return e.is_object() && e.at("waiting").to_number<int64_t>() == waiting &&
           e.at("running").to_number<int64_t>() == running &&
           std::abs(e.at("kv_cache_usage").to_number<double>() - usage) < 1e-6;
  }

  // The join probe's /metrics (for the block size) has been answered: from here on every
  // request to /metrics is a poll.
  bool probed(const FakeWorker& worker) {
    const boost::json::value w = worker_json(worker);
    return w.is_object() && w.at("block_size").is_int64() && w.at("block_size").as_int64() == 16;
  }

  // The worker's row of route-explain for a small prompt (null when there is none).
  boost::json::value explain_row() {
    const http::Response r = call(http::Method::kPost, "/v1/admin/route-explain",
                                  R"({"model":"fake-model","prompt":[1,2,3]})");
    if (r.status != 200) return nullptr;
    const boost::json::value v = boost::json::parse(r.body);
    const auto& rows = v.at("stages").at(0).at("workers").as_array();
    return rows.empty() ? boost::json::value(nullptr) : rows.front();
  }

  int complete() {
    return call(http::Method::kPost, "/v1/completions",
                R"({"model":"fake-model","prompt":[1,2,3],"max_tokens":1,"stream":false})")
        .status;
  }

  size_t count_lines(const char* msg, const std::string& worker, const char* failure = nullptr) {
    size_t n = 0;
    for (const std::string& line : capture_.lines()) {
      if (line.find(msg) == std::string::npos || !has_field(line, "worker", worker)) continue;
      if (failure && !has_field(line, "failure", failure)) continue;
      ++n;
    }
    return n;
  }

  void TearDown() override {
    if (gateway_) gateway_->shutdown(Ms(1000));
  }

  StderrCapture capture_;
  http::EventLoop loop_{2};
  http::Client client_;
  std::unique_ptr<gateway::Gateway> gateway_;
  http::Endpoint endpoint_;
};

TEST_F(EngineMetricsTest, RecordsTheEnginesGaugesSummedOverLabelSets) {
  FakeWorker worker(loop_);
  worker.set_gauges(2, 3, 1, 4, 0.25, 0.75);
  start_gateway(worker, "0.05");
  // Counts are summed over the two ranks, KV usage (a fraction of each rank's cache) averaged.
  ASSERT_TRUE(eventually([&] { return reading_is(worker, 5, 5, 0.5); })) << engine_load(worker);
  const boost::json::value w = worker_json(worker);
  EXPECT_FALSE(w.as_object().contains("engine_metrics_error")) << w;
  EXPECT_GE(w.at("engine_load").at("age_s").to_number<double>(), 0.0);
  // Readings follow the engine.
  worker.set_gauges(0, 7, 0, 0, 1.0, 1.0);
  ASSERT_TRUE(eventually([&] { return reading_is(worker, 7, 0, 1.0); })) << engine_load(worker);
  EXPECT_EQ(count_lines(kFailedMsg, worker.id()), 0u) << capture_.text();
}

struct FailureCase {
  Page page;
  const char* failure;  // the kind the warning names
  const char* reason;   // a part of engine_metrics_error
  const char* row;      // the fault, as docs/reliability.md's table names it
};

void PrintTo(const FailureCase& c, std::ostream* os) {
  *os << c.failure << " (" << c.reason << ")";
}

class EngineMetricsFailureTest : public EngineMetricsTest,
                                 public ::testing::WithParamInterface<FailureCase> {};

// A worker whose /metrics goes wrong keeps being routed; its reading stops and ages, and the
// prefill-aware model falls back to the router's own block-based load; the failure is logged once
// however many polls fail, the recovery once, and a new failure after the recovery once more.
TEST_P(EngineMetricsFailureTest, NothingIsRecordedRoutingGoesOnAndItIsLoggedOnce) {
  const FailureCase& c = GetParam();
  FakeWorker worker(loop_);
  worker.set_gauges(1, 0, 2, 0, 0.5, 0.5);
  // A page over the limit takes a while to stream in on a slow (sanitized) build: give its polls
  // a deadline of 1 s, so that they fail for the size, not for the time.
  const bool big = c.page == Page::kTooLargeChunked || c.page == Page::kTooLargeLength;
  start_gateway(worker, big ? "1" : "0.05", {"--kv-load-model", "prefill-aware"});
  ASSERT_TRUE(eventually([&] { return probed(worker) && reading_is(worker, 1, 2, 0.5); }))
      << worker_json(worker);
  // While fresh, the reading's 3 requests (none of them ours) load the worker.
  boost::json::value row = explain_row();
  ASSERT_TRUE(row.is_object());
  EXPECT_TRUE(row.at("engine_reading_used").as_bool()) << row;
  EXPECT_GT(row.at("load_hidden").to_number<double>(), 0.0) << row;

  worker.page = c.page;
  ASSERT_TRUE(eventually([&] { return worker.served(c.page) >= 3; }));
  // Three failed polls later the reading is older than three intervals: the router is back on
  // its own block-based load.
  ASSERT_TRUE(eventually([&] {
    row = explain_row();
    return row.is_object() && !row.at("engine_reading_used").as_bool();
  })) << row;
  EXPECT_EQ(row.at("load_hidden").to_number<double>(), 0.0) << row;
  EXPECT_EQ(row.at("load").to_number<double>(), 0.0) << row;
  // Nothing was recorded since the first failing poll: the reading is older than it.
  const auto asked = std::chrono::steady_clock::now();
  const boost::json::value failing = worker_json(worker);
  ASSERT_TRUE(failing.at("engine_load").is_object()) << failing;
  EXPECT_GE(failing.at("engine_load").at("age_s").to_number<double>(),
            std::chrono::duration<double>(asked - worker.arrived(c.page).front()).count())
      << failing;
  EXPECT_TRUE(reading_is(worker, 1, 2, 0.5)) << failing;  // the old one, not a new one
  ASSERT_TRUE(failing.as_object().contains("engine_metrics_error")) << failing;
  EXPECT_NE(std::string(failing.at("engine_metrics_error").as_string()).find(c.reason),
            std::string::npos)
      << failing;
  EXPECT_EQ(failing.at("state").as_string(), "healthy") << failing;
  // Requests meanwhile are routed and answered as usual (docs/reliability.md's fault rows).
  constexpr int kSent = 10;
  int succeeded = 0;
  for (int i = 0; i < kSent; ++i) succeeded += complete() == 200 ? 1 : 0;
  EXPECT_EQ(succeeded, kSent);
  EXPECT_EQ(worker.completions.load(), kSent);
  EXPECT_EQ(count_lines(kFailedMsg, worker.id(), c.failure), 1u) << capture_.text();
  EXPECT_EQ(count_lines(kFailedMsg, worker.id()), 1u) << capture_.text();

  worker.set_gauges(3, 0, 4, 0, 0.25, 0.25);
  worker.page = Page::kGauges;
  ASSERT_TRUE(eventually([&] { return reading_is(worker, 3, 4, 0.25); })) << worker_json(worker);
  EXPECT_FALSE(worker_json(worker).as_object().contains("engine_metrics_error"));
  const int good = worker.served(Page::kGauges);
  ASSERT_TRUE(eventually([&] { return worker.served(Page::kGauges) >= good + 2; }));
  EXPECT_EQ(count_lines(kRecoveredMsg, worker.id()), 1u) << capture_.text();

  const int before = worker.served(c.page);
  worker.page = c.page;
  ASSERT_TRUE(eventually([&] { return worker.served(c.page) >= before + 2; }));
  ASSERT_TRUE(eventually([&] { return count_lines(kFailedMsg, worker.id(), c.failure) == 2; }))
      << capture_.text();
  const bool last = complete() == 200;
  EXPECT_TRUE(last);
  EXPECT_EQ(count_lines(kRecoveredMsg, worker.id()), 1u) << capture_.text();
  std::printf(
      "FAULT_ROW {\"fault\":\"worker /metrics %s (prefill-aware)\",\"sent\":%d,\"succeeded\":%d,"
      "\"retried\":0,\"failed_clean\":0,\"lost\":%d}\n",
      c.row, kSent + 1, succeeded + (last ? 1 : 0), kSent + 1 - succeeded - (last ? 1 : 0));

  if (c.page == Page::kHang) {
    // Each poll ended at its deadline (200 ms: the 50 ms interval, raised to the floor) and the
    // next started only after it: never two at once, never closer than the deadline.
    EXPECT_EQ(worker.max_hanging.load(), 1);
    const auto starts = worker.arrived(Page::kHang);
    for (size_t i = 1; i < starts.size(); ++i) {
      EXPECT_GE(starts[i] - starts[i - 1], Ms(150)) << "poll " << i;
    }
    EXPECT_GE(worker.hangs_abandoned.load(), 3);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Pages, EngineMetricsFailureTest,
    ::testing::Values(FailureCase{Page::kNotFound, "http_status", "HTTP 404", "404"},
                      FailureCase{Page::kGarbage, "malformed", "metrics line 1", "garbage"},
                      FailureCase{Page::kNoGauges, "missing", "vllm:num_requests_waiting",
                                  "without the vLLM gauges"},
                      FailureCase{Page::kTooLargeChunked, "too_large", "over 2097152 bytes",
                                  "over 2 MiB (chunked)"},
                      FailureCase{Page::kTooLargeLength, "too_large", "over 2097152 bytes",
                                  "over 2 MiB (Content-Length)"},
                      FailureCase{Page::kHang, "timeout", "timed out", "never answering"}),
    [](const ::testing::TestParamInfo<FailureCase>& param) {
      switch (param.param.page) {
        case Page::kNotFound:
          return std::string("NotFound");
        case Page::kGarbage:
          return std::string("Garbage");
        case Page::kNoGauges:
          return std::string("NoGauges");
        case Page::kTooLargeChunked:
          return std::string("TooLargeChunked");
        case Page::kTooLargeLength:
          return std::string("TooLargeContentLength");
        case Page::kHang:
          return std::string("NeverAnswered");
        case Page::kGauges:
          break;
      }
      return std::string("Gauges");
    });

// --engine-metrics-interval-s 0: /metrics is asked once, by the join probe for the block size,
// and never polled, even after the fleet's upkeep has run for 5 s (its model refresh).
TEST_F(EngineMetricsTest, IntervalZeroNeverPolls) {
  FakeWorker worker(loop_);
  worker.set_gauges(1, 1, 1, 1, 0.5, 0.5);
  start_gateway(worker, "0");
  ASSERT_TRUE(eventually([&] { return probed(worker); }));
  ASSERT_TRUE(eventually([&] { return worker.models_requests.load() >= 2; }, Ms(15'000)));
  EXPECT_EQ(worker.metrics_requests.load(), 1);
  EXPECT_TRUE(engine_load(worker).is_null()) << worker_json(worker);
  EXPECT_EQ(complete(), 200);
}

// A worker that leaves the fleet has its reading cleared, so a worker that gets its slot next
// does not inherit it; one that joins again is read afresh.
TEST(EngineMetricsFleetTest, AWorkerThatLeavesHasItsReadingCleared) {
  http::EventLoop fakes(1);
  FakeWorker worker(fakes);
  worker.set_gauges(4, 0, 0, 0, 0.5, 0.5);
  SteadyClock clock;
  kv::EngineSignals signals(8, clock);
  kv::KvIndex index(kv::KvIndex::Options{16, 8});
  kv::ActiveLoad load(kv::ActiveLoad::Options{std::chrono::minutes(5), 8}, clock);
  http::EventLoop loop(1);
  http::Client client;
  gateway::Fleet::Options o;
  o.max_workers = 8;
  o.engine_metrics_interval = Ms(50);
  auto fleet = std::make_unique<gateway::Fleet>(o, index, load, signals, loop, client, clock);
  auto one = std::make_shared<discovery::WorkerSet>();
  one->push_back(discovery::parse_worker_flag(worker.url()).value());
  fleet->update(one);
  const kv::WorkerId slot = fleet->view()->members.at(0).slot;
  ASSERT_TRUE(eventually([&] { return signals.last(slot).has_value(); }));
  EXPECT_EQ(signals.last(slot)->waiting, 4u);

  fleet->update(std::make_shared<discovery::WorkerSet>());
  EXPECT_FALSE(signals.last(slot).has_value());

  worker.set_gauges(6, 0, 0, 0, 0.5, 0.5);
  fleet->update(one);
  ASSERT_EQ(fleet->view()->members.at(0).slot, slot);  // the freed slot, reused
  ASSERT_TRUE(eventually([&] { return signals.last(slot).has_value(); }));
  EXPECT_EQ(signals.last(slot)->waiting, 6u);
  loop.stop();  // the fleet's contract: its loop stops first
  fleet.reset();
}

}  // namespace
}  // namespace infera
