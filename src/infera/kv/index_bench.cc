// KvIndex benchmarks (issue #2 targets), each beside a naive baseline in the same run:
//   - apply Stored / Removed events at 1 M resident (worker, block) entries over 64 workers;
//   - overlap query of a 512-block prompt, 8 workers holding a shared 256-block prefix (p50/p99);
//   - memory per resident entry at 1 M entries;
//   - mixed: one thread applying events at full speed while another queries.
// The baseline is what one writes first: std::unordered_map of std::set of workers, plus a
// per-worker std::unordered_map from engine hash to router hash.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <unordered_map>

#include "infera/kv/index.h"
#include "tests/support/kv_population.h"

namespace infera::kv {
namespace {

constexpr uint32_t kBs = 16;
constexpr uint32_t kWorkers = 64;
constexpr uint64_t kBlocksPerWorker = 15625;  // x 64 = 1,000,000 resident entries
constexpr uint32_t kSharedWorkers = 8;
constexpr uint32_t kSharedBlocks = 256;
constexpr uint32_t kPromptBlocks = 512;
constexpr uint32_t kPoolEvents = 4096;  // 16 blocks each
constexpr uint32_t kRun = 16;

class NaiveIndex {
 public:
  void add_worker(WorkerId w) {
    if (engines_.size() <= w) engines_.resize(w + 1);
  }
  void apply(const StoredEvent& e) {
    auto& mine = engines_[e.worker];
    uint64_t prev = 0;
    bool chained = false;
    if (e.parent_engine_hash) {
      auto it = mine.find(*e.parent_engine_hash);
      if (it == mine.end()) return;
      prev = it->second;
      chained = true;
    }
    for (size_t i = 0; i < e.engine_hashes.size(); ++i) {
      const uint64_t local = local_block_hash(e.token_ids.subspan(i * kBs, kBs), kHashSeed);
      const uint64_t router = chained ? chain_block_hash(prev, local, kHashSeed) : local;
      chained = true;
      prev = router;
      mine[e.engine_hashes[i]] = router;
      holders_[router].insert(e.worker);
    }
  }
  void apply(const RemovedEvent& e) {
    auto& mine = engines_[e.worker];
    for (const uint64_t h : e.engine_hashes) {
      auto it = mine.find(h);
      if (it == mine.end()) continue;
      auto hit = holders_.find(it->second);
      if (hit != holders_.end()) {
        hit->second.erase(e.worker);
        if (hit->second.empty()) holders_.erase(hit);
      }
      mine.erase(it);
    }
  }
  void find_overlaps(std::span<const uint64_t> hashes, std::vector<uint32_t>& hits) const {
    hits.assign(engines_.size(), 0);
    std::set<WorkerId> active;
    for (WorkerId w = 0; w < engines_.size(); ++w) active.insert(w);
    for (size_t i = 0; i < hashes.size() && !active.empty(); ++i) {
      auto it = holders_.find(hashes[i]);
      std::set<WorkerId> next;
      for (const WorkerId w : active) {
        if (it != holders_.end() && it->second.count(w)) {
          next.insert(w);
        } else {
          hits[w] = static_cast<uint32_t>(i);
        }
      }
      active.swap(next);
    }
    for (const WorkerId w : active) hits[w] = static_cast<uint32_t>(hashes.size());
  }

 private:
  std::unordered_map<uint64_t, std::set<WorkerId>> holders_;
  std::vector<std::unordered_map<uint64_t, uint64_t>> engines_;
};

// A pool of fresh 16-block events (new tokens, new engine hashes) spread over the workers.
struct EventPool {
  std::vector<TokenId> tokens;
  std::vector<uint64_t> engines;
  std::vector<StoredEvent> stored;
  std::vector<RemovedEvent> removed;

