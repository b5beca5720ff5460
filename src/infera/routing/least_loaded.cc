#include "infera/routing/least_loaded.h"

#include <vector>

#include "infera/routing/selection.h"

namespace infera::routing {

size_t LeastLoadedPolicy::choose(const ScoreRequest&, std::span<Candidate> candidates, Rng& rng) {
  uint32_t min_blocks = UINT32_MAX;
  for (const Candidate& c : candidates) min_blocks = std::min(min_blocks, c.active_blocks);
  uint32_t min_requests = UINT32_MAX;
  for (const Candidate& c : candidates) {
    if (c.active_blocks == min_blocks) min_requests = std::min(min_requests, c.active_requests);
  }
  // Cost = active blocks; the request count only separates equal block counts, and the
  // winner is drawn among the candidates minimal on both.
  std::vector<double> tie_costs(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    c.cost = static_cast<double>(c.active_blocks);
    const bool best = c.active_blocks == min_blocks && c.active_requests == min_requests;
    tie_costs[i] = best ? 0.0 : 1.0;
  }
  return pick_lowest(tie_costs, 0.0, rng);
}

}  // namespace infera::routing
