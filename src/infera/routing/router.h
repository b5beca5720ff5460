// Router: one routing decision. Given a prompt's block hashes and the candidate workers, it
// reads each worker's cache hits (KvIndex, lower tiers too when they earn credit, and the
// predicted-on-route entries), its active load by phase (ActiveLoad), lets the policy cost and
// pick with the load model (load_model.h), and, for route(), registers the prompt's blocks as
// active on the winner and the blocks it will compute as predicted there.
// Disaggregated fleets route each stage with its own overlap weight (prefill and decode, each
// falling back to the global weight); a reload may change the weights while requests route.
// score() returns the whole explain table; route() only the chosen row.
// Thread-safe: any request thread may call score()/route() concurrently; route() calls are
// serialised, each deciding on what the ones before it registered. set_overlap_weights() from
// any thread (the server's main thread on SIGHUP).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "infera/common/random.h"
#include "infera/common/spin_mutex.h"
#include "infera/common/status.h"
#include "infera/kv/active_load.h"
#include "infera/kv/engine_signals.h"
#include "infera/kv/index.h"
#include "infera/kv/predicted_blocks.h"
#include "infera/routing/load_model.h"
#include "infera/routing/policy.h"

namespace infera::routing {

enum class Stage { kAggregated, kPrefill, kDecode };
std::string_view stage_name(Stage stage);
// The workers of a stage in a user-facing message: "worker", "prefill worker", "decode worker".
std::string_view stage_worker(Stage stage);

struct RouterOptions {
  std::string policy = "kv-aware";
  double overlap_weight = 1.0;                    // --kv-overlap-weight
  std::optional<double> prefill_overlap_weight;   // --kv-prefill-overlap-weight
  std::optional<double> decode_overlap_weight;    // --kv-decode-overlap-weight
  double temperature = 0.0;                       // 0: lowest cost wins
  uint64_t seed = 0;                              // tie-break and sampling randomness
  LoadModelOptions load;                          // --kv-load-model and its terms
};

// The weight a stage is routed with: its own, else overlap_weight.
double stage_overlap_weight(const RouterOptions& options, Stage stage);

// What the router decided and why: the per-worker cost table (score()), or its chosen row
// (route()).
struct Decision {
  Stage stage = Stage::kAggregated;
  std::string policy;
  uint32_t prompt_tokens = 0;
  uint32_t request_blocks = 0;  // ceil(prompt_tokens / block size)
  double overlap_weight = 0;
  // score(): one row per candidate, in the order given; route(): the chosen row alone.
  std::vector<Candidate> table;
  size_t winner = 0;   // position in table
  uint32_t gated = 0;  // rows past the overload gate (their hits earned nothing)

  const Candidate& chosen() const { return table[winner]; }
  kv::WorkerId worker() const { return table[winner].worker; }
};

// Told of each change route(), prefill_done() and release() make to the active load, right after
// it is made and outside the router's locks: router replicas share these changes
// (replica/load_bus.h). Called on the request's thread; must not block.
class LoadListener {
 public:
  virtual ~LoadListener() = default;
  // A request was routed: `seq_hashes` registered on ticket.worker, `uncached` of them to
  // compute there, its predicted-on-route entries starting after `cached` confirmed hits.
  virtual void on_add(kv::LoadTicket ticket, std::span<const uint64_t> seq_hashes,
                      uint32_t uncached, uint32_t cached) = 0;
  virtual void on_prefill_done(kv::LoadTicket ticket) = 0;
  virtual void on_release(kv::LoadTicket ticket) = 0;
};

class Router {
 public:
  // `predicted` (optional) holds the predicted-on-route entries: read as hits, and written
  // for every routed request when its TTL is on. `signals` (optional) holds the engines' own
  // load readings, used while fresh (LoadModelOptions::engine_reading_max_age_s). Each must
  // outlive the router.
  static Result<std::unique_ptr<Router>> create(RouterOptions options, kv::KvIndex& index,
                                                kv::ActiveLoad& load,
                                                kv::PredictedBlocks* predicted = nullptr,
                                                const kv::EngineSignals* signals = nullptr);

  // The options it was created with; the overlap weights in force are overlap_weight(stage).
  const RouterOptions& options() const { return options_; }
  uint32_t block_size() const { return index_.block_size(); }
  // The weight `stage` is routed with now (stage_overlap_weight of the latest weights).
  double overlap_weight(Stage stage) const;
  // Replaces the overlap weights (--kv-overlap-weight, --kv-prefill-overlap-weight,
  // --kv-decode-overlap-weight) for the decisions that start after it. Each stage's weight is one
  // atomic that a decision reads once, so a decision in flight keeps the weight it started with.
  // Weights that are negative or not finite are an error and change nothing.
  Status set_overlap_weights(double overlap_weight, std::optional<double> prefill_overlap_weight,
                             std::optional<double> decode_overlap_weight);

