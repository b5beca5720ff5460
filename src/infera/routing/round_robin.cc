#include "infera/routing/round_robin.h"

namespace infera::routing {

size_t RoundRobinPolicy::choose(const ScoreRequest&, std::span<Candidate> candidates, Rng&) {
  // Cost = the turn the worker last won, so the explain table shows who is next (lowest).
  size_t best = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const kv::WorkerId w = candidates[i].worker;
    if (w >= last_pick_.size()) last_pick_.resize(w + 1, 0);
    candidates[i].cost = static_cast<double>(last_pick_[w]);
    if (candidates[i].cost < candidates[best].cost) best = i;
  }
  last_pick_[candidates[best].worker] = ++turn_;
  return best;
}

}  // namespace infera::routing
