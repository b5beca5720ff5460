// Load models: the load(w) term of the kv-aware cost (docs/contracts.md section 6)
//   cost(w) = overlap_weight * (request_blocks - credited_hits(w)) + load(w)
// and what a hit is worth (tier credit). Chosen with --kv-load-model:
//   - active-blocks (default): load(w) = active_blocks(w), the distinct blocks of the requests in
//     flight on w, and credited_hits(w) = the GPU blocks w caches: the product documentation's
//     formula, unchanged.
//   - prefill-aware: load(w) = prefill_weight * max(0, prefill_blocks(w) - predicted_hits(w))
//                             + decode_weight * decode_blocks(w)
//     where prefill_blocks(w) are the blocks w must still compute before a new request's first
//     token (the uncached blocks of routed requests whose first token has not come back) and
//     decode_blocks(w) the KV its decoding requests hold. A request waits for the first term on
//     w (a step computes one prompt chunk at a time, FCFS), while the second only lengthens each
//     step a little, so it weighs much less (weights and their measurement: docs/routing.md).
//     Blocks of the request itself that w is computing already (its predicted hits) are not
//     counted as waiting: elsewhere it would compute them itself, and that is the overlap term.
//     Hits on lower tiers count at a discount (--kv-tier-credit).
// The overload gate (both models, off by default): a candidate whose load(w) exceeds
// overload_blocks is busy and its hits earn it nothing while another candidate is not busy, so a
// hot prefix cannot pile onto one worker however high the overlap weight; when every candidate
// is busy, affinity is dropped and the request goes by load alone.
// Pure functions of their inputs; any thread. The two a decision calls per candidate are inline.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "infera/common/status.h"
#include "infera/config/load_model_flags.h"
#include "infera/kv/active_load.h"
#include "infera/kv/engine_signals.h"

namespace infera::routing {

enum class LoadModel { kActiveBlocks, kPrefillAware };
std::string_view load_model_name(LoadModel model);
Result<LoadModel> parse_load_model(std::string_view name);  // "active-blocks", "prefill-aware"

// What a cached block is worth by where it lives: 1 on GPU; a lower tier's block must be
// loaded back (cheaper than recomputing it, dearer than a GPU hit).
struct TierCredit {
  double gpu = 1.0;
  double cpu = 0.0;
  double disk = 0.0;
};
// "gpu=1,cpu=0.75,disk=0.25" (any subset; values in [0, 1]); names an error precisely.
Result<TierCredit> parse_tier_credit(std::string_view text);
std::string format_tier_credit(const TierCredit& credit);

struct LoadModelOptions {
  LoadModel model = LoadModel::kActiveBlocks;
  double prefill_weight = 1.0;  // per block still to compute (prefill-aware)
  double decode_weight = 0.0;   // per block of KV held by decoding requests (prefill-aware)
  TierCredit tier_credit;
  // The overload gate's threshold, in load(w) units (blocks). 0: off.
  double overload_blocks = 0;
  // Predicted-on-route entries live this long (kv/predicted_blocks.h; the owner of the index
  // builds them). 0: off.
  double predicted_ttl_s = 0;
  // How often the owner polls the engines' own load (kv/engine_signals.h; the gateway's
  // --engine-metrics-interval-s, the simulator's). A reading is used for kEngineReadingPolls
  // intervals; older or missing readings leave the router's own counts alone. 0: never used.
  double engine_poll_interval_s = 0;
  double engine_reading_max_age_s() const { return kEngineReadingPolls * engine_poll_interval_s; }
  static constexpr double kEngineReadingPolls = 3;
};

// The defaults of a model: active-blocks as documented (no tier credit, no gate);
// prefill-aware with its measured weights, tier credit 1 / 0.75 / 0.25 and its gate.
LoadModelOptions default_load_options(LoadModel model);
Status validate(const LoadModelOptions& options);
// The flags as given (config/load_model_flags.h) over the chosen model's defaults; an error
// names the flag.
Result<LoadModelOptions> resolve_load_options(const config::LoadModelFlags& flags);

// load(w) and its terms, as route-explain shows them.
struct LoadTerms {
  double prefill = 0;  // prefill_weight * prefill_blocks (prefill-aware)
  double decode = 0;   // decode_weight * decode_blocks (prefill-aware)
  double hidden = 0;   // prefill_weight * blocks of requests the engine reports and we never routed
  double total = 0;    // load(w): active_blocks, or prefill + decode + hidden
};

// `predicted_hits`: the request's own blocks that the worker is computing already. `engine`:
// the worker's fresh engine reading, if any (prefill-aware only): the requests it holds beyond
// this router's at the reading are someone else's (other routers, direct clients), each taken
// to need `blocks_per_request` blocks of prefill while queued and to hold as many while running.
inline LoadTerms load_terms(const LoadModelOptions& o, const kv::WorkerLoad& load,
                            uint32_t predicted_hits = 0, const kv::EngineReading* engine = nullptr,
                            double blocks_per_request = 0) {
  LoadTerms t;
  if (o.model == LoadModel::kActiveBlocks) {
    t.total = static_cast<double>(load.active_blocks);
    return t;
  }
  const uint32_t waiting =
      load.prefill_blocks > predicted_hits ? load.prefill_blocks - predicted_hits : 0;
  t.prefill = o.prefill_weight * static_cast<double>(waiting);
  t.decode = o.decode_weight * static_cast<double>(load.decode_blocks);
  if (engine != nullptr) {
    // Requests the engine holds beyond the ones we routed there are someone else's (another
    // router, a direct client). Those of its queue beyond our own requests in prefill wait
    // ahead of ours; the rest decode beside them.
    const uint32_t total = engine->waiting + engine->running;
    const uint32_t hidden = total > engine->ours_active ? total - engine->ours_active : 0;
    const uint32_t queued =
        engine->waiting > engine->ours_prefill ? engine->waiting - engine->ours_prefill : 0;
    const uint32_t hidden_waiting = std::min(hidden, queued);
    const uint32_t hidden_running = hidden - hidden_waiting;
    t.hidden =
        (o.prefill_weight * hidden_waiting + o.decode_weight * hidden_running) * blocks_per_request;
  }
  t.total = t.prefill + t.decode + t.hidden;
  return t;
}

// The hits a candidate is credited with: GPU and predicted blocks at the GPU credit, then the
// lower-tier run (`lower` blocks, `disk` of them only on disk) at the CPU and disk credits.
inline double credited_hits(const TierCredit& c, uint32_t gpu, uint32_t predicted, uint32_t lower,
                            uint32_t disk) {
  const uint32_t on_disk = std::min(disk, lower);
  return c.gpu * static_cast<double>(gpu + predicted) +
         c.cpu * static_cast<double>(lower - on_disk) + c.disk * static_cast<double>(on_disk);
}

}  // namespace infera::routing
