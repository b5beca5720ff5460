// Metrics: a registry of counters, gauges and histograms with labels, rendered in the
// Prometheus text exposition format (version 0.0.4), and a parser of that format (tests and
// `infera bench` read engines' /metrics with it: one implementation both ways).
// Registration takes a mutex; updating a metric is lock-free (atomics), so request and event
// threads update freely. References returned by the registry stay valid until the series is
// removed. Any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "infera/common/status.h"

namespace infera::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(double by = 1.0) { value_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double by) { value_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // sorted, finite; +Inf is implicit
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  uint64_t bucket_count(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  // Estimated quantile (linear interpolation inside the bucket), for reports.
  double quantile(double q) const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative; last = +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Bucket layouts used across infera.
std::vector<double> latency_buckets_seconds();   // 100 us .. 60 s
// latency_buckets_seconds() continued by 2, 5, 10, 20, 30 and 60 minutes up to `max_seconds`,
// and `max_seconds` itself: whole requests, which may run as long as their timeout.
std::vector<double> duration_buckets_seconds(double max_seconds);
std::vector<double> fast_latency_buckets_seconds();  // 1 us .. 100 ms (routing decisions)
std::vector<double> ratio_buckets();             // 0, 0.1, ..., 1

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The same name and labels return the same series. Names must be valid Prometheus names;
  // a name registered with another type is a bug (aborts).
  Counter& counter(std::string_view name, std::string_view help, const Labels& labels = {});
  Gauge& gauge(std::string_view name, std::string_view help, const Labels& labels = {});
  Histogram& histogram(std::string_view name, std::string_view help, std::vector<double> bounds,
                       const Labels& labels = {});
  // Drops one series (a worker left the fleet). References to it become invalid.
  void remove(std::string_view name, const Labels& labels);
  // Drops every series, of any family, with label `key` = `value` (all of a departed worker's).
  void remove_labelled(std::string_view key, std::string_view value);

  // Values computed at scrape time: `fn` is called during render() and appends samples.
  using Collector = std::function<void(Registry& scratch)>;
  void add_collector(Collector fn);

  std::string render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct LabelsHash {
    size_t operator()(const Labels& labels) const;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<std::unique_ptr<Series>> series;  // in the order made: the exposition's order
    // The same series by labels: a request's lookups (a counter by route, status, worker and
    // model) cost one hash, not a walk over every series of a large fleet.
    std::unordered_map<Labels, Series*, LabelsHash> by_labels;
  };
  Series& series(std::string_view name, std::string_view help, Type type, const Labels& labels,
                 std::vector<double>* bounds);  // histograms: moved from when a series is made
  void render_into(std::string& out) const;

  mutable std::mutex mu_;
  std::map<std::string, Family, std::less<>> families_;
  std::vector<Collector> collectors_;
};

// The standard process_* set of Prometheus client libraries, read from /proc/self at scrape
// time: process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds. Unreadable values are left out.
void add_process_collector(Registry& registry);

// One sample of a scraped exposition: name, labels, value.
struct Sample {
  std::string name;
  Labels labels;
  double value = 0;
  std::string_view label(std::string_view key) const;
};
// Parses Prometheus text exposition; comments and blank lines are skipped. Malformed lines are
// an error naming the line.
Result<std::vector<Sample>> parse_text(std::string_view text);
// Sum of the values of every sample called `name` whose labels include `match`.
double sum_of(const std::vector<Sample>& samples, std::string_view name, const Labels& match = {});

}  // namespace infera::metrics
