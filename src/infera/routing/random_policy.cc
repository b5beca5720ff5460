#include "infera/routing/random_policy.h"

namespace infera::routing {

size_t RandomPolicy::choose(const ScoreRequest&, std::span<Candidate> candidates, Rng& rng) {
  for (Candidate& c : candidates) c.cost = 0;
  return static_cast<size_t>(rng.uniform(candidates.size()));
}

}  // namespace infera::routing
