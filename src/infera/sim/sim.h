// Virtual-time simulation (`infera sim`): a workload replayed through the real routing core
// (KvIndex, ActiveLoad, Router with any policy) and a fleet of real engine models
// (engine::EngineCore, the code inside `infera engine mock`), their KV events fed back to the
// index through the real event applier. No threads, no sockets, no sleeping: one discrete-event
// loop on a ManualClock, deterministic for a seed. One call simulates one policy; callers run
// several side by side (each call is independent and thread-safe).
//
// A disaggregated fleet (prefill_workers and decode_workers both set) runs each request as the
// gateway's vLLM-style pair does: a prefill (max_tokens 1, blocks held) on a prefill worker
// routed with the prefill weight, then, when it finishes, a decode on a decode worker routed with
// the decode weight, which pulls the held blocks (EngineCore's remote_kv model; the prefill's hold
// is released when the pull starts, as the mock's KvTransfers does) and streams the output. Both
// stages keep their active-load ticket until the request ends, as in the gateway.
//
// Router replicas (`routers` > 1): requests are spread over them round-robin, as a Service
// spreads them over replicas of `infera server` (a disaggregated request's decode stays on the
// replica that routed its prefill); each replica routes with its own index and load, and with
// `sync_routers` the replicas share their load changes through the server's own replica code,
// `router_sync_latency_ms` of virtual time late (router_group.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "infera/common/status.h"
#include "infera/engine/engine_config.h"
#include "infera/routing/router.h"
#include "infera/sim/report.h"
#include "infera/sim/router_group.h"
#include "infera/sim/workload.h"

namespace infera::sim {

struct SimOptions {
  uint32_t workers = 8;  // aggregated fleet; ignored when the fleet is disaggregated
  // Disaggregated fleet: both > 0 (workers 0..P-1 prefill, P..P+D-1 decode); both 0: aggregated.
  uint32_t prefill_workers = 0;
  uint32_t decode_workers = 0;
  engine::EngineConfig engine;    // per worker; KV events are always on
  // The policy name is set per call; prefill/decode weights route the stages of a
  // disaggregated fleet (each falling back to overlap_weight).
  routing::RouterOptions router;
  double active_block_ttl_s = 300;
  // Engine-reported load: every this many seconds of virtual time the router reads each
  // engine's waiting and running counts and KV usage, as the gateway polls /metrics by default
  // (router.load's engine_poll_interval_s is set from it). 0: never.
  double engine_metrics_interval_s = 1;
  // This fraction of requests bypasses the router (another router, direct clients): each goes
  // to a worker drawn at random and is invisible to the router's own counts. 0..1.
  double hidden_fraction = 0;
  // Router replicas, each with its own index, load and router; 1: the one router of before.
  uint32_t routers = 1;
  bool sync_routers = true;           // share load changes between replicas (routers > 1)
  double router_sync_latency_ms = 5;  // virtual time for a change to reach the other replicas
};

struct SimResult {
  PolicyReport report;
  double wall_s = 0;       // real time the simulation took
  uint64_t engine_steps = 0;
  SyncStats sync;  // what the replicas' bus carried (routers > 1 with sync)
};

// The fleet's engine count: workers, or prefill_workers + decode_workers.
uint32_t fleet_size(const SimOptions& options);
bool disaggregated(const SimOptions& options);

Result<SimResult> simulate(const Workload& workload, const SimOptions& options,
                           std::string_view policy);

}  // namespace infera::sim
