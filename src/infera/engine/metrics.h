// EngineMetrics: the simulated engine's metric state with vLLM's meanings, for the server's
// /metrics (vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total,
// vllm:kv_cache_usage_perc, vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:time_to_first_token_seconds, ...). Plain values, snapshotted by EngineCore::metrics() on
// the owner's thread; the snapshot itself may be read anywhere.
#pragma once

#include <array>
#include <cstdint>

namespace infera::engine {

// vLLM's bucket bounds for vllm:time_to_first_token_seconds (vllm/v1/metrics/loggers.py).
inline constexpr std::array<double, 22> kTtftBucketsSeconds = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};

// A Prometheus histogram over kTtftBucketsSeconds: counts[i] observations <= bound i (not
// cumulative; the exposition accumulates), counts.back() the ones above every bound.
struct TtftHistogram {
  std::array<uint64_t, kTtftBucketsSeconds.size() + 1> counts{};
  double sum_seconds = 0;
  uint64_t count = 0;

  void observe(double seconds) {
    size_t i = 0;
    while (i < kTtftBucketsSeconds.size() && seconds > kTtftBucketsSeconds[i]) ++i;
    ++counts[i];
    sum_seconds += seconds;
    ++count;
  }
};

struct EngineMetrics {
  // Prefix cache, in tokens, counted once per scheduled (or rescheduled) request: queries = the
  // request's tokens, hits = the tokens served from cached blocks.
  uint64_t prefix_cache_queries = 0;
  uint64_t prefix_cache_hits = 0;
  uint64_t prefix_cache_requests = 0;

  double kv_cache_usage = 0;  // fraction of usable blocks held by requests, 0..1
  uint32_t num_running = 0;
  uint32_t num_waiting = 0;

  uint64_t num_preemptions = 0;
  uint64_t prompt_tokens = 0;      // prompt tokens of requests that produced a first token
  uint64_t generation_tokens = 0;  // output tokens produced
  uint64_t requests_finished_stop = 0;
  uint64_t requests_finished_length = 0;
  uint64_t requests_aborted = 0;
  uint64_t steps = 0;

  // Disaggregation: pulls of a remote prefill's blocks (decode side) and the blocks they moved;
  // requests waiting for their pull; finished prefills whose blocks are held for a remote decode.
  uint64_t kv_pulls = 0;
  uint64_t kv_pulled_blocks = 0;
  uint32_t num_transferring = 0;
  uint32_t num_held_for_transfer = 0;

  TtftHistogram time_to_first_token;  // seconds of the engine's clock
};

}  // namespace infera::engine
