// approx-prefix: the SGLang gateway's cache_aware policy, as the strongest peer baseline
// (shared/design/anchors/peers.md 2.1). It never sees engine events: it remembers which prompts
// it sent where (router-side history, block hashes per worker, LRU-bounded) and
//   1. if load is imbalanced ((max - min) > abs_threshold and max > rel_threshold * min, load =
//      requests in flight), sends the request to the least-loaded worker;
//   2. else, if the best history match covers more than cache_threshold of the prompt, to the
//      worker with that match (ties: the most recent holder; not load-aware, as in SGLang);
//   3. else to the least-loaded worker;
// and records the prompt in the chosen worker's history. Defaults are SGLang's CLI defaults
// (`smg launch`: --cache-threshold 0.3, --balance-abs-threshold 64, --balance-rel-threshold 1.5).
#pragma once

#include <unordered_map>

#include "infera/common/flat_map.h"
#include "infera/routing/policy.h"

namespace infera::routing {

struct ApproxPrefixOptions {
  double cache_threshold = 0.3;
  uint32_t balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
  uint64_t max_blocks_per_worker = 1u << 22;  // history bound (LRU by last use)
};

class ApproxPrefixPolicy final : public Policy {
 public:
  explicit ApproxPrefixPolicy(ApproxPrefixOptions options) : options_(options) {}
  std::string_view name() const override { return "approx-prefix"; }
  size_t choose(const ScoreRequest& request, std::span<Candidate> candidates, Rng& rng) override;

 private:
  struct History {
    FlatU64Map<uint64_t> last_use{50};  // block hash -> tick of its last insertion
  };
  void remember(kv::WorkerId worker, std::span<const uint64_t> hashes);

  ApproxPrefixOptions options_;
  std::unordered_map<kv::WorkerId, History> history_;
  uint64_t tick_ = 0;
};

}  // namespace infera::routing
