#include "infera/routing/round_robin.h"

namespace infera::routing {

size_t RoundRobinPolicy::choose(const ScoreRequest&, std::span<Candidate> candidates, Rng&) {
  // Cost = turns until the candidate's turn, so the explain table shows the rotation.
  const size_t start = static_cast<size_t>(next_++ % candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    candidates[i].cost = static_cast<double>((i + candidates.size() - start) % candidates.size());
  }
  return start;
}

}  // namespace infera::routing
