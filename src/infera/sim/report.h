// Results of a benchmark or simulation run, in the pinned JSON shape of issue #7:
//   {"policies": {"<name>": {"hit_ratio", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
//    "itl_p50_ms", "e2e_p50_ms", "throughput_rps", "output_tok_s", "load_spread", "errors"}},
//    "bounds": {"infinite_cache_hit_ratio", "pooled_lru_hit_ratio"}}
// (plus "ttft_lower_bound_p50_ms", "_p90_ms", "_p99_ms" in bounds when the simulator computed them,
// and per policy "decision_p50_us", "decision_p99_us" and "index_bytes_per_worker" from the sim)
// plus extra fields (per-worker requests, a TTFT CDF for plots, the run's settings). A
// RunRecorder collects per-request observations (from real HTTP or virtual time) and
// summarises them. Not thread-safe: one recorder per run, fed by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infera::sim {

struct PolicyReport {
  double hit_ratio = 0;  // cached prompt tokens / prompt tokens over the run
  double ttft_p50_ms = 0, ttft_p90_ms = 0, ttft_p99_ms = 0;
  double itl_p50_ms = 0;
  double e2e_p50_ms = 0;
  double throughput_rps = 0;  // completed requests / run duration
  double output_tok_s = 0;
  double load_spread = 0;  // max / mean requests per worker (1: even)
  uint64_t errors = 0;
  // Refused at once with 429 or 503 (the gateway shedding load): answered, not lost; counted
  // apart from errors.
  uint64_t shed = 0;
  // Extras.
  uint64_t requests = 0;
  double duration_s = 0;
  std::vector<uint64_t> requests_per_worker;
  std::vector<double> ttft_cdf_ms;  // TTFT at percentiles 0, 1, ..., 100
  // TTFT per window of arrival time (summarize(window_s) with window_s > 0): is latency stable?
  struct Window {
    double start_s = 0;  // from the first arrival
    uint64_t requests = 0;
    double ttft_p50_ms = 0, ttft_p99_ms = 0;
  };
  std::vector<Window> windows;
  double predicted_hit_ratio = -1;  // the router's own estimate, when known
  // Disaggregated runs (-1 otherwise): each stage's prefix-cache hit ratio by the engines' own
  // counters (cached prompt tokens / prompt tokens scheduled; a decode's pulled blocks are not
  // hits), and the blocks the decode engines pulled. hit_ratio is then the prefill stage's, and
  // requests_per_worker counts each request on both of its workers.
  double prefill_hit_ratio = -1;
  double decode_hit_ratio = -1;
  uint64_t kv_pulled_blocks = 0;
  // The sim's router (-1 otherwise): wall-clock time of one Router::route (real clock, so not
  // deterministic), and the KV index's memory per worker (KvIndex::memory_bytes() / workers, the
  // largest seen: at each engine poll and at the end; ActiveLoad and PredictedBlocks not counted).
  double decision_p50_us = -1, decision_p99_us = -1;
  double index_bytes_per_worker = -1;
};

struct Bounds {
  double infinite_cache_hit_ratio = 0;
  double pooled_lru_hit_ratio = 0;
  // TTFT on an idle engine with the infinite cache (bounds.h); < 0: not computed.
  double ttft_lower_p50_ms = -1, ttft_lower_p90_ms = -1, ttft_lower_p99_ms = -1;
};

struct RunReport {
  std::map<std::string, PolicyReport> policies;
  std::optional<Bounds> bounds;
  std::map<std::string, std::string> settings;  // free-form: workload, workers, rate, ...
};

class RunRecorder {
 public:
  explicit RunRecorder(uint32_t workers) : requests_per_worker_(workers, 0) {}

  // One finished request. Times in seconds on one clock; worker < workers.
  void request(double arrival_s, double first_token_s, double finish_s, uint32_t prompt_tokens,
               uint32_t cached_tokens, uint32_t output_tokens, uint32_t worker);
  // A finished request's other worker (a disaggregated request's prefill worker).
  void also_served(uint32_t worker) {
    if (worker < requests_per_worker_.size()) ++requests_per_worker_[worker];
  }
  void inter_token_gap(double seconds) { itl_s_.push_back(static_cast<float>(seconds)); }
  void error() { ++errors_; }
  void shed() { ++shed_; }
  void predicted(uint64_t hit_blocks, uint64_t request_blocks) {
    predicted_hits_ += hit_blocks;
    predicted_blocks_ += request_blocks;
  }

  // window_s > 0 also fills PolicyReport::windows.
  PolicyReport summarize(double window_s = 0) const;

 private:
  std::vector<double> arrival_s_, ttft_s_, e2e_s_;
  std::vector<float> itl_s_;
  std::vector<uint64_t> requests_per_worker_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, output_tokens_ = 0, errors_ = 0, shed_ = 0;
  uint64_t predicted_hits_ = 0, predicted_blocks_ = 0;
  double first_arrival_s_ = -1, last_finish_s_ = 0;
};

// The value at quantile q (0..1) of `values` (sorted in place), linear interpolation.
double quantile(std::vector<double>& values, double q);

std::string to_json(const RunReport& report);
// A fixed-width table, one row per policy, for stdout.
std::string format_table(const RunReport& report);

}  // namespace infera::sim
