// Virtual-time simulation (`infera sim`): a workload replayed through the real routing core
// (KvIndex, ActiveLoad, Router with any policy) and a fleet of real engine models
// (engine::EngineCore, the code inside `infera engine mock`), their KV events fed back to the
// index through the real event applier. No threads, no sockets, no sleeping: one discrete-event
// loop on a ManualClock, deterministic for a seed. One call simulates one policy; callers run
// several side by side (each call is independent and thread-safe).
#pragma once

#include <cstdint>
#include <string_view>

#include "infera/bench/report.h"
#include "infera/bench/workload.h"
#include "infera/common/status.h"
#include "infera/engine/engine_config.h"
#include "infera/routing/router.h"

namespace infera::bench {

struct SimOptions {
  uint32_t workers = 8;
  engine::EngineConfig engine;    // per worker; KV events are always on
  routing::RouterOptions router;  // the policy name is set per call
  double active_block_ttl_s = 300;
};

struct SimResult {
  PolicyReport report;
  double wall_s = 0;       // real time the simulation took
  uint64_t engine_steps = 0;
};

Result<SimResult> simulate(const Workload& workload, const SimOptions& options,
                           std::string_view policy);

}  // namespace infera::bench
