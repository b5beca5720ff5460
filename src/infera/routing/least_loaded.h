// least-loaded: the candidate with the fewest active blocks, then the fewest requests in
// flight; remaining ties break at random. Ignores the cache.
#pragma once

#include "infera/routing/policy.h"

namespace infera::routing {

class LeastLoadedPolicy final : public Policy {
 public:
  std::string_view name() const override { return "least-loaded"; }
  size_t choose(const ScoreRequest& request, std::span<Candidate> candidates, Rng& rng) override;
};

}  // namespace infera::routing
