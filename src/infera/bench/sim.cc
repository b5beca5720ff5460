#include "infera/bench/sim.h"

#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <queue>
#include <unordered_map>

#include "infera/common/clock.h"
#include "infera/common/random.h"
#include "infera/engine/engine_core.h"
#include "infera/events/applier.h"
#include "infera/kv/active_load.h"
#include "infera/kv/block_hash.h"
#include "infera/kv/engine_signals.h"
#include "infera/kv/index.h"
#include "infera/kv/predicted_blocks.h"

namespace infera::bench {
namespace {

constexpr Nanos kNever = Nanos(std::numeric_limits<int64_t>::max());

double seconds(Nanos t) { return to_seconds(t); }

// One engine request in flight. A disaggregated request is two in turn: its prefill, then its
// decode, which carries the prefill's worker, id and ticket until the request ends.
struct Live {
  size_t spec = 0;
  routing::Stage stage = routing::Stage::kAggregated;
  uint32_t worker = 0;
  kv::LoadTicket ticket;
  double arrival_s = 0;
  double first_s = -1;
  double last_s = 0;
  uint32_t cached = 0;
  uint32_t outputs = 0;
  // Decode stage: the prefill that ran the prompt (its worker and ticket; cached = its hits).
  std::optional<uint32_t> prefill_worker;
  kv::LoadTicket prefill_ticket;
};

// The engines' prefix-cache counters summed over [first, last): hits / queries.
double stage_hit_ratio(const std::vector<std::unique_ptr<engine::EngineCore>>& engines,
                       uint32_t first, uint32_t last) {
  uint64_t hits = 0, queries = 0;
  for (uint32_t w = first; w < last; ++w) {
    const engine::EngineMetrics m = engines[w]->metrics();
    hits += m.prefix_cache_hits;
    queries += m.prefix_cache_queries;
  }
  return queries ? static_cast<double>(hits) / static_cast<double>(queries) : 0;
}

}  // namespace

uint32_t fleet_size(const SimOptions& options) {
  return disaggregated(options) ? options.prefill_workers + options.decode_workers
                                : options.workers;
}

bool disaggregated(const SimOptions& options) {
  return options.prefill_workers > 0 || options.decode_workers > 0;
}

Result<SimResult> simulate(const Workload& workload, const SimOptions& options,
                           std::string_view policy) {
  const bool disagg = disaggregated(options);
  if (disagg && (options.prefill_workers == 0 || options.decode_workers == 0)) {
    return invalid_argument("a disaggregated fleet needs at least one prefill and one decode worker");
  }
  const uint32_t workers = fleet_size(options);
  if (workers == 0) return invalid_argument("the fleet needs at least one worker");
  engine::EngineConfig engine_config = options.engine;
  engine_config.enable_kv_events = true;
  INFERA_RETURN_IF_ERROR(engine::validate(engine_config));
  const auto wall_start = std::chrono::steady_clock::now();

  ManualClock clock;
  const uint32_t bs = engine_config.block_size;
  kv::PredictedBlocks predicted(
      kv::PredictedBlocks::Options{from_seconds(options.router.load.predicted_ttl_s), workers},
      clock);
  kv::KvIndex index(kv::KvIndex::Options{bs, workers, &predicted});
  kv::ActiveLoad load(kv::ActiveLoad::Options{from_seconds(options.active_block_ttl_s), workers},
                      clock);
  kv::EngineSignals signals(workers, clock);
  routing::RouterOptions router_options = options.router;
  router_options.policy = std::string(policy);
  router_options.load.engine_poll_interval_s = options.engine_metrics_interval_s;
  INFERA_ASSIGN_OR_RETURN(
      std::unique_ptr<routing::Router> router,
      routing::Router::create(router_options, index, load, &predicted, &signals));

  std::vector<std::unique_ptr<engine::EngineCore>> engines;
  std::vector<events::EventApplier> appliers;
  // Candidates per stage: every worker (aggregated), or the prefill and the decode pool.
  std::vector<kv::WorkerId> first_stage, decode_stage;
  for (uint32_t w = 0; w < workers; ++w) {
    index.add_worker(w);
    engine::EngineConfig c = engine_config;
    c.output_seed = engine_config.output_seed + w;
    engines.push_back(std::make_unique<engine::EngineCore>(c, clock));
    appliers.emplace_back(index, w);
    (disagg && w >= options.prefill_workers ? decode_stage : first_stage).push_back(w);
  }
  const routing::Stage first_kind = disagg ? routing::Stage::kPrefill : routing::Stage::kAggregated;

  // Requests become ready at their arrival, or after the turn they depend on (+ think time).
  using Ready = std::pair<Nanos, size_t>;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
  Dependencies dependencies(workload);
  std::vector<size_t> now_ready;
  for (size_t i = 0; i < workload.requests.size(); ++i) {
    if (dependencies.independent(i)) ready.emplace(from_seconds(workload.requests[i].arrival_s), i);
  }

  RunRecorder recorder(workers);
  std::unordered_map<engine::RequestId, Live> live;
  std::vector<uint64_t> hashes;
  std::vector<uint32_t> tokens;  // the prompt being routed
  engine::StepOutput out;
  events::ApplyTally tally;
  uint64_t steps = 0;
  engine::RequestId next_id = 1;
  const Nanos poll_every = from_seconds(options.engine_metrics_interval_s);
  Nanos next_poll{0};
  Rng bypass(router_options.seed ^ 0x5bd1e995u);  // which requests, and where, bypass the router

  auto finish = [&](engine::RequestId id, Live& l, double now_s, bool failed) {
    router->release(l.ticket);
    if (l.prefill_worker) router->release(l.prefill_ticket);
    const RequestSpec& spec = workload.requests[l.spec];
    if (failed) {
      recorder.error();
    } else {
      recorder.request(l.arrival_s, l.first_s, now_s, static_cast<uint32_t>(spec.prompt.size()),
                       l.cached, l.outputs, l.worker);
      if (l.prefill_worker) recorder.also_served(*l.prefill_worker);
    }
    now_ready.clear();
    dependencies.finished(spec.id, now_ready);
    for (size_t d : now_ready) ready.emplace(from_seconds(now_s + workload.requests[d].think_s), d);
    live.erase(id);
  };

  // Routes a stage of `l`'s request among `candidates` and queues it on the chosen engine, as
  // `base` says (hold_kv / remote_kv, max_tokens). Failures end the request.
  auto start = [&](Live l, std::span<const kv::WorkerId> candidates, engine::RequestSpec base) {
    const RequestSpec& spec = workload.requests[l.spec];
    spec.prompt.tokens(tokens);
    const engine::RequestId id = next_id++;
    if (options.hidden_fraction > 0 && bypass.uniform_double() < options.hidden_fraction) {
      // Someone else's request: a worker at random, nothing registered with our router.
      l.worker = candidates[bypass.uniform(candidates.size())];
      base.id = id;
      base.prompt = tokens;
      auto [it, inserted] = live.emplace(id, l);
      if (!engines[l.worker]->add_request(base).ok())
        finish(id, it->second, seconds(clock.now()), true);
      return;
    }
    kv::compute_seq_hashes(tokens, bs, kv::kHashSeed, hashes);
    auto routed =
        router->route(hashes, static_cast<uint32_t>(spec.prompt.size()), candidates, l.stage);
    if (routed.ok()) {
      l.worker = routed->decision.worker();
      l.ticket = routed->ticket;
      if (l.stage != routing::Stage::kDecode) {
        recorder.predicted(routed->decision.chosen().cache_hits, routed->decision.request_blocks);
      }
      base.id = id;
      base.prompt = tokens;
    }
    auto [it, inserted] = live.emplace(id, l);
    if (!routed.ok() || !engines[l.worker]->add_request(base).ok()) {
      finish(id, it->second, seconds(clock.now()), true);
    }
  };

  while (true) {
    Nanos t = ready.empty() ? kNever : ready.top().first;
    for (const auto& e : engines) {
      if (auto next = e->next_event_time()) t = std::min(t, *next);
    }
    if (t == kNever) break;
    if (poll_every.count() > 0) t = std::min(t, next_poll);
    if (t > clock.now()) clock.set(t);

    // Engines first, so that the index holds what the fleet cached up to now.
    for (uint32_t w = 0; w < workers; ++w) {
      while (engines[w]->poll(out)) {
        if (out.ran_step) ++steps;
        if (!out.kv_events.events.empty()) appliers[w].apply(out.kv_events, tally);
        const double now_s = seconds(out.ran_step ? out.end : clock.now());
        for (const engine::RequestOutput& o : out.outputs) {
          auto it = live.find(o.id);
          if (it == live.end()) continue;
          Live& l = it->second;
          if (l.stage == routing::Stage::kPrefill) {
            // The prefill's one token is not the client's; its decode pulls the held blocks now.
            Live decode;
            decode.spec = l.spec;
            decode.stage = routing::Stage::kDecode;
            decode.arrival_s = l.arrival_s;
            decode.cached = o.cached_tokens;
            decode.prefill_worker = l.worker;
            decode.prefill_ticket = l.ticket;
            router->prefill_done(l.ticket);
            engines[w]->release_held(o.id);
            live.erase(it);
            engine::RequestSpec req;
            req.max_tokens = std::max(1u, workload.requests[decode.spec].max_tokens);
            req.ignore_eos = true;
            req.remote_kv = true;
            start(decode, decode_stage, req);
            continue;
          }
          if (o.index == 0) {
            router->prefill_done(l.ticket);  // what the gateway sees as the first byte
            l.first_s = now_s;
            if (!l.prefill_worker) l.cached = o.cached_tokens;
          } else {
            recorder.inter_token_gap(now_s - l.last_s);
          }
          l.last_s = now_s;
          ++l.outputs;
          if (o.finish != engine::FinishReason::kNone) finish(o.id, l, now_s, false);
        }
      }
    }

    // The engines' own load, as a poll of their /metrics would read it now.
    if (poll_every.count() > 0 && clock.now() >= next_poll) {
      for (uint32_t w = 0; w < workers; ++w) {
        const engine::EngineMetrics m = engines[w]->metrics();
        const kv::WorkerLoad ours = load.load(w);
        signals.record(w, m.num_waiting, m.num_running, m.kv_cache_usage, ours.active_requests,
                       ours.prefill_requests);
      }
      next_poll = clock.now() + poll_every;
    }

    // Then every request that is ready by now.
    while (!ready.empty() && ready.top().first <= clock.now()) {
      const size_t i = ready.top().second;
      ready.pop();
      Live l;
      l.spec = i;
      l.stage = first_kind;
      l.arrival_s = seconds(clock.now());
      engine::RequestSpec req;
      req.ignore_eos = true;
      req.hold_kv = disagg;
      req.max_tokens = disagg ? 1 : std::max(1u, workload.requests[i].max_tokens);
      start(l, first_stage, req);
    }
  }

  SimResult result;
  result.report = recorder.summarize();
  if (disagg) {
    result.report.prefill_hit_ratio = stage_hit_ratio(engines, 0, options.prefill_workers);
    result.report.decode_hit_ratio = stage_hit_ratio(engines, options.prefill_workers, workers);
    for (const auto& e : engines) result.report.kv_pulled_blocks += e->metrics().kv_pulled_blocks;
  }
  result.engine_steps = steps;
  result.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

}  // namespace infera::bench