  explicit EventPool(uint64_t seed) {
    Rng rng(seed);
    tokens.resize(static_cast<size_t>(kPoolEvents) * kRun * kBs);
    for (TokenId& t : tokens) t = static_cast<TokenId>(rng.uniform(150000));
    engines.resize(static_cast<size_t>(kPoolEvents) * kRun);
    for (uint64_t& h : engines) h = rng.next();  // random, as engines send (see kv_population.h)
    for (uint32_t e = 0; e < kPoolEvents; ++e) {
      const WorkerId w = e % kWorkers;
      auto hs = std::span<const uint64_t>(engines).subspan(static_cast<size_t>(e) * kRun, kRun);
      auto ts = std::span<const TokenId>(tokens).subspan(static_cast<size_t>(e) * kRun * kBs,
                                                         static_cast<size_t>(kRun) * kBs);
      stored.push_back(StoredEvent{w, std::nullopt, hs, ts, kBs, Medium::kGpu, {}});
      removed.push_back(RemovedEvent{w, hs, Medium::kGpu});
    }
  }
};

template <typename Index>
struct Loaded {
  std::unique_ptr<Index> index;
  testing::KvPopulation pop;
  std::vector<uint64_t> prompt_hashes;
};

template <typename Index>
std::unique_ptr<Index> make_index();
template <>
std::unique_ptr<KvIndex> make_index<KvIndex>() {
  return std::make_unique<KvIndex>(KvIndex::Options{kBs, kWorkers});
}
template <>
std::unique_ptr<NaiveIndex> make_index<NaiveIndex>() {
  return std::make_unique<NaiveIndex>();
}

template <typename Index>
Loaded<Index> load() {
  Loaded<Index> l;
  l.index = make_index<Index>();
  for (WorkerId w = 0; w < kWorkers; ++w) l.index->add_worker(w);
  l.pop = testing::populate(kWorkers, kBlocksPerWorker, kSharedWorkers, kSharedBlocks,
                            kPromptBlocks, kBs, 42,
                            [&](const StoredEvent& e) { l.index->apply(e); });
  l.prompt_hashes = seq_hashes(l.pop.shared_prompt, kBs);
  return l;
}

template <typename Index>
Loaded<Index>& shared() {
  static Loaded<Index> l = load<Index>();
  return l;
}

template <typename Index>
void BM_ApplyStored(benchmark::State& state) {
  Loaded<Index>& l = shared<Index>();
  EventPool pool(1);
  size_t i = 0;
  for (auto _ : state) {
    if (i == pool.stored.size()) {
      state.PauseTiming();
      for (const auto& r : pool.removed) l.index->apply(r);
      i = 0;
      state.ResumeTiming();
    }
    l.index->apply(pool.stored[i++]);
  }
  for (size_t j = 0; j < i; ++j) l.index->apply(pool.removed[j]);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kRun);
  state.counters["blocks_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * kRun), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ApplyStored<KvIndex>)->Name("BM_ApplyStored/infera");
BENCHMARK(BM_ApplyStored<NaiveIndex>)->Name("BM_ApplyStored/naive");

template <typename Index>
void BM_ApplyRemoved(benchmark::State& state) {
  Loaded<Index>& l = shared<Index>();
  EventPool pool(2);
  for (const auto& s : pool.stored) l.index->apply(s);
  size_t i = 0;
  for (auto _ : state) {
    if (i == pool.removed.size()) {
      state.PauseTiming();
      for (const auto& s : pool.stored) l.index->apply(s);
      i = 0;
      state.ResumeTiming();
    }
    l.index->apply(pool.removed[i++]);
  }
  for (size_t j = i; j < pool.removed.size(); ++j) l.index->apply(pool.removed[j]);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kRun);
  state.counters["blocks_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * kRun), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ApplyRemoved<KvIndex>)->Name("BM_ApplyRemoved/infera");
BENCHMARK(BM_ApplyRemoved<NaiveIndex>)->Name("BM_ApplyRemoved/naive");

void report_percentiles(benchmark::State& state, std::vector<double>& us) {
  if (us.empty()) return;
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
}

template <typename Index>
void BM_Overlap(benchmark::State& state) {
  Loaded<Index>& l = shared<Index>();
  std::vector<uint32_t> hits;
  std::vector<double> us;
  us.reserve(1 << 20);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    l.index->find_overlaps(l.prompt_hashes, hits);
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(hits.data());
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  if (hits[0] != kSharedBlocks || hits[kSharedWorkers] != 0) state.SkipWithError("wrong overlap");
  report_percentiles(state, us);
}
BENCHMARK(BM_Overlap<KvIndex>)->Name("BM_Overlap512/infera")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Overlap<NaiveIndex>)->Name("BM_Overlap512/naive")->Unit(benchmark::kMicrosecond);

template <typename Index>
void BM_Memory(benchmark::State& state) {
  for (auto _ : state) {
    malloc_trim(0);
    // Heap in use: small blocks (uordblks) plus mmap-backed large blocks (hblkhd).
    auto in_use = [] {
      const struct mallinfo2 mi = mallinfo2();
      return mi.uordblks + mi.hblkhd;
    };
    const size_t before = in_use();
    Loaded<Index> l = load<Index>();
    const size_t after = in_use();
    // Subtract what the population helper keeps (the prompt) so only the index is counted.
    const size_t prompt_bytes = l.pop.shared_prompt.capacity() * sizeof(TokenId) +
                                l.prompt_hashes.capacity() * sizeof(uint64_t);
    state.counters["entries"] = static_cast<double>(l.pop.entries);
    state.counters["bytes_per_entry"] =
        static_cast<double>(after - before - prompt_bytes) / static_cast<double>(l.pop.entries);
    if constexpr (std::is_same_v<Index, KvIndex>) {
      state.counters["table_bytes_per_entry"] =
          static_cast<double>(l.index->memory_bytes()) / static_cast<double>(l.pop.entries);
    }
  }
}
BENCHMARK(BM_Memory<KvIndex>)->Name("BM_Memory1M/infera")->Iterations(1)->Unit(benchmark::kMillisecond);

// The tables at steady state, where every worker's cache is full and each block stored
// evicts an old one: the pool's events stored and removed as a sliding window (256 events,
// 4,096 blocks, in flight), 32 passes of 65,536 blocks over the 64 workers, so about 2 M
// inserts and 2 M erases leave 1 M resident entries. Tombstones and rebuilds show here.
void BM_MemoryAfterChurn(benchmark::State& state) {
  constexpr size_t kWindow = 256;
  for (auto _ : state) {
    Loaded<KvIndex> l = load<KvIndex>();
    EventPool pool(3);
    const size_t n = pool.stored.size();
    for (int round = 0; round < 32; ++round) {
      for (size_t i = 0; i < n + kWindow; ++i) {
        if (i < n) l.index->apply(pool.stored[i]);
        if (i >= kWindow) l.index->apply(pool.removed[i - kWindow]);
      }
    }
    state.counters["entries"] = static_cast<double>(l.pop.entries);
    state.counters["table_bytes_per_entry"] =
        static_cast<double>(l.index->memory_bytes()) / static_cast<double>(l.pop.entries);
  }
}
BENCHMARK(BM_MemoryAfterChurn)->Name("BM_Memory1MAfterChurn/infera")->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Memory<NaiveIndex>)->Name("BM_Memory1M/naive")->Iterations(1)->Unit(benchmark::kMillisecond);

// Two threads: a writer applying Stored then Removed events as fast as it can, while the
// benchmark thread queries. Reports queries/s (items) and the writer's blocks/s.
template <typename Index>
void BM_Mixed(benchmark::State& state) {
  Loaded<Index>& l = shared<Index>();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> written{0};
  // The naive index has no synchronisation of its own: guard it with one mutex, as its
  // author would.
  std::mutex naive_mu;
  constexpr bool kNeedsLock = !std::is_same_v<Index, KvIndex>;
  std::thread writer([&] {
    EventPool pool(3);
    uint64_t blocks = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      for (size_t i = 0; i < pool.stored.size() && !stop.load(std::memory_order_relaxed); ++i) {
        if constexpr (kNeedsLock) {
          std::lock_guard g(naive_mu);
          l.index->apply(pool.stored[i]);
        } else {
          l.index->apply(pool.stored[i]);
        }
        blocks += kRun;
      }
      for (const auto& r : pool.removed) {
        if constexpr (kNeedsLock) {
          std::lock_guard g(naive_mu);
          l.index->apply(r);
        } else {
          l.index->apply(r);
        }
        blocks += kRun;
      }
    }
    written.store(blocks);
  });
  std::vector<uint32_t> hits;
  std::vector<double> us;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    if constexpr (kNeedsLock) {
      std::lock_guard g(naive_mu);
      l.index->find_overlaps(l.prompt_hashes, hits);
    } else {
      l.index->find_overlaps(l.prompt_hashes, hits);
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                     .count());
  }
  stop.store(true);
  writer.join();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["queries_per_s"] = static_cast<double>(state.iterations()) / secs;
  state.counters["writer_blocks_per_s"] = static_cast<double>(written.load()) / secs;
  report_percentiles(state, us);
}
BENCHMARK(BM_Mixed<KvIndex>)->Name("BM_Mixed/infera")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Mixed<NaiveIndex>)->Name("BM_Mixed/naive")->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infera::kv

BENCHMARK_MAIN();
