#include "infera/routing/policy.h"

#include "infera/common/check.h"
#include "infera/routing/approx_prefix.h"
#include "infera/routing/kv_aware.h"
#include "infera/routing/least_loaded.h"
#include "infera/routing/random_policy.h"
#include "infera/routing/round_robin.h"

namespace infera::routing {

size_t Policy::choose_columns(const ScoreRequest&, ScoreColumns&, Rng&) {
  INFERA_CHECK(false);  // only for policies that pick by columns
  return 0;
}

Result<std::unique_ptr<Policy>> make_policy(std::string_view name) {
  if (name == "kv-aware") return std::unique_ptr<Policy>(std::make_unique<KvAwarePolicy>());
  if (name == "round-robin") return std::unique_ptr<Policy>(std::make_unique<RoundRobinPolicy>());
  if (name == "random") return std::unique_ptr<Policy>(std::make_unique<RandomPolicy>());
  if (name == "least-loaded") {
    return std::unique_ptr<Policy>(std::make_unique<LeastLoadedPolicy>());
  }
  if (name == "approx-prefix") {
    return std::unique_ptr<Policy>(std::make_unique<ApproxPrefixPolicy>(ApproxPrefixOptions{}));
  }
  std::string known;
  for (const std::string& n : policy_names()) known += (known.empty() ? "" : ", ") + n;
  return invalid_argument("unknown router policy '" + std::string(name) + "' (known: " + known +
                          ")");
}

std::vector<std::string> policy_names() {
  return {"kv-aware", "round-robin", "random", "least-loaded", "approx-prefix"};
}

}  // namespace infera::routing
