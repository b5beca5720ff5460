#include "infera/routing/router.h"

#include <cmath>

namespace infera::routing {

std::string_view stage_name(Stage stage) {
  switch (stage) {
    case Stage::kAggregated: return "aggregated";
    case Stage::kPrefill: return "prefill";
    case Stage::kDecode: return "decode";
  }
  return "?";
}

std::string_view stage_worker(Stage stage) {
  switch (stage) {
    case Stage::kPrefill: return "prefill worker";
    case Stage::kDecode: return "decode worker";
    case Stage::kAggregated: break;
  }
  return "worker";
}

namespace {

Status validate_weights(const RouterOptions& options) {
  auto valid_weight = [](double w) { return std::isfinite(w) && w >= 0; };
  if (!valid_weight(options.overlap_weight) ||
      (options.prefill_overlap_weight && !valid_weight(*options.prefill_overlap_weight)) ||
      (options.decode_overlap_weight && !valid_weight(*options.decode_overlap_weight))) {
    return invalid_argument("overlap weights must be finite and >= 0");
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<Router>> Router::create(RouterOptions options, kv::KvIndex& index,
                                               kv::ActiveLoad& load, kv::PredictedBlocks* predicted,
                                               const kv::EngineSignals* signals) {
  INFERA_RETURN_IF_ERROR(validate(options.load));
  INFERA_RETURN_IF_ERROR(validate_weights(options));
  if (!std::isfinite(options.temperature) || options.temperature < 0) {
    return invalid_argument("router temperature must be finite and >= 0");
  }
  INFERA_ASSIGN_OR_RETURN(std::unique_ptr<Policy> policy, make_policy(options.policy));
  return std::unique_ptr<Router>(
      new Router(std::move(options), std::move(policy), index, load, predicted, signals));
}

Router::Router(RouterOptions options, std::unique_ptr<Policy> policy, kv::KvIndex& index,
               kv::ActiveLoad& load, kv::PredictedBlocks* predicted,
               const kv::EngineSignals* signals)
    : options_(std::move(options)),
      index_(index),
      load_(load),
      predicted_(predicted && predicted->enabled() ? predicted : nullptr),
      signals_(signals && options_.load.engine_poll_interval_s > 0 &&
                       options_.load.model == LoadModel::kPrefillAware
                   ? signals
                   : nullptr),
      policy_(std::move(policy)),
      rng_(options_.seed) {
  store_weights(options_);
}

void Router::store_weights(const RouterOptions& weights) {
  for (const Stage stage : {Stage::kAggregated, Stage::kPrefill, Stage::kDecode}) {
    stage_weights_[static_cast<size_t>(stage)].store(stage_overlap_weight(weights, stage),
                                                     std::memory_order_relaxed);
  }
}

Status Router::set_overlap_weights(double overlap_weight,
                                   std::optional<double> prefill_overlap_weight,
                                   std::optional<double> decode_overlap_weight) {
  RouterOptions weights;
  weights.overlap_weight = overlap_weight;
  weights.prefill_overlap_weight = prefill_overlap_weight;
  weights.decode_overlap_weight = decode_overlap_weight;
  INFERA_RETURN_IF_ERROR(validate_weights(weights));
  store_weights(weights);
  return ok_status();
}

double stage_overlap_weight(const RouterOptions& options, Stage stage) {
  switch (stage) {
    case Stage::kPrefill:
      return options.prefill_overlap_weight.value_or(options.overlap_weight);
    case Stage::kDecode:
      return options.decode_overlap_weight.value_or(options.overlap_weight);
    case Stage::kAggregated: break;
  }
  return options.overlap_weight;
}

double Router::overlap_weight(Stage stage) const {
  return stage_weights_[static_cast<size_t>(stage)].load(std::memory_order_relaxed);
}

Result<Decision> Router::score(std::span<const uint64_t> seq_hashes, uint32_t prompt_tokens,
                               std::span<const kv::WorkerId> candidates, Stage stage) {
  if (candidates.empty()) return unavailable("no worker available");
  Decision d;
  d.stage = stage;
  d.policy = std::string(policy_->name());
  d.prompt_tokens = prompt_tokens;
  const uint32_t bs = block_size();
  d.request_blocks = (prompt_tokens + bs - 1) / bs;
  d.overlap_weight = overlap_weight(stage);
  d.table.resize(candidates.size());

  // Cache hits only when the policy reads them and the weight gives them a say; lower tiers
  // only when they earn credit.
  thread_local std::vector<uint32_t> hits, lower, disk;
  const bool want_hits = policy_->uses_cache() && !seq_hashes.empty();
  const TierCredit& credit = options_.load.tier_credit;
  const bool want_lower = want_hits && (credit.cpu > 0 || credit.disk > 0);
  if (want_hits) index_.find_overlaps(seq_hashes, hits, want_lower ? &lower : nullptr, &disk);
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = d.table[i];
    c.worker = candidates[i];
    const bool known = want_hits && c.worker < hits.size();
    c.cache_hits = known ? hits[c.worker] : 0;
    if (want_hits && predicted_)
      c.predicted_hits = predicted_->extend(c.worker, seq_hashes, c.cache_hits);
    if (known && want_lower && c.predicted_hits == 0) {
      c.lower_hits = lower[c.worker];
      c.disk_hits = disk[c.worker];
    }
    c.credited_hits =
        credited_hits(credit, c.cache_hits, c.predicted_hits, c.lower_hits, c.disk_hits);
    c.load = load_.load(c.worker);
    c.active_blocks = c.load.active_blocks;
    c.active_requests = c.load.active_requests;
  }
  // Engine readings, while fresh: requests the engines hold that we did not route, each taken
  // as one of ours on average (our requests in prefill over the candidates, else this one).
  double blocks_per_request = d.request_blocks;
  if (signals_) {
    uint64_t blocks = 0, requests = 0;
    for (const Candidate& c : d.table) {
      blocks += c.load.prefill_blocks;
      requests += c.load.prefill_requests;
    }
    if (requests) blocks_per_request = static_cast<double>(blocks) / static_cast<double>(requests);
  }
  const Nanos max_age = from_seconds(options_.load.engine_reading_max_age_s());
  const Nanos now = signals_ ? signals_->now() : Nanos(0);  // once per decision
  for (Candidate& c : d.table) {
    std::optional<kv::EngineReading> reading;
    if (signals_) reading = signals_->fresh_at(c.worker, max_age, now);
    c.engine_fresh = reading.has_value();
    c.load_terms = load_terms(options_.load, c.load, c.predicted_hits,
                              reading ? &*reading : nullptr, blocks_per_request);
  }
  ScoreRequest request{d.request_blocks, d.overlap_weight, options_.temperature, seq_hashes,
                       &options_.load};
  {
    std::lock_guard lock(policy_mu_);
    d.winner = policy_->choose(request, d.table, rng_);
  }
  for (const Candidate& c : d.table) d.gated += c.gated ? 1 : 0;
  return d;
}

Result<Router::Routed> Router::route(std::span<const uint64_t> seq_hashes, uint32_t prompt_tokens,
                                     std::span<const kv::WorkerId> candidates, Stage stage) {
  std::unique_lock lock(route_mu_);
  INFERA_ASSIGN_OR_RETURN(Decision d, score(seq_hashes, prompt_tokens, candidates, stage));
  const Candidate& c = d.chosen();
  // The winner computes what it neither caches, nor is computing already, nor loads back from a
  // lower tier.
  // A decode stage pulls its prompt's blocks from the prefill worker: nothing to compute.
  const uint32_t held = c.cache_hits + c.predicted_hits + c.lower_hits;
  const uint32_t uncached =
      stage == Stage::kDecode || d.request_blocks <= held ? 0 : d.request_blocks - held;
  const kv::LoadTicket ticket = load_.add(c.worker, seq_hashes, uncached);
  if (predicted_) predicted_->add(c.worker, seq_hashes, c.cache_hits);
  lock.unlock();
  if (LoadListener* listener = listener_.load(std::memory_order_acquire)) {
    listener->on_add(ticket, seq_hashes, uncached, c.cache_hits);
  }
  return Routed{std::move(d), ticket};
}

void Router::prefill_done(kv::LoadTicket ticket) {
  if (!load_.prefill_done(ticket)) return;
  if (LoadListener* listener = listener_.load(std::memory_order_acquire)) {
    listener->on_prefill_done(ticket);
  }
}

void Router::release(kv::LoadTicket ticket) {
  if (!load_.release(ticket)) return;
  if (LoadListener* listener = listener_.load(std::memory_order_acquire)) {
    listener->on_release(ticket);
  }
}

}  // namespace infera::routing
