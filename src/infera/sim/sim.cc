#include "infera/sim/sim.h"

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

namespace infera::sim {
namespace {

constexpr Nanos kNever = Nanos(std::numeric_limits<int64_t>::max());

double seconds(Nanos t) { return to_seconds(t); }

// One engine request in flight. A disaggregated request is two in turn: its prefill, then its
// decode, which carries the prefill's worker, id and ticket until the request ends.
struct Live {
  size_t spec = 0;
  routing::Stage stage = routing::Stage::kAggregated;
  uint32_t router = 0;  // the replica that routed it (both stages)
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

// One simulation: the routing core (one router or several replicas), the fleet of engines and
// the discrete-event loop between them. Built in place, neither copied nor moved.
class Simulation {
 public:
  Simulation(const Workload& workload, const SimOptions& options,
             const engine::EngineConfig& engine_config)
      : workload_(workload),
        options_(options),
        engine_config_(engine_config),
        disagg_(disaggregated(options)),
        workers_(fleet_size(options)),
        bs_(engine_config.block_size),
        dependencies_(workload),
        recorder_(workers_),
        poll_every_(from_seconds(options.engine_metrics_interval_s)),
        bypass_(options.router.seed ^ 0x5bd1e995u) {}
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  // The routers for `policy`, then the engines they route among.
  Status build(std::string_view policy) {
    RouterGroupOptions group;
    group.workers = workers_;
    group.block_size = bs_;
    group.routers = options_.routers;
    group.sync = options_.sync_routers;
    group.sync_latency = std::chrono::duration_cast<Nanos>(
        std::chrono::duration<double, std::milli>(options_.router_sync_latency_ms));
    group.active_ttl = from_seconds(options_.active_block_ttl_s);
    group.router = options_.router;
    group.router.policy = std::string(policy);
    group.router.load.engine_poll_interval_s = options_.engine_metrics_interval_s;
    INFERA_ASSIGN_OR_RETURN(routers_, RouterGroup::create(std::move(group), clock_));
    for (uint32_t w = 0; w < workers_; ++w) {
      engine::EngineConfig c = engine_config_;
      c.output_seed = engine_config_.output_seed + w;
      engines_.push_back(std::make_unique<engine::EngineCore>(c, clock_));
      (disagg_ && w >= options_.prefill_workers ? decode_stage_ : first_stage_).push_back(w);
    }
    next_event_.assign(workers_, kNever);
    in_pass_.assign(workers_, false);
    return ok_status();
  }

  // Until no request is waiting and no engine has anything left to do.
  void run() {
    for (size_t i = 0; i < workload_.requests.size(); ++i) {
      if (dependencies_.independent(i)) {
        ready_.emplace(from_seconds(workload_.requests[i].arrival_s), i);
      }
    }
    while (true) {
      Nanos t = ready_.empty() ? kNever : ready_.top().first;
      t = std::min(t, next_engine_event());
      if (auto next = routers_->next_delivery()) t = std::min(t, *next);
      if (t == kNever) break;
      if (poll_every_.count() > 0) t = std::min(t, next_poll_);
      if (t > clock_.now()) clock_.set(t);
      // Engines first, so that the index holds what the fleet cached up to now.
      poll_engines();
      routers_->deliver_due();
      poll_engine_metrics();
      admit_ready();
    }
    sample_index_memory();
  }

  SimResult result() const {
    SimResult result;
    result.report = recorder_.summarize();
    if (disagg_) {
      result.report.prefill_hit_ratio = stage_hit_ratio(engines_, 0, options_.prefill_workers);
      result.report.decode_hit_ratio =
          stage_hit_ratio(engines_, options_.prefill_workers, workers_);
      for (const auto& e : engines_) {
        result.report.kv_pulled_blocks += e->metrics().kv_pulled_blocks;
      }
    }
    std::vector<double> decisions(decision_s_.begin(), decision_s_.end());
    if (!decisions.empty()) {
      result.report.decision_p50_us = quantile(decisions, 0.5) * 1e6;
      result.report.decision_p99_us = quantile(decisions, 0.99) * 1e6;
    }
    result.report.index_bytes_per_worker =
        static_cast<double>(index_peak_bytes_) / static_cast<double>(workers_);
    result.engine_steps = steps_;
    result.sync = routers_->sync_stats();
    return result;
  }

 private:
  void finish(engine::RequestId id, Live& l, double now_s, bool failed) {
    routing::Router& router = routers_->router(l.router);
    router.release(l.ticket);
    if (l.prefill_worker) router.release(l.prefill_ticket);
    const RequestSpec& spec = workload_.requests[l.spec];
    if (failed) {
      recorder_.error();
    } else {
      recorder_.request(l.arrival_s, l.first_s, now_s, static_cast<uint32_t>(spec.prompt.size()),
                        l.cached, l.outputs, l.worker);
      if (l.prefill_worker) recorder_.also_served(*l.prefill_worker);
    }
    now_ready_.clear();
    dependencies_.finished(spec.id, now_ready_);
    for (size_t d : now_ready_) {
      ready_.emplace(from_seconds(now_s + workload_.requests[d].think_s), d);
    }
    live_.erase(id);
  }

