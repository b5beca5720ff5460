#include "infera/routing/kv_aware.h"

#include <vector>

#include "infera/routing/selection.h"

namespace infera::routing {

double kv_aware_cost(double overlap_weight, uint32_t request_blocks, uint32_t cache_hits,
                     uint32_t active_blocks) {
  // Hits can exceed the blocks the request is charged for only if the caller passed more
  // hashes than blocks; never let that turn into a bonus.
  const uint32_t uncached = request_blocks > cache_hits ? request_blocks - cache_hits : 0;
  return overlap_weight * static_cast<double>(uncached) + static_cast<double>(active_blocks);
}

size_t KvAwarePolicy::choose(const ScoreRequest& request, std::span<Candidate> candidates,
                             Rng& rng) {
  std::vector<double> costs(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    c.cost = kv_aware_cost(request.overlap_weight, request.request_blocks, c.cache_hits,
                           c.active_blocks);
    costs[i] = c.cost;
  }
  return pick_lowest(costs, request.temperature, rng);
}

}  // namespace infera::routing
