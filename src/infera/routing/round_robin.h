// round-robin: each decision takes the next candidate in turn, ignoring cache and load.
// The baseline the demo and benchmarks compare against.
#pragma once

#include "infera/routing/policy.h"

namespace infera::routing {

class RoundRobinPolicy final : public Policy {
 public:
  std::string_view name() const override { return "round-robin"; }
  size_t choose(const ScoreRequest& request, std::span<Candidate> candidates, Rng& rng) override;

 private:
  uint64_t next_ = 0;
};

}  // namespace infera::routing