  // Routes a stage of `l`'s request among `candidates` and queues it on the chosen engine, as
  // `base` says (hold_kv / remote_kv, max_tokens). Failures end the request.
  void start(Live l, std::span<const kv::WorkerId> candidates, engine::RequestSpec base) {
    const RequestSpec& spec = workload_.requests[l.spec];
    spec.prompt.tokens(tokens_);
    const engine::RequestId id = next_id_++;
    if (options_.hidden_fraction > 0 && bypass_.uniform_double() < options_.hidden_fraction) {
      // Someone else's request: a worker at random, nothing registered with our router.
      l.worker = candidates[bypass_.uniform(candidates.size())];
      base.id = id;
      base.prompt = tokens_;
      auto [it, inserted] = live_.emplace(id, l);
      if (!engines_[l.worker]->add_request(base).ok()) {
        finish(id, it->second, seconds(clock_.now()), true);
      }
      touch(l.worker);
      return;
    }
    kv::compute_seq_hashes(tokens_, bs_, kv::kHashSeed, hashes_);
    // A new request goes to the next replica; a decode stays with its prefill's.
    if (l.stage != routing::Stage::kDecode) l.router = next_router_++ % routers_->size();
    routers_->deliver_due();  // what the other replicas changed by now (latency 0: just now)
    const auto started = std::chrono::steady_clock::now();
    auto routed = routers_->router(l.router).route(
        hashes_, static_cast<uint32_t>(spec.prompt.size()), candidates, l.stage);
    decision_s_.push_back(static_cast<float>(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()));
    if (routed.ok()) {
      l.worker = routed->decision.worker();
      l.ticket = routed->ticket;
      if (l.stage != routing::Stage::kDecode) {
        recorder_.predicted(routed->decision.chosen().cache_hits, routed->decision.request_blocks);
      }
      base.id = id;
      base.prompt = tokens_;
    }
    auto [it, inserted] = live_.emplace(id, l);
    if (!routed.ok() || !engines_[l.worker]->add_request(base).ok()) {
      finish(id, it->second, seconds(clock_.now()), true);
    }
    if (routed.ok()) touch(l.worker);
  }

  // Every step the engines ran up to now: their KV events into the index, their outputs to
  // the requests. Polls the engines that have something due now, in worker order, as a pass
  // over every engine would (an engine with nothing due does nothing when polled); one that
  // becomes due during the pass (a decode queued on it) is polled in this pass when it comes
  // after the one being polled, in the next pass otherwise, again as a full pass would.
  void poll_engines() {
    const Nanos now = clock_.now();
    while (!timeline_.empty() && timeline_.top().first <= now) {
      const auto [at, w] = timeline_.top();
      timeline_.pop();
      if (at != next_event_[w] || in_pass_[w]) continue;  // stale, or already in the pass
      in_pass_[w] = true;
      pass_.push(w);
    }
    while (!pass_.empty()) {
      const uint32_t w = pass_.top();
      pass_.pop();
      in_pass_[w] = false;
      polling_ = w;
      while (engines_[w]->poll(out_)) {
        if (out_.ran_step) ++steps_;
        if (!out_.kv_events.events.empty()) routers_->apply_events(w, out_.kv_events, tally_);
        const double now_s = seconds(out_.ran_step ? out_.end : clock_.now());
        for (const engine::RequestOutput& o : out_.outputs) on_output(w, o, now_s);
      }
      polling_ = kNotPolling;
      touch(w);
    }
  }

  // Engine `w` changed (polled, or a request added or released): its next event time again.
  void touch(uint32_t w) {
    if (w == polling_) return;  // touched once its poll is over
    const std::optional<Nanos> next = engines_[w]->next_event_time();
    next_event_[w] = next ? *next : kNever;
    if (!next) return;
    if (polling_ != kNotPolling && w > polling_ && *next <= clock_.now()) {
      if (!in_pass_[w]) {
        in_pass_[w] = true;
        pass_.push(w);
      }
      return;
    }
    timeline_.emplace(*next, w);
  }

  // The earliest next event time over the engines (kNever: none), from the timeline.
  Nanos next_engine_event() {
    while (!timeline_.empty() && timeline_.top().first != next_event_[timeline_.top().second]) {
      timeline_.pop();  // superseded by a later touch
    }
    return timeline_.empty() ? kNever : timeline_.top().first;
  }

