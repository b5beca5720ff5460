// Bounds of a workload, for judging a router (issues #7 and #20):
//   - infinite_cache_hit_ratio: one infinite cache shared by the whole fleet;
//   - pooled_lru_hit_ratio: one LRU cache with the fleet's total capacity;
//   - ttft_lower_bound: each request's time to first token on an idle engine that caches every
//     block any earlier request had (the infinite cache), under the engine's timing model. No
//     policy can beat it for any request, so its quantiles bound the fleet's from below.
// All walk requests in arrival order, count each prompt's leading full blocks already cached
// (a hole ends the match, as in vLLM), then cache all of its full blocks. Hit ratio = hit
// tokens / prompt tokens. Pure functions; any thread.
#pragma once

#include <cstdint>

#include "infera/engine/engine_config.h"
#include "infera/sim/workload.h"

namespace infera::sim {

double infinite_cache_hit_ratio(const Workload& workload, uint32_t block_size);
double pooled_lru_hit_ratio(const Workload& workload, uint32_t block_size, uint64_t capacity_blocks);

struct TtftQuantiles {
  double p50_ms = 0, p90_ms = 0, p99_ms = 0;
};
// The engine's block size, step token budget (chunked prefill) and speed-up ratio apply.
TtftQuantiles ttft_lower_bound(const Workload& workload, const engine::EngineConfig& engine);

}  // namespace infera::sim