  // Costs every candidate for the prompt and picks one; registers nothing (route-explain).
  // `seq_hashes` are the prompt's full-block hashes; `prompt_tokens` its length in tokens.
  Result<Decision> score(std::span<const uint64_t> seq_hashes, uint32_t prompt_tokens,
                         std::span<const kv::WorkerId> candidates,
                         Stage stage = Stage::kAggregated);

  // score() (its decision keeps only the chosen row), then the prompt's blocks become active
  // load on the winner, in prefill, until prefill_done() (its first token came back) and then in
  // decode until the ticket is released (ActiveLoad::release) or expires; the blocks the winner
  // will compute become predicted there.
  struct Routed {
    Decision decision;
    kv::LoadTicket ticket;
  };
  Result<Routed> route(std::span<const uint64_t> seq_hashes, uint32_t prompt_tokens,
                       std::span<const kv::WorkerId> candidates, Stage stage = Stage::kAggregated);

  void prefill_done(kv::LoadTicket ticket);
  void release(kv::LoadTicket ticket);

  // Who hears of each load change (null: nobody). Set once, before requests are routed, or
  // swapped between them; the listener must outlive the router or be unset first.
  void set_load_listener(LoadListener* listener) {
    listener_.store(listener, std::memory_order_release);
  }

 private:
  Router(RouterOptions options, std::unique_ptr<Policy> policy, kv::KvIndex& index,
         kv::ActiveLoad& load, kv::PredictedBlocks* predicted, const kv::EngineSignals* signals);

  void store_weights(const RouterOptions& weights);
  // What every row of one decision reads: the prompt's hits on each worker and the engine
  // readings' common terms.
  struct Inputs {
    std::span<const uint64_t> seq_hashes;
    bool want_hits = false;
    bool want_lower = false;
    const std::vector<uint32_t>* hits = nullptr;  // by worker id (KvIndex::find_overlaps)
    const std::vector<uint32_t>* lower = nullptr;
    const std::vector<uint32_t>* disk = nullptr;
    double blocks_per_request = 0;  // what a request the engine holds and we did not route weighs
    Nanos max_age{0};               // engine readings older than this are not used...
    Nanos now{0};                   // ...as of this instant
  };
  // Fills `d`'s header and reads the decision's inputs (the index query). On this thread's
  // buffers: valid until its next decision.
  Inputs prepare(std::span<const uint64_t> seq_hashes, uint32_t prompt_tokens,
                 std::span<const kv::WorkerId> candidates, Stage stage, Decision& d);
  // A candidate's row, all but cost and gated (the policy's); `predicted_hits` as read before,
  // or read now.
  void fill_row(Candidate& row, kv::WorkerId worker, const Inputs& in,
                std::optional<uint32_t> predicted_hits = std::nullopt) const;
  // How far ahead of the row being filled a worker's load is asked for (a cold decision over a
  // thousand workers otherwise waits on each one's line in turn).
  static constexpr size_t kPrefetchAhead = 8;
  // Fills one row of `table` per candidate and lets the policy cost them and pick: `d`'s winner
  // (a position in `table`) and gated count.
  void choose_rows(std::span<const kv::WorkerId> candidates, const Inputs& in, Decision& d,
                   std::vector<Candidate>& table);
  // route()'s decision (`candidates` not empty): the table stays on this thread, the decision
  // carries the chosen row; a policy that picks by columns never gets rows at all.
  Decision decide(std::span<const uint64_t> seq_hashes, uint32_t prompt_tokens,
                  std::span<const kv::WorkerId> candidates, Stage stage);

  RouterOptions options_;
  // Each stage's overlap weight (by Stage), resolved: what overlap_weight() reads.
  std::array<std::atomic<double>, 3> stage_weights_{};
  kv::KvIndex& index_;
  kv::ActiveLoad& load_;
  kv::PredictedBlocks* predicted_;    // null or off: no predicted hits
  const kv::EngineSignals* signals_;  // null or off: the router's own counts only
  SpinMutex policy_mu_;               // guards policy_ and rng_ (a few hundred ns per decision)
  // Makes each route() one step: its decision and the load and predicted blocks it registers.
  // Otherwise two siblings of a burst routed at once on two threads would both decide before
  // either registered, and land apart. Held for one decision (microseconds, no I/O).
  SpinMutex route_mu_;
  std::atomic<LoadListener*> listener_{nullptr};
  std::unique_ptr<Policy> policy_;
  Rng rng_;
};

}  // namespace infera::routing
