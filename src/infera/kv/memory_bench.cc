// What this machine's memory gives a hash table far larger than the caches, so the KV index's
// apply rates can be read against a ceiling (docs/benchmarks.md, routing core notes):
//   - BM_MemoryDependentLoad: latency of one random cache line when each address depends on
//     the previous load (a pointer chase), as a table walk that was not prefetched waits;
//   - BM_MemoryPrefetchedLines: cost per line of independent random lines, prefetched in
//     batches as KvIndex::apply does for an event, then read and written.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "infera/common/bits.h"
#include "infera/common/random.h"

namespace infera {
namespace {

struct alignas(64) Line {
  uint64_t next;
  uint64_t pad[7];
};

void BM_MemoryDependentLoad(benchmark::State& state) {
  const size_t lines = (static_cast<size_t>(state.range(0)) << 20) / sizeof(Line);
  // One random cycle through every line: each load's address is the previous load's value.
  std::vector<uint64_t> order(lines);
  std::iota(order.begin(), order.end(), 0);
  Rng rng(7);
  for (size_t i = lines - 1; i > 0; --i) std::swap(order[i], order[rng.uniform(i + 1)]);
  std::vector<Line> table(lines);
  for (size_t i = 0; i < lines; ++i) table[order[i]].next = order[(i + 1) % lines];
  uint64_t at = order[0];
  constexpr int kSteps = 1024;
  for (auto _ : state) {
    for (int i = 0; i < kSteps; ++i) at = table[at].next;
  }
  benchmark::DoNotOptimize(at);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kSteps);
}
BENCHMARK(BM_MemoryDependentLoad)->Arg(8)->Arg(64)->Unit(benchmark::kMicrosecond);

void BM_MemoryPrefetchedLines(benchmark::State& state) {
  const size_t lines = size_t{64} << 20 >> 6;  // 64 MiB
  const auto batch = static_cast<size_t>(state.range(0));
  std::vector<Line> table(lines);
  Rng rng(9);
  std::vector<uint64_t> picks(1 << 16);
  for (uint64_t& p : picks) p = rng.uniform(lines);
  size_t cursor = 0;
  for (auto _ : state) {
    const uint64_t* at = &picks[cursor];
    for (size_t i = 0; i < batch; ++i) prefetch_line(reinterpret_cast<uintptr_t>(&table[at[i]]));
    for (size_t i = 0; i < batch; ++i) ++table[at[i]].next;
    cursor = (cursor + batch) % (picks.size() - batch);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * batch));
}
BENCHMARK(BM_MemoryPrefetchedLines)->Arg(1)->Arg(16)->Arg(32)->Arg(64);

}  // namespace
}  // namespace infera
