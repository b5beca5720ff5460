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
#include "infera/kv/active_load.h"
#include "infera/kv/index.h"
#include "infera/routing/load_model.h"

namespace infera::routing {

// One worker's row of the cost table, also the route-explain output.
struct Candidate {
  kv::WorkerId worker = 0;
  uint32_t cache_hits = 0;       // leading GPU blocks of the prompt it holds (confirmed by events)
  uint32_t active_blocks = 0;    // distinct blocks of its in-flight requests
  uint32_t active_requests = 0;  // requests in flight
  double cost = 0;               // the policy's score; lowest wins
  // Beyond the seed's table (kv-aware reads them; see load_model.h):
  uint32_t predicted_hits = 0;  // blocks after cache_hits predicted on route (not yet confirmed)
  uint32_t lower_hits = 0;      // blocks after those held on a lower tier (CPU or disk)...
  uint32_t disk_hits = 0;       // ...of which only on disk
  double credited_hits = 0;     // what the cost counts as cached (tier credit applied)
  kv::WorkerLoad load;          // in flight by phase
  LoadTerms load_terms;         // load(w) and its terms
  bool engine_fresh = false;    // a fresh engine reading entered load_terms.hidden
  // Past --kv-overload-threshold (busy): its hits earned nothing; when every row is, the cost
  // was load(w) alone.
  bool gated = false;
};

struct ScoreRequest {
  uint32_t request_blocks = 0;  // ceil(prompt tokens / block size)
  double overlap_weight = 1.0;
  double temperature = 0.0;  // 0: lowest cost wins; > 0: softmax sampling over normalised costs
  std::span<const uint64_t> seq_hashes;  // the prompt's full-block hashes (router-side history)
  const LoadModelOptions* load = nullptr;  // null: active-blocks as documented
};

// Two numbers per candidate, which is all the kv-aware cost reads: a router routing over a
// thousand workers hands a policy that picks by them (Policy::picks_by_columns) these columns
// instead of a thousand rows (docs/benchmarks.md, "1,000 simulated workers").
struct ScoreColumns {
  std::vector<double> credited;  // in: Candidate::credited_hits
  std::vector<double> load;      // in: Candidate::load_terms.total
  std::vector<double> cost;      // out: Candidate::cost
  std::vector<uint8_t> gated;    // out: Candidate::gated (0 or 1)

  void resize(size_t n) {
    credited.resize(n);
    load.resize(n);
    cost.resize(n);
    gated.resize(n);
  }
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Whether the policy reads cache_hits; the router skips the index query otherwise.
  virtual bool uses_cache() const { return false; }
  // Fills every candidate's cost and returns the winner's position. `candidates` is not empty.
  virtual size_t choose(const ScoreRequest& request, std::span<Candidate> candidates, Rng& rng) = 0;
  // Whether the cost reads nothing of a row but its credited hits and load(w) (ScoreColumns).
  virtual bool picks_by_columns() const { return false; }
  // Only when picks_by_columns(): fills the columns' cost and gated and returns the winner's
  // position, exactly as choose() would on rows carrying the same values (same winner, same use
  // of `rng`). The columns are not empty.
  virtual size_t choose_columns(const ScoreRequest& request, ScoreColumns& columns, Rng& rng);
};

// "round-robin", "random", "least-loaded", "kv-aware", "approx-prefix".
Result<std::unique_ptr<Policy>> make_policy(std::string_view name);
std::vector<std::string> policy_names();

}  // namespace infera::routing
