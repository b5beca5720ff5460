// The exporter against an in-process OTLP collector (an http::Server on loopback).
#include "infera/trace/exporter.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "infera/http/test_support.h"
#include "infera/trace/test_collector.h"

namespace infera::trace {
namespace {

using http::testing::wait_until;
using std::chrono::milliseconds;
using trace::testing::Collector;

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