  void on_output(uint32_t w, const engine::RequestOutput& o, double now_s) {
    auto it = live_.find(o.id);
    if (it == live_.end()) return;
    Live& l = it->second;
    if (l.stage == routing::Stage::kPrefill) {
      // The prefill's one token is not the client's; its decode pulls the held blocks now.
      Live decode;
      decode.spec = l.spec;
      decode.stage = routing::Stage::kDecode;
      decode.router = l.router;
      decode.arrival_s = l.arrival_s;
      decode.cached = o.cached_tokens;
      decode.prefill_worker = l.worker;
      decode.prefill_ticket = l.ticket;
      routers_->router(l.router).prefill_done(l.ticket);
      engines_[w]->release_held(o.id);
      touch(w);
      live_.erase(it);
      engine::RequestSpec req;
      req.max_tokens = std::max(1u, workload_.requests[decode.spec].max_tokens);
      req.ignore_eos = true;
      req.remote_kv = true;
      start(decode, decode_stage_, req);
      return;
    }
    if (o.index == 0) {
      routers_->router(l.router).prefill_done(l.ticket);  // the gateway's first byte
      l.first_s = now_s;
      if (!l.prefill_worker) l.cached = o.cached_tokens;
    } else {
      recorder_.inter_token_gap(now_s - l.last_s);
    }
    l.last_s = now_s;
    ++l.outputs;
    if (o.finish != engine::FinishReason::kNone) finish(o.id, l, now_s, false);
  }

  // The engines' own load, as a poll of their /metrics would read it now (every replica
  // polls at the same instants).
  void poll_engine_metrics() {
    if (poll_every_.count() <= 0 || clock_.now() < next_poll_) return;
    for (uint32_t w = 0; w < workers_; ++w) {
      routers_->record_engine_metrics(w, engines_[w]->metrics());
    }
    sample_index_memory();
    next_poll_ = clock_.now() + poll_every_;
  }

  // The index's size, at each poll and at the end: the report keeps the largest.
  void sample_index_memory() {
    index_peak_bytes_ = std::max(index_peak_bytes_, routers_->index_memory_bytes());
  }

  // Starts every request that is ready by now.
  void admit_ready() {
    while (!ready_.empty() && ready_.top().first <= clock_.now()) {
      const size_t i = ready_.top().second;
      ready_.pop();
      Live l;
      l.spec = i;
      l.stage = disagg_ ? routing::Stage::kPrefill : routing::Stage::kAggregated;
      l.arrival_s = seconds(clock_.now());
      engine::RequestSpec req;
      req.ignore_eos = true;
      req.hold_kv = disagg_;
      req.max_tokens = disagg_ ? 1 : std::max(1u, workload_.requests[i].max_tokens);
      start(l, first_stage_, req);
    }
  }

  const Workload& workload_;
  const SimOptions& options_;
  const engine::EngineConfig& engine_config_;
  const bool disagg_;
  const uint32_t workers_;
  const uint32_t bs_;

  ManualClock clock_;
  std::unique_ptr<RouterGroup> routers_;
  uint32_t next_router_ = 0;  // round-robin over the replicas, as a Service spreads requests
  std::vector<std::unique_ptr<engine::EngineCore>> engines_;
  // Candidates per stage: every worker (aggregated), or the prefill and the decode pool.
  std::vector<kv::WorkerId> first_stage_, decode_stage_;
  // Each engine's next_event_time() (kNever: none), refreshed by touch() after every call that
  // changes the engine, and a min-heap of them with superseded entries skipped: a step of the
  // loop reads the heap instead of asking every engine (at 1,000 workers that scan, and a poll
  // of every engine, were over half of the simulator's time).
  static constexpr uint32_t kNotPolling = std::numeric_limits<uint32_t>::max();
  using Due = std::pair<Nanos, uint32_t>;
  std::vector<Nanos> next_event_;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> timeline_;
  // The engines of the pass poll_engines() is making, by worker order, and the one it polls.
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> pass_;
  std::vector<bool> in_pass_;
  uint32_t polling_ = kNotPolling;

  // Requests become ready at their arrival, or after the turn they depend on (+ think time).
  using Ready = std::pair<Nanos, size_t>;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready_;
  Dependencies dependencies_;
  std::vector<size_t> now_ready_;

  RunRecorder recorder_;
  std::unordered_map<engine::RequestId, Live> live_;
  std::vector<uint64_t> hashes_;
  std::vector<uint32_t> tokens_;  // the prompt being routed
  engine::StepOutput out_;
  events::ApplyTally tally_;
  uint64_t steps_ = 0;
  std::vector<float> decision_s_;  // wall-clock time of each Router::route, seconds
  size_t index_peak_bytes_ = 0;
  engine::RequestId next_id_ = 1;
  const Nanos poll_every_;
  Nanos next_poll_{0};
  Rng bypass_;  // which requests, and where, bypass the router
};

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
    return invalid_argument(
        "a disaggregated fleet needs at least one prefill and one decode worker");
  }
  if (fleet_size(options) == 0) return invalid_argument("the fleet needs at least one worker");
  if (options.routers == 0) return invalid_argument("--routers: at least one router");
  if (!(options.router_sync_latency_ms >= 0)) {
    return invalid_argument("--router-sync-latency-ms: at least 0");
  }
  engine::EngineConfig engine_config = options.engine;
  engine_config.enable_kv_events = true;
  INFERA_RETURN_IF_ERROR(engine::validate(engine_config));
  const auto wall_start = std::chrono::steady_clock::now();

  Simulation sim(workload, options, engine_config);
  INFERA_RETURN_IF_ERROR(sim.build(policy));
  sim.run();
  SimResult result = sim.result();
  result.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

}  // namespace infera::sim
