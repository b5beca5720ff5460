#include "infera/common/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <thread>

namespace infera::metrics {
namespace {

TEST(MetricsTest, RendersAndParsesBack) {
  Registry r;
  r.counter("infera_requests_total", "Requests.", {{"route", "/v1/completions"}, {"status", "200"}})
      .inc(3);
  r.gauge("infera_worker_active_blocks", "Active blocks.", {{"worker", "a:1"}}).set(12.5);
  auto& h = r.histogram("infera_ttft_seconds", "TTFT.", {0.1, 1}, {});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(7);
  const std::string text = r.render();
  EXPECT_NE(text.find("# TYPE infera_requests_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE infera_ttft_seconds histogram"), std::string::npos);
  auto samples = parse_text(text);
  ASSERT_TRUE(samples.ok()) << samples.status().to_string();
  EXPECT_EQ(sum_of(*samples, "infera_requests_total", {{"status", "200"}}), 3);
  EXPECT_EQ(sum_of(*samples, "infera_worker_active_blocks"), 12.5);
  EXPECT_EQ(sum_of(*samples, "infera_ttft_seconds_bucket", {{"le", "0.1"}}), 1);
  EXPECT_EQ(sum_of(*samples, "infera_ttft_seconds_bucket", {{"le", "1"}}), 2);
  EXPECT_EQ(sum_of(*samples, "infera_ttft_seconds_bucket", {{"le", "+Inf"}}), 3);
  EXPECT_EQ(sum_of(*samples, "infera_ttft_seconds_count"), 3);
  EXPECT_DOUBLE_EQ(sum_of(*samples, "infera_ttft_seconds_sum"), 7.55);
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  Registry r;
  r.counter("x_total", "X.", {{"worker", "a\"b\\c\nd"}}).inc();
  auto samples = parse_text(r.render());
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(samples->size(), 1u);
  EXPECT_EQ((*samples)[0].label("worker"), "a\"b\\c\nd");
}

TEST(MetricsTest, SameNameAndLabelsIsTheSameSeries) {
  Registry r;
  r.counter("c_total", "C.", {{"a", "1"}}).inc();
  r.counter("c_total", "C.", {{"a", "1"}}).inc();
  r.counter("c_total", "C.", {{"a", "2"}}).inc();
  auto samples = parse_text(r.render());
  EXPECT_EQ(sum_of(*samples, "c_total", {{"a", "1"}}), 2);
  r.remove("c_total", {{"a", "1"}});
  samples = parse_text(r.render());
  EXPECT_EQ(sum_of(*samples, "c_total"), 1);
  // Made again after its removal, the series starts from zero (a new series, not the old one).
  r.counter("c_total", "C.", {{"a", "1"}}).inc();
  EXPECT_EQ(sum_of(*parse_text(r.render()), "c_total", {{"a", "1"}}), 1);
}

TEST(MetricsTest, CollectorsRunAtScrapeTime) {
  Registry r;
  int calls = 0;
  r.add_collector([&](Registry& out) {
    ++calls;
    out.gauge("live_value", "Computed.", {}).set(calls);
  });
  EXPECT_EQ(sum_of(*parse_text(r.render()), "live_value"), 1);
  EXPECT_EQ(sum_of(*parse_text(r.render()), "live_value"), 2);
}

TEST(MetricsTest, ParsesVllmStyleExposition) {
  const char* text =
      "# HELP vllm:prefix_cache_hits_total Prefix cache hits.\n"
      "# TYPE vllm:prefix_cache_hits_total counter\n"
      "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 1.5e3\n"
      "vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"True\"} 1.0\n";
  auto samples = parse_text(text);
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(sum_of(*samples, "vllm:prefix_cache_hits_total"), 1500);
  EXPECT_EQ((*samples)[1].label("block_size"), "16");
  EXPECT_FALSE(parse_text("bad{x=1} 2\n").ok());
  EXPECT_FALSE(parse_text("ok_name notanumber\n").ok());
}

TEST(MetricsTest, RemoveLabelledDropsEverySeriesOfThatLabelValue) {
  Registry r;
  r.counter("a_total", "a", {{"worker", "w1"}, {"status", "200"}}).inc();
  r.counter("a_total", "a", {{"worker", "w2"}, {"status", "200"}}).inc();
  r.counter("b_total", "b", {{"stage", "prefill"}, {"worker", "w1"}}).inc();
  r.gauge("c", "c", {{"model", "w1"}}).set(1);  // another label with the same value stays
  r.remove_labelled("worker", "w1");
  const auto samples = parse_text(r.render());
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(sum_of(*samples, "a_total", {{"worker", "w1"}}), 0);
  EXPECT_EQ(sum_of(*samples, "a_total", {{"worker", "w2"}}), 1);
  EXPECT_EQ(sum_of(*samples, "b_total"), 0);
  EXPECT_EQ(sum_of(*samples, "c"), 1);
  EXPECT_EQ(r.render().find("b_total"), std::string::npos);  // an emptied family is not rendered
  // A worker that comes back gets new series.
  r.counter("a_total", "a", {{"worker", "w1"}, {"status", "200"}}).inc();
  r.counter("b_total", "b", {{"stage", "prefill"}, {"worker", "w1"}}).inc();
  const auto again = parse_text(r.render());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(sum_of(*again, "a_total", {{"worker", "w1"}}), 1);
  EXPECT_EQ(sum_of(*again, "b_total"), 1);
}

TEST(MetricsTest, DurationBucketsReachTheTimeout) {
  const std::vector<double> hour = duration_buckets_seconds(3600);
  EXPECT_EQ(hour.back(), 3600);
  EXPECT_EQ(hour[hour.size() - 2], 1800);
  EXPECT_TRUE(std::is_sorted(hour.begin(), hour.end()));
  const std::vector<double> odd = duration_buckets_seconds(450);
  EXPECT_EQ(odd.back(), 450);
  EXPECT_EQ(odd[odd.size() - 2], 300);
  EXPECT_EQ(duration_buckets_seconds(30), latency_buckets_seconds());  // within 60 s: unchanged
}

TEST(MetricsTest, ProcessCollectorReportsThisProcess) {
  Registry r;
  add_process_collector(r);
  const auto samples = parse_text(r.render());
  ASSERT_TRUE(samples.ok());
  EXPECT_GT(sum_of(*samples, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(sum_of(*samples, "process_virtual_memory_bytes"), sum_of(*samples, "process_resident_memory_bytes"));
  EXPECT_GE(sum_of(*samples, "process_open_fds"), 3);  // stdin, stdout, stderr at least
  EXPECT_GT(sum_of(*samples, "process_max_fds"), sum_of(*samples, "process_open_fds"));
  EXPECT_GE(sum_of(*samples, "process_cpu_seconds_total"), 0);
  const double start = sum_of(*samples, "process_start_time_seconds");
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_GT(start, now - 24 * 3600.0);  // started within the day
  EXPECT_LE(start, now + 1);
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  Registry r;
  Counter& c = r.counter("n_total", "N.");
  Histogram& h = r.histogram("h", "H.", {1.0});
  auto work = [&] {
    for (int i = 0; i < 100000; ++i) {
      c.inc();
      h.observe(0.5);
    }
  };
  std::thread t(work);
  work();
  t.join();
  EXPECT_EQ(c.value(), 200000);
  EXPECT_EQ(h.count(), 200000u);
}

TEST(MetricsTest, HistogramQuantileInterpolates) {
  Histogram h({1, 2, 3, 4});
  for (int i = 0; i < 100; ++i) h.observe(1.5);
  EXPECT_GT(h.quantile(0.5), 1.0);
  EXPECT_LE(h.quantile(0.5), 2.0);
}

}  // namespace
}  // namespace infera::metrics
