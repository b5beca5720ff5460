#include "infera/bench/sim.h"

#include <chrono>
#include <limits>
#include <memory>
#include <queue>
#include <unordered_map>

#include "infera/common/clock.h"
#include "infera/engine/engine_core.h"
#include "infera/events/applier.h"
#include "infera/kv/active_load.h"
#include "infera/kv/block_hash.h"
#include "infera/kv/index.h"

namespace infera::bench {
namespace {

constexpr Nanos kNever = Nanos(std::numeric_limits<int64_t>::max());

double seconds(Nanos t) { return to_seconds(t); }

struct Live {
  size_t spec = 0;
  uint32_t worker = 0;
  kv::LoadTicket ticket;
  double arrival_s = 0;
  double first_s = -1;
  double last_s = 0;
  uint32_t cached = 0;
  uint32_t outputs = 0;
};

}  // namespace

Result<SimResult> simulate(const Workload& workload, const SimOptions& options,
                           std::string_view policy) {
  if (options.workers == 0) return invalid_argument("the fleet needs at least one worker");
  engine::EngineConfig engine_config = options.engine;
  engine_config.enable_kv_events = true;
  INFERA_RETURN_IF_ERROR(engine::validate(engine_config));
  const auto wall_start = std::chrono::steady_clock::now();

  ManualClock clock;
  const uint32_t bs = engine_config.block_size;
  kv::KvIndex index(kv::KvIndex::Options{bs, options.workers});
  kv::ActiveLoad load(
      kv::ActiveLoad::Options{from_seconds(options.active_block_ttl_s), options.workers}, clock);
  routing::RouterOptions router_options = options.router;
  router_options.policy = std::string(policy);
  INFERA_ASSIGN_OR_RETURN(std::unique_ptr<routing::Router> router,
                          routing::Router::create(router_options, index, load));

  std::vector<std::unique_ptr<engine::EngineCore>> engines;
  std::vector<events::EventApplier> appliers;
  std::vector<kv::WorkerId> all;
  for (uint32_t w = 0; w < options.workers; ++w) {
    index.add_worker(w);
    engine::EngineConfig c = engine_config;
    c.output_seed = engine_config.output_seed + w;
    engines.push_back(std::make_unique<engine::EngineCore>(c, clock));
    appliers.emplace_back(index, w);
    all.push_back(w);
  }

  // Requests become ready at their arrival, or after the turn they depend on (+ think time).
  using Ready = std::pair<Nanos, size_t>;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
  std::unordered_map<uint64_t, std::vector<size_t>> dependents;
  std::unordered_map<uint64_t, size_t> by_id;
  for (size_t i = 0; i < workload.requests.size(); ++i) {
    const RequestSpec& r = workload.requests[i];
    by_id[r.id] = i;
    if (r.after) {
      dependents[*r.after].push_back(i);
    } else {
      ready.emplace(from_seconds(r.arrival_s), i);
    }
  }

  RunRecorder recorder(options.workers);
  std::unordered_map<engine::RequestId, Live> live;
  std::vector<uint64_t> hashes;
  engine::StepOutput out;
  events::ApplyTally tally;
  uint64_t steps = 0;
  engine::RequestId next_id = 1;

  auto finish = [&](engine::RequestId id, Live& l, double now_s, bool failed) {
    router->release(l.ticket);
    const RequestSpec& spec = workload.requests[l.spec];
    if (failed) {
      recorder.error();
    } else {
      recorder.request(l.arrival_s, l.first_s, now_s, static_cast<uint32_t>(spec.prompt.size()),
                       l.cached, l.outputs, l.worker);
    }
    auto deps = dependents.find(spec.id);
    if (deps != dependents.end()) {
      for (size_t d : deps->second) {
        ready.emplace(from_seconds(now_s + workload.requests[d].think_s), d);
      }
    }
    live.erase(id);
  };

  while (true) {
    Nanos t = ready.empty() ? kNever : ready.top().first;
    for (const auto& e : engines) {
      if (auto next = e->next_event_time()) t = std::min(t, *next);
    }
    if (t == kNever) break;
    if (t > clock.now()) clock.set(t);

    // Engines first, so that the index holds what the fleet cached up to now.
    for (uint32_t w = 0; w < options.workers; ++w) {
      while (engines[w]->poll(out)) {
        if (out.ran_step) ++steps;
        if (!out.kv_events.events.empty()) appliers[w].apply(out.kv_events, tally);
        const double now_s = seconds(out.ran_step ? out.end : clock.now());
        for (const engine::RequestOutput& o : out.outputs) {
          auto it = live.find(o.id);
          if (it == live.end()) continue;
          Live& l = it->second;
          if (o.index == 0) {
            l.first_s = now_s;
            l.cached = o.cached_tokens;
          } else {
            recorder.inter_token_gap(now_s - l.last_s);
          }
          l.last_s = now_s;
          ++l.outputs;
          if (o.finish != engine::FinishReason::kNone) finish(o.id, l, now_s, false);
        }
      }
    }

    // Then every request that is ready by now.
    while (!ready.empty() && ready.top().first <= clock.now()) {
      const size_t i = ready.top().second;
      ready.pop();
      const RequestSpec& spec = workload.requests[i];
      kv::compute_seq_hashes(spec.prompt, bs, kv::kHashSeed, hashes);
      auto routed = router->route(hashes, static_cast<uint32_t>(spec.prompt.size()), all);
      if (!routed.ok()) {
        recorder.error();
        continue;
      }
      const uint32_t w = routed->decision.worker();
      recorder.predicted(routed->decision.chosen().cache_hits, routed->decision.request_blocks);
      const engine::RequestId id = next_id++;
      Live l;
      l.spec = i;
      l.worker = w;
      l.ticket = routed->ticket;
      l.arrival_s = seconds(clock.now());
      engine::RequestSpec req;
      req.id = id;
      req.prompt = spec.prompt;
      req.max_tokens = std::max(1u, spec.max_tokens);
      req.ignore_eos = true;
      const Status added = engines[w]->add_request(req);
      auto [it, inserted] = live.emplace(id, l);
      if (!added.ok()) finish(id, it->second, l.arrival_s, true);
    }
  }

  SimResult result;
  result.report = recorder.summarize();
  result.engine_steps = steps;
  result.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

}  // namespace infera::bench
