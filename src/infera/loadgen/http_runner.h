// Drives a running server (or one engine) over real HTTP with a workload: /v1/completions
// requests (streamed, or a chosen share of them not) with token-id prompts, `max_tokens` = the
// workload's output length and `ignore_eos`, open-loop at the workload's arrival times or
// closed-loop at a fixed concurrency, turns of a conversation sent after the previous turn
// finished. It measures TTFT (first content event), inter-token gaps, end-to-end latency, errors,
// and reads the fleet's prefix-cache counters (vllm:prefix_cache_hits_total / _queries_total) and
// per-worker request counts before and after the run. Blocking; call from the main thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "infera/common/status.h"
#include "infera/sim/report.h"
#include "infera/sim/workload.h"

namespace infera::loadgen {

struct HttpRunOptions {
  std::string url;                // http://host:port of the server (or an engine)
  // More replicas of the same server (router replicas of one fleet): requests go to url and
  // these in turn, as a Service spreads them; the engines' cache counters are read once
  // (through url), the per-worker request counts summed over every replica.
  std::vector<std::string> replica_urls;
  std::string model;              // "" -> the first model the server lists
  uint32_t concurrency = 0;       // 0: open loop at the workload's arrival times
  double ramp_s = 0;              // closed loop: start the C senders evenly over this many seconds
  std::string admin_token;        // for the server's /v1/admin/workers when protected
  std::chrono::seconds request_timeout{600};
  bool progress = true;           // a progress bar on stderr when it is a terminal
  int threads = 2;
  // The share of requests sent with "stream": true (a seeded choice per request); the others
  // get one JSON answer, for which TTFT is the whole answer's latency.
  double stream_fraction = 1.0;
  double window_s = 0;  // > 0: TTFT percentiles per window of arrival time (the soak's)
};

struct HttpRunResult {
  sim::PolicyReport report;
  std::string server_policy;  // what the server reported, when known
};

Result<HttpRunResult> run_http(const sim::Workload& workload, const HttpRunOptions& options);

}  // namespace infera::loadgen
