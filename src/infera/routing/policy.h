// Routing policies: given one row per candidate worker (its cache hits for the prompt, its
// active load), a policy fills each row's cost and picks the winner. Policies are found by name
// (make_policy); each lives in its own file pair. A Policy instance is not thread-safe (it may
// keep a round-robin cursor); the Router serialises calls to choose().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/random.h"
#include "infera/common/status.h"
#include "infera/kv/index.h"

namespace infera::routing {

// One worker's row of the cost table, also the route-explain output.
struct Candidate {
  kv::WorkerId worker = 0;
  uint32_t cache_hits = 0;       // leading GPU blocks of the prompt it holds
  uint32_t active_blocks = 0;    // distinct blocks of its in-flight requests
  uint32_t active_requests = 0;  // requests in flight
  double cost = 0;               // the policy's score; lowest wins
};

struct ScoreRequest {
  uint32_t request_blocks = 0;  // ceil(prompt tokens / block size)
  double overlap_weight = 1.0;
  double temperature = 0.0;  // 0: lowest cost wins; > 0: softmax sampling over normalised costs
  std::span<const uint64_t> seq_hashes;  // the prompt's full-block hashes (router-side history)
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Whether the policy reads cache_hits; the router skips the index query otherwise.
  virtual bool uses_cache() const { return false; }
  // Fills every candidate's cost and returns the winner's position. `candidates` is not empty.
  virtual size_t choose(const ScoreRequest& request, std::span<Candidate> candidates,
                        Rng& rng) = 0;
};

// "round-robin", "random", "least-loaded", "kv-aware", "approx-prefix".
Result<std::unique_ptr<Policy>> make_policy(std::string_view name);
std::vector<std::string> policy_names();

}  // namespace infera::routing
