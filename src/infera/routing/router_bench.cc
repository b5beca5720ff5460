// A full routing decision without tokenization (issue #2 target: p50 <= 25 us): hash an
// 8,192-token prompt, read overlaps from a 1 M-entry index over 64 workers, read active load,
// cost, pick, register the active blocks (and release them, so load stays flat). Issue 20's
// target for the prefill-aware model: p50 <= 15 us. The same over 1,000 workers (issue 24:
// p99 <= 50 us), the same 1 M index entries spread over them.
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

// Args: policy (0 round-robin, 1 kv-aware (active-blocks), 2 kv-aware prefill-aware with its
// defaults: predicted-on-route on, every decision also writes and reads predicted entries),
// then the number of workers.
void BM_RoutingDecision(benchmark::State& state) {
  const bool prefill_aware = state.range(0) == 2;
  const uint32_t num_workers = static_cast<uint32_t>(state.range(1));
  SteadyClock clock;
  RouterOptions options{.policy = state.range(0) ? "kv-aware" : "round-robin"};
  if (prefill_aware) options.load = default_load_options(LoadModel::kPrefillAware);
  kv::PredictedBlocks predicted(
      kv::PredictedBlocks::Options{from_seconds(options.load.predicted_ttl_s), num_workers}, clock);
  kv::KvIndex index(kv::KvIndex::Options{kBs, num_workers, &predicted});
  kv::ActiveLoad load(kv::ActiveLoad::Options{std::chrono::minutes(5), num_workers}, clock);
  std::vector<kv::WorkerId> workers;
  for (kv::WorkerId w = 0; w < num_workers; ++w) {
    index.add_worker(w);
    workers.push_back(w);
  }
  const auto pop = testing::populate(num_workers, 1000000 / num_workers, 8, 256, 512, kBs, 42,
                                     [&](const kv::StoredEvent& e) { index.apply(e); });
  // Background load: 4 requests in flight per worker, 64 blocks each.
  Rng rng(5);
  for (kv::WorkerId w = 0; w < num_workers; ++w) {
    for (int r = 0; r < 4; ++r) {
      std::vector<uint64_t> hs(64);
      for (uint64_t& h : hs) h = rng.next();
      load.add(w, hs);
    }
  }
  auto router = Router::create(options, index, load, &predicted);
  if (!router.ok()) {
    state.SkipWithError("router");
    return;
  }
  std::vector<uint64_t> hashes;
  std::vector<double> us;
  uint64_t hits = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    kv::compute_seq_hashes(pop.shared_prompt, kBs, kv::kHashSeed, hashes);
    auto routed = (*router)->route(hashes, static_cast<uint32_t>(pop.shared_prompt.size()), workers);
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
BENCHMARK(BM_RoutingDecision)
    ->ArgNames({"policy", "workers"})
    ->Args({2, 64})
    ->Args({1, 64})
    ->Args({0, 64})
    ->Args({2, 1000})
    ->Args({1, 1000})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infera::routing

BENCHMARK_MAIN();
