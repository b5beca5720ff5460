// random: a uniformly random candidate, ignoring cache and load.
#pragma once

#include "infera/routing/policy.h"

namespace infera::routing {

class RandomPolicy final : public Policy {
 public:
  std::string_view name() const override { return "random"; }
  size_t choose(const ScoreRequest& request, std::span<Candidate> candidates, Rng& rng) override;
};

}  // namespace infera::routing
