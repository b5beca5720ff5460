// EnginePoller: each worker's engine's own account of its load, read from its Prometheus
// /metrics every interval (vLLM's gauges vllm:num_requests_waiting, vllm:num_requests_running,
// vllm:kv_cache_usage_perc; the mock engine serves the same) and recorded in kv::EngineSignals,
// where the router may use a reading while it is fresh. A page that is missing, slow, too big or
// garbage records nothing, so the worker's old reading ages out; the failure is logged once per
// worker and kind until the worker recovers. Requests never wait on a poll.
//
// Owned by the Fleet: start() when a worker joins, pause() when it is refused, stop() when it
// leaves (each under the Fleet's update mutex).
// Each worker has one poll loop on its own strand of the EventLoop, so at most one poll of it is
// in flight, and every poll has a deadline. The EventLoop must be stopped before the Client and
// the EngineSignals given here are destroyed.
#pragma once

#include "infera/proxy/forward.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "infera/common/status.h"
#include "infera/gateway/fleet.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/kv/active_load.h"
#include "infera/kv/engine_signals.h"

namespace infera::gateway {

// What a /metrics page says of the engine's load.
struct ReportedLoad {
  uint32_t waiting = 0;  // vllm:num_requests_waiting, summed over its series
  uint32_t running = 0;  // vllm:num_requests_running, summed over its series
  double kv_usage = 0;   // vllm:kv_cache_usage_perc (0..1), the mean of its series
};

// Parses an untrusted /metrics page. Counts are summed over label sets (several model_name or
// engine labels: one per data-parallel rank); KV usage, a fraction of each rank's own cache, is
// their mean. Errors: kInvalidArgument (the page is not Prometheus text), kNotFound (a gauge is
// absent), kOutOfRange (a value is negative or not finite).
Result<ReportedLoad> parse_engine_load(std::string_view page);

class EnginePoller {
 public:
  struct Options {
    std::chrono::milliseconds interval{1'000};  // 0: no polling
    size_t max_body_bytes = size_t{2} << 20;    // a bigger page is a failure
    // --request-transport nats: pages are fetched through it (the worker's relay) instead of
    // the HTTP client. Outlives the poller.
    proxy::Upstream* via = nullptr;
  };

  // `load`: the router's own in-flight counts, recorded beside each reading (taken at the same
  // instant) so the router can tell the engine's requests from its own.
  EnginePoller(Options options, kv::EngineSignals& signals, const kv::ActiveLoad& load,
               http::EventLoop& loop, http::Client& client);
  EnginePoller(const EnginePoller&) = delete;
  EnginePoller& operator=(const EnginePoller&) = delete;

  // One poll's deadline (connect, request, whole body): the interval, within [200 ms, 1 s].
  std::chrono::milliseconds deadline() const;

  // Polls `member` now and then every interval until stop(); nothing when polling is off or the
  // member has no endpoint.
  void start(const FleetMember& member);
  // Polls `member` no more but keeps its last reading (the Fleet refused it: it is never routed,
  // so its load is moot, and the admin API still shows what it last said). Idempotent.
  void pause(const FleetMember& member);
  // Stops polling `member` and forgets its reading (its slot may be reused); a poll of it still
  // in flight records nothing. Idempotent.
  void stop(const FleetMember& member);

 private:
  Options options_;
  kv::EngineSignals& signals_;
  const kv::ActiveLoad& load_;
  http::EventLoop& loop_;
  http::Client& client_;
};

}  // namespace infera::gateway
