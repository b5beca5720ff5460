// The exporter against an in-process OTLP collector (an http::Server on loopback).
#include "infera/trace/exporter.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "infera/http/net.h"
#include "infera/http/server.h"
#include "infera/http/test_support.h"

namespace infera::trace {
namespace {

namespace json = boost::json;
using http::testing::wait_until;
using std::chrono::milliseconds;

// Receives export requests; answers `status`, or holds the answer until release() when `hold`.
class Collector {
 public:
  explicit Collector(int status = 200, bool hold = false) : status_(status), hold_(hold) {
    http::Routes routes;
    routes.add(http::Method::kPost, "/v1/traces",
               [this](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
                 record(r);
                 if (hold_) {
                   net::steady_timer t(co_await net::this_coro::executor);
                   t.expires_after(std::chrono::seconds(30));
                   co_await t.async_wait(use_nothrow);  // cancelled when the exporter leaves
                 }
                 co_return http::Response::json(status_, "{}");
               });
    server_ = std::move(http::Server::start(loop_, {}, std::move(routes)).value());
  }
  ~Collector() { server_->shutdown(milliseconds(0)); }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  // Waits until `n` spans have arrived (at most 10 s); the spans seen.
  size_t wait_for_spans(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return spans_ >= n; });
    return spans_;
  }
  size_t requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  std::string last_content_type() {
    std::lock_guard lock(mu_);
    return content_type_;
  }

 private:
  void record(const http::Request& r) {
    const json::value doc = json::parse(r.body);
    const size_t n = doc.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").as_array().size();
    std::lock_guard lock(mu_);
    spans_ += n;
    ++requests_;
    content_type_ = std::string(r.header("Content-Type"));
    cv_.notify_all();
  }

  const int status_;
  const bool hold_;
  http::EventLoop loop_{1};
  std::unique_ptr<http::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t spans_ = 0;
  size_t requests_ = 0;
  std::string content_type_;
};

Span span_named(std::string name) {
  Span s;
  s.trace_id = new_trace_id();
  s.span_id = new_span_id();
  s.name = std::move(name);
  return s;
}

double counter(metrics::Registry& r, const std::string& series) {
  const std::string text = r.render();
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST(SpanExporterTest, APartialBatchGoesAtTheInterval) {
  Collector collector;
  metrics::Registry registry;
  auto exporter = SpanExporter::start(
      {.endpoint = collector.url(), .flush_interval = milliseconds(20)}, registry);
  ASSERT_TRUE(exporter.ok()) << exporter.status().message();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE((*exporter)->submit(span_named("s")));
  EXPECT_EQ(collector.wait_for_spans(3), 3u);
  EXPECT_EQ(collector.last_content_type(), "application/json");
  EXPECT_TRUE(wait_until([&] { return counter(registry, "infera_otlp_spans_exported_total") == 3; }));
}

TEST(SpanExporterTest, AFullBatchGoesAtOnce) {
  Collector collector;
  metrics::Registry registry;
  auto exporter = SpanExporter::start({.endpoint = collector.url() + "/v1/traces",
                                       .max_batch = 4,
                                       .flush_interval = std::chrono::hours(1)},
                                      registry);
  ASSERT_TRUE(exporter.ok());
  for (int i = 0; i < 4; ++i) (*exporter)->submit(span_named("s"));
  EXPECT_EQ(collector.wait_for_spans(4), 4u);  // long before the hour
  EXPECT_EQ(collector.requests(), 1u);
}

TEST(SpanExporterTest, AFullQueueDropsAndCountsAndShutdownFlushesTheRest) {
  Collector collector;
  metrics::Registry registry;
  auto exporter = SpanExporter::start({.endpoint = collector.url(),
                                       .max_queue = 2,
                                       .max_batch = 100,
                                       .flush_interval = std::chrono::hours(1)},
                                      registry);
  ASSERT_TRUE(exporter.ok());
  int taken = 0;
  for (int i = 0; i < 5; ++i) taken += (*exporter)->submit(span_named("s")) ? 1 : 0;
  EXPECT_EQ(taken, 2);
  EXPECT_EQ(counter(registry, "infera_otlp_spans_dropped_total{reason=\"queue_full\"}"), 3);
  (*exporter)->shutdown(std::chrono::seconds(10));
  EXPECT_EQ(collector.wait_for_spans(2), 2u);
  EXPECT_EQ(counter(registry, "infera_otlp_spans_exported_total"), 2);
  EXPECT_FALSE((*exporter)->submit(span_named("late")));  // after shutdown: dropped
}

TEST(SpanExporterTest, ACollectorThatIsDownLosesItsBatchesCounted) {
  std::string url;
  {
    Collector gone;
    url = gone.url();
  }  // its port now refuses connections
  metrics::Registry registry;
  auto exporter = SpanExporter::start({.endpoint = url, .max_batch = 5}, registry);
  ASSERT_TRUE(exporter.ok());
  for (int i = 0; i < 5; ++i) EXPECT_TRUE((*exporter)->submit(span_named("s")));
  EXPECT_TRUE(wait_until(
      [&] { return counter(registry, "infera_otlp_spans_dropped_total{reason=\"export_failed\"}") == 5; }));
}

TEST(SpanExporterTest, ASlowOrRefusingCollectorCostsItsBatchOnly) {
  Collector slow(200, /*hold=*/true);
  Collector refusing(503);
  metrics::Registry r1, r2;
  auto to_slow = SpanExporter::start(
      {.endpoint = slow.url(), .max_batch = 2, .timeout = milliseconds(200)}, r1);
  auto to_refusing = SpanExporter::start({.endpoint = refusing.url(), .max_batch = 2}, r2);
  ASSERT_TRUE(to_slow.ok() && to_refusing.ok());
  for (int i = 0; i < 2; ++i) {
    (*to_slow)->submit(span_named("s"));
    (*to_refusing)->submit(span_named("s"));
  }
  const std::string failed = "infera_otlp_spans_dropped_total{reason=\"export_failed\"}";
  EXPECT_TRUE(wait_until([&] { return counter(r1, failed) == 2; }));
  EXPECT_TRUE(wait_until([&] { return counter(r2, failed) == 2; }));
  EXPECT_EQ(refusing.requests(), 1u);
}

TEST(SpanExporterTest, TheEndpointMustBeAnHttpUrl) {
  metrics::Registry registry;
  for (const char* bad : {"localhost:4318", "grpc://collector:4317", "http://", "http://host:notaport"}) {
    auto exporter = SpanExporter::start({.endpoint = bad}, registry);
    ASSERT_FALSE(exporter.ok()) << bad;
    EXPECT_NE(exporter.status().message().find("--otlp-traces-endpoint"), std::string::npos);
  }
}

}  // namespace
}  // namespace infera::trace
