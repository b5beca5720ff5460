#include "infera/routing/kv_aware.h"

#include <algorithm>
#include <vector>

#include "infera/routing/selection.h"

namespace infera::routing {

double kv_aware_cost(double overlap_weight, uint32_t request_blocks, uint32_t cache_hits,
                     uint32_t active_blocks) {
  return kv_cost(overlap_weight, request_blocks, cache_hits, active_blocks);
}

double kv_cost(double overlap_weight, uint32_t request_blocks, double credited_hits, double load) {
  // Hits can exceed the blocks the request is charged for only if the caller passed more
  // hashes than blocks; never let that turn into a bonus.
  const double uncached = std::max(0.0, static_cast<double>(request_blocks) - credited_hits);
  return overlap_weight * uncached + load;
}

size_t KvAwarePolicy::choose(const ScoreRequest& request, std::span<Candidate> candidates,
                             Rng& rng) {
  std::vector<double> costs(candidates.size());
  if (request.load == nullptr) {
    // The seed's table as given (tests, callers without a load model).
    for (size_t i = 0; i < candidates.size(); ++i) {
      Candidate& c = candidates[i];
      c.cost = kv_aware_cost(request.overlap_weight, request.request_blocks, c.cache_hits,
                             c.active_blocks);
      costs[i] = c.cost;
    }
    return pick_lowest(costs, request.temperature, rng);
  }
  // The gate: a candidate whose load is past the threshold is busy. Its cache earns it nothing
  // while another candidate is not busy (a hot prefix cannot pile onto it); when every
  // candidate is busy, affinity is dropped altogether and the request goes by load alone.
  const double gate = request.load->overload_blocks;
  size_t busy = 0;
  for (const Candidate& c : candidates) busy += gate > 0 && c.load_terms.total > gate ? 1 : 0;
  const bool all_busy = busy == candidates.size();
  const double weight = all_busy ? 0.0 : request.overlap_weight;
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    c.gated = gate > 0 && c.load_terms.total > gate;  // busy (all_busy: every row)
    c.cost = kv_cost(weight, request.request_blocks, c.gated ? 0.0 : c.credited_hits,
                     c.load_terms.total);
    costs[i] = c.cost;
  }
  return pick_lowest(costs, request.temperature, rng);
}

}  // namespace infera::routing
