// A full routing decision without tokenization (issue #2 target: p50 <= 25 us): hash an
// 8,192-token prompt, read overlaps from a 1 M-entry index over 64 workers, read active load,
// cost, pick, register the active blocks (and release them, so load stays flat). Issue 20's
// target for the prefill-aware model: p50 <= 15 us. The same over 1,000 workers (issue 24:
// p99 <= 50 us), the same 1 M index entries spread over them; and the same decision starting
// with cold caches, as in the simulator.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>

#include "infera/common/clock.h"
#include "infera/kv/active_load.h"
#include "infera/kv/index.h"
#include "infera/routing/router.h"
#include "tests/support/kv_population.h"

namespace infera::routing {
namespace {

constexpr uint32_t kBs = 16;

// A fleet as the decision benchmarks see it: `num_workers` workers with 1 M index entries spread
// over them, `holders` of which hold the prompt's first `shared_blocks` blocks; 4 requests of 64
// blocks in flight on each worker.
struct Fleet {
  Fleet(bool prefill_aware, uint32_t num_workers, uint32_t shared_blocks, uint32_t prompt_blocks,
        uint32_t holders = 8)
      : options{.policy = "kv-aware",
                .load = default_load_options(prefill_aware ? LoadModel::kPrefillAware
                                                           : LoadModel::kActiveBlocks)},
        predicted(
            kv::PredictedBlocks::Options{from_seconds(options.load.predicted_ttl_s), num_workers},
            clock),
        index(kv::KvIndex::Options{kBs, num_workers, &predicted}),
        load(kv::ActiveLoad::Options{std::chrono::minutes(5), num_workers}, clock) {
    for (kv::WorkerId w = 0; w < num_workers; ++w) {
      index.add_worker(w);
      workers.push_back(w);
    }
    pop = testing::populate(num_workers, std::max<uint64_t>(1000000 / num_workers, shared_blocks),
                            holders, shared_blocks, prompt_blocks, kBs, 42,
                            [&](const kv::StoredEvent& e) { index.apply(e); });
    Rng rng(5);
    for (kv::WorkerId w = 0; w < num_workers; ++w) {
      for (int r = 0; r < 4; ++r) {
        std::vector<uint64_t> hs(64);
        for (uint64_t& h : hs) h = rng.next();
        load.add(w, hs);
      }
    }
  }

  SteadyClock clock;
  RouterOptions options;
  kv::PredictedBlocks predicted;
  kv::KvIndex index;
  kv::ActiveLoad load;
  std::vector<kv::WorkerId> workers;
  testing::KvPopulation pop;
};

// Routes the fleet's prompt once per iteration (registered, then released, so load stays flat)
// and reports p50/p99. `cold`: the prompt is hashed beforehand and 64 MiB are written between
// iterations, as the simulator's engine steps evict the router's data between two decisions;
// otherwise hashing is part of each decision.
void run_decisions(benchmark::State& state, Fleet& fleet, bool cold) {
  auto router = Router::create(fleet.options, fleet.index, fleet.load, &fleet.predicted);
  if (!router.ok()) {
    state.SkipWithError("router");
    return;
  }
  const auto& prompt = fleet.pop.shared_prompt;
  std::vector<uint64_t> hashes;
  if (cold) kv::compute_seq_hashes(prompt, kBs, kv::kHashSeed, hashes);
  std::vector<char> evict(cold ? 64 << 20 : 0);
  std::vector<double> us;
  uint64_t hits = 0;
  char round = 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      std::fill(evict.begin(), evict.end(), ++round);
      state.ResumeTiming();
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (!cold) kv::compute_seq_hashes(prompt, kBs, kv::kHashSeed, hashes);
    auto routed = (*router)->route(hashes, static_cast<uint32_t>(prompt.size()), fleet.workers);
    const auto t1 = std::chrono::steady_clock::now();
    hits += routed->decision.chosen().cache_hits;
    (*router)->release(routed->ticket);
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[us.size() * 99 / 100];
  state.counters["mean_hits"] = static_cast<double>(hits) / static_cast<double>(state.iterations());
}

// Args: policy (0 round-robin, 1 kv-aware (active-blocks), 2 kv-aware prefill-aware with its
// defaults: predicted-on-route on, every decision also writes and reads predicted entries),
// then the number of workers.
void BM_RoutingDecision(benchmark::State& state) {
  Fleet fleet(state.range(0) == 2, static_cast<uint32_t>(state.range(1)), 256, 512);
  if (state.range(0) == 0) fleet.options.policy = "round-robin";
  run_decisions(state, fleet, false);
}
BENCHMARK(BM_RoutingDecision)
    ->ArgNames({"policy", "workers"})
    ->Args({2, 64})
    ->Args({1, 64})
    ->Args({0, 64})
    ->Args({2, 1000})
    ->Args({1, 1000})
    ->Unit(benchmark::kMicrosecond);

// The decision alone, starting cold as in the simulator (run_decisions). The prompt is `blocks`
// long and `holders` workers hold all of it (a conversation's worker or two; a prefix many share),
// so the walk through the index is as long as the prompt. Args: policy (1, 2 as above), workers,
// blocks, holders.
void BM_RoutingDecisionCold(benchmark::State& state) {
  const uint32_t blocks = static_cast<uint32_t>(state.range(2));
  Fleet fleet(state.range(0) == 2, static_cast<uint32_t>(state.range(1)), blocks, blocks,
              static_cast<uint32_t>(state.range(3)));
  run_decisions(state, fleet, true);
}
BENCHMARK(BM_RoutingDecisionCold)
    ->ArgNames({"policy", "workers", "blocks", "holders"})
    ->ArgsProduct({{1, 2}, {8, 1000}, {256, 4096}, {2, 8}})
    ->Iterations(300)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infera::routing

BENCHMARK_MAIN();
