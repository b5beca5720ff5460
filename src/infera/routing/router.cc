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
  const Inputs in = prepare(seq_hashes, prompt_tokens, candidates, stage, d);
  choose_rows(candidates, in, d, d.table);
  return d;
}

void Router::choose_rows(std::span<const kv::WorkerId> candidates, const Inputs& in, Decision& d,
                         std::vector<Candidate>& table) {
  table.resize(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) fill_row(table[i], candidates[i], in);
  const ScoreRequest request{d.request_blocks, d.overlap_weight, options_.temperature,
                             in.seq_hashes, &options_.load};
  {
    std::lock_guard lock(policy_mu_);
    d.winner = policy_->choose(request, table, rng_);
  }
  for (const Candidate& c : table) d.gated += c.gated ? 1 : 0;
}

Router::Inputs Router::prepare(std::span<const uint64_t> seq_hashes, uint32_t prompt_tokens,
                               std::span<const kv::WorkerId> candidates, Stage stage, Decision& d) {
  d.stage = stage;
  d.policy = std::string(policy_->name());
  d.prompt_tokens = prompt_tokens;
  const uint32_t bs = block_size();
  d.request_blocks = (prompt_tokens + bs - 1) / bs;
  d.overlap_weight = overlap_weight(stage);

  // Cache hits only when the policy reads them and the weight gives them a say; lower tiers
  // only when they earn credit.
  thread_local std::vector<uint32_t> hits, lower, disk;
  Inputs in;
  in.seq_hashes = seq_hashes;
  in.want_hits = policy_->uses_cache() && !seq_hashes.empty();
  const TierCredit& credit = options_.load.tier_credit;
  in.want_lower = in.want_hits && (credit.cpu > 0 || credit.disk > 0);
  if (in.want_hits) index_.find_overlaps(seq_hashes, hits, in.want_lower ? &lower : nullptr, &disk);
  in.hits = &hits;
  in.lower = &lower;
  in.disk = &disk;
  // Engine readings, while fresh: requests the engines hold that we did not route, each taken
  // as one of ours on average (our requests in prefill over the candidates, else this one).
  in.blocks_per_request = d.request_blocks;
  if (signals_) {
    uint64_t blocks = 0, requests = 0;
    for (const kv::WorkerId w : candidates) {
      const kv::WorkerLoad load = load_.load(w);
      blocks += load.prefill_blocks;
      requests += load.prefill_requests;
    }
    if (requests) {
      in.blocks_per_request = static_cast<double>(blocks) / static_cast<double>(requests);
    }
    in.max_age = from_seconds(options_.load.engine_reading_max_age_s());
    in.now = signals_->now();  // once per decision
  }
  return in;
}

// Inline: a decision over a thousand candidates calls it for each, and only two of the row's
// fields are kept there (decide), so the compiler drops the rest.
[[gnu::always_inline]] inline void Router::fill_row(Candidate& c, kv::WorkerId worker,
                                                    const Inputs& in,
                                                    std::optional<uint32_t> predicted_hits) const {
  // Every field but cost and gated (the policy's) is assigned: a row reused across candidates
  // needs no clearing.
  c.worker = worker;
  const bool known = in.want_hits && worker < in.hits->size();
  c.cache_hits = known ? (*in.hits)[worker] : 0;
  c.predicted_hits = 0;
  if (predicted_hits) {
    c.predicted_hits = *predicted_hits;
  } else if (in.want_hits && predicted_) {
    c.predicted_hits = predicted_->extend(worker, in.seq_hashes, c.cache_hits);
  }
  const bool lower = known && in.want_lower && c.predicted_hits == 0;
  c.lower_hits = lower ? (*in.lower)[worker] : 0;
  c.disk_hits = lower ? (*in.disk)[worker] : 0;
  c.credited_hits = c.cache_hits + c.predicted_hits + c.lower_hits == 0
                        ? 0.0
                        : credited_hits(options_.load.tier_credit, c.cache_hits, c.predicted_hits,
                                        c.lower_hits, c.disk_hits);
  c.load = load_.load(worker);
  c.active_blocks = c.load.active_blocks;
  c.active_requests = c.load.active_requests;
  std::optional<kv::EngineReading> reading;
  if (signals_) reading = signals_->fresh_at(worker, in.max_age, in.now);
  c.engine_fresh = reading.has_value();
  c.load_terms = load_terms(options_.load, c.load, c.predicted_hits, reading ? &*reading : nullptr,
                            in.blocks_per_request);
}

Decision Router::decide(std::span<const uint64_t> seq_hashes, uint32_t prompt_tokens,
                        std::span<const kv::WorkerId> candidates, Stage stage) {
  Decision d;
  const Inputs in = prepare(seq_hashes, prompt_tokens, candidates, stage, d);
  if (!policy_->picks_by_columns()) {
    thread_local std::vector<Candidate> table;  // kept: no allocation per decision
    choose_rows(candidates, in, d, table);
    d.table.assign(1, table[d.winner]);
    d.winner = 0;
    return d;
  }
  // Each row is built in one reused record and only its two columns kept, with its predicted
  // hits, so the winner's row is rebuilt exactly as it was scored.
  thread_local ScoreColumns columns;
  thread_local std::vector<uint32_t> predicted;
  columns.resize(candidates.size());
  predicted.resize(candidates.size());
  Candidate c;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (i + kPrefetchAhead < candidates.size()) load_.prefetch(candidates[i + kPrefetchAhead]);
    fill_row(c, candidates[i], in);
    columns.credited[i] = c.credited_hits;
    columns.load[i] = c.load_terms.total;
    predicted[i] = c.predicted_hits;
  }
  const ScoreRequest request{d.request_blocks, d.overlap_weight, options_.temperature,
                             seq_hashes, &options_.load};
  size_t winner = 0;
  {
    std::lock_guard lock(policy_mu_);
    winner = policy_->choose_columns(request, columns, rng_);
  }
  for (const uint8_t gated : columns.gated) d.gated += gated != 0 ? 1u : 0u;
  Candidate& chosen = d.table.emplace_back();
  fill_row(chosen, candidates[winner], in, predicted[winner]);
  chosen.cost = columns.cost[winner];
  chosen.gated = columns.gated[winner] != 0;
  d.winner = 0;
  return d;
}

Result<Router::Routed> Router::route(std::span<const uint64_t> seq_hashes, uint32_t prompt_tokens,
                                     std::span<const kv::WorkerId> candidates, Stage stage) {
  if (candidates.empty()) return unavailable("no worker available");
  std::unique_lock lock(route_mu_);
  Decision d = decide(seq_hashes, prompt_tokens, candidates, stage);
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
