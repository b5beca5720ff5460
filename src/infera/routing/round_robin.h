// round-robin: each decision takes the next candidate in turn, ignoring cache and load.
// The baseline the demo and benchmarks compare against.
#pragma once

#include <vector>

#include "infera/routing/policy.h"

namespace infera::routing {

// Each worker in turn: the candidate picked least recently wins (never picked: the first in
// candidate order). The rotation is per worker, not one counter over positions, so each pool
// rotates on its own when requests for several pools interleave (two models, or the prefill
// and decode stages of a split fleet): with one counter, requests alternating between two
// pools of two workers each went to the same worker of each pool every time.
class RoundRobinPolicy final : public Policy {
 public:
  std::string_view name() const override { return "round-robin"; }
  size_t choose(const ScoreRequest& request, std::span<Candidate> candidates, Rng& rng) override;

 private:
  std::vector<uint64_t> last_pick_;  // by worker id: the turn it last won (0: never)
  uint64_t turn_ = 0;
};

}  // namespace infera::routing
