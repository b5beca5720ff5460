// Upper bounds on the prefix hit ratio of a workload, for judging a router (issue #7):
//   - infinite_cache_hit_ratio: one infinite cache shared by the whole fleet;
//   - pooled_lru_hit_ratio: one LRU cache with the fleet's total capacity.
// Both walk requests in arrival order, count each prompt's leading full blocks already cached
// (a hole ends the match, as in vLLM), then cache all of its full blocks. Hit ratio = hit
// tokens / prompt tokens. Pure functions; any thread.
#pragma once

#include <cstdint>

#include "infera/bench/workload.h"

namespace infera::bench {

double infinite_cache_hit_ratio(const Workload& workload, uint32_t block_size);
double pooled_lru_hit_ratio(const Workload& workload, uint32_t block_size, uint64_t capacity_blocks);

}  // namespace infera::bench
