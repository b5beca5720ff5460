// kv-aware: docs/contracts.md section 6.
//   cost(w) = overlap_weight * (request_blocks - cache_hits(w)) + active_blocks(w)
// exactly, with the active-blocks load model (the default); with another load model
// (load_model.h) cache_hits(w) becomes the credited hits (predicted-on-route blocks, lower tiers
// at their credit) and active_blocks(w) the model's load(w). Past the overload gate (every
// candidate's load above the threshold) the cost is load(w) alone. Lowest cost wins; exact ties
// break at random; temperature > 0 samples a softmax over the normalised costs. overlap_weight 0
// is pure load balance.
#pragma once

#include <vector>

#include "infera/routing/policy.h"

namespace infera::routing {

class KvAwarePolicy final : public Policy {
 public:
  std::string_view name() const override { return "kv-aware"; }
  bool uses_cache() const override { return true; }
  size_t choose(const ScoreRequest& request, std::span<Candidate> candidates, Rng& rng) override;
  bool picks_by_columns() const override { return true; }
  size_t choose_columns(const ScoreRequest& request, ScoreColumns& columns, Rng& rng) override;

 private:
  ScoreColumns columns_;  // choose()'s, kept between calls (no allocation each)
};

// The cost of one candidate (shared with the simulator's reports and the explain endpoint).
double kv_aware_cost(double overlap_weight, uint32_t request_blocks, uint32_t cache_hits,
                     uint32_t active_blocks);
// The general form: overlap_weight * max(0, request_blocks - credited_hits) + load.
double kv_cost(double overlap_weight, uint32_t request_blocks, double credited_hits, double load);

}  // namespace infera::routing
