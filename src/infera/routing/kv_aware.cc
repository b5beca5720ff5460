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
  // Without a load model: the seed's table as given (tests, callers without a load model).
  columns_.resize(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    columns_.credited[i] = request.load ? c.credited_hits : c.cache_hits;
    columns_.load[i] = request.load ? c.load_terms.total : c.active_blocks;
  }
  const size_t winner = choose_columns(request, columns_, rng);
  for (size_t i = 0; i < candidates.size(); ++i) {
    candidates[i].cost = columns_.cost[i];
    candidates[i].gated = columns_.gated[i] != 0;
  }
  return winner;
}

size_t KvAwarePolicy::choose_columns(const ScoreRequest& request, ScoreColumns& columns, Rng& rng) {
  // The gate: a candidate whose load is past the threshold is busy. Its cache earns it nothing
  // while another candidate is not busy (a hot prefix cannot pile onto it); when every
  // candidate is busy, affinity is dropped altogether and the request goes by load alone.
  const size_t n = columns.load.size();
  const double gate = request.load ? request.load->overload_blocks : 0.0;
  size_t busy = 0;
  for (size_t i = 0; i < n; ++i) busy += gate > 0 && columns.load[i] > gate ? 1u : 0u;
  const bool all_busy = busy == n;
  const double weight = all_busy ? 0.0 : request.overlap_weight;
  for (size_t i = 0; i < n; ++i) {
    const bool gated = gate > 0 && columns.load[i] > gate;  // busy (all_busy: every row)
    columns.gated[i] = gated ? 1 : 0;
    columns.cost[i] =
        kv_cost(weight, request.request_blocks, gated ? 0.0 : columns.credited[i], columns.load[i]);
  }
  return pick_lowest(columns.cost, request.temperature, rng);
}

}  // namespace infera::routing
