// Concurrency proof for KvIndex (run under TSan in CI): event threads store and evict while
// request threads query. Each worker keeps a pinned prefix that is never removed, so every
// query must see at least that many hits, and never more than the prompt's length.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "infera/common/random.h"
#include "infera/kv/index.h"

namespace infera::kv {
namespace {

constexpr uint32_t kBs = 16;
constexpr uint32_t kWorkers = 80;  // two lock groups
constexpr size_t kPinned = 4;
constexpr size_t kLen = 32;

TEST(KvIndexStressTest, ConcurrentEventsAndQueriesStayConsistent) {
  KvIndex index(KvIndex::Options{kBs, kWorkers});
  std::vector<TokenId> tokens(kLen * kBs);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<TokenId>(i * 7 + 1);
  const std::vector<uint64_t> prompt = seq_hashes(tokens, kBs);
  std::vector<uint64_t> engines(kLen);
  for (size_t i = 0; i < kLen; ++i) engines[i] = 1000 + i;
  for (WorkerId w = 0; w < kWorkers; ++w) {
    index.add_worker(w);
    StoredEvent pin{w, std::nullopt, std::span<const uint64_t>(engines).first(kPinned),
                    std::span<const TokenId>(tokens).first(kPinned * kBs), kBs, Medium::kGpu, {}};
    ASSERT_EQ(index.apply(pin), ApplyResult::kApplied);
  }

  constexpr int kWriterOps = 20000;
  std::atomic<int> writers_done{0};
  auto writer = [&](uint64_t seed, WorkerId first, WorkerId last) {
    Rng rng(seed);
    for (int op = 0; op < kWriterOps; ++op) {
      const WorkerId w = first + static_cast<WorkerId>(rng.uniform(last - first));
      const size_t start = kPinned + rng.uniform(kLen - kPinned);
      if (rng.uniform(2) == 0) {
        const size_t n = 1 + rng.uniform(kLen - start);
        StoredEvent e{w, engines[start - 1], std::span<const uint64_t>(engines).subspan(start, n),
                      std::span<const TokenId>(tokens).subspan(start * kBs, n * kBs), kBs,
                      Medium::kGpu, {}};
        (void)index.apply(e);  // may be an unknown parent after evictions: fine
      } else {
        (void)index.apply(RemovedEvent{w, std::span<const uint64_t>(engines).subspan(start, 1),
                                       Medium::kGpu});
      }
    }
    writers_done.fetch_add(1);
  };
  std::thread w1(writer, 1, 0, kWorkers / 2);
  std::thread w2(writer, 2, kWorkers / 2, kWorkers);

  auto reader = [&] {
    std::vector<uint32_t> hits;
    uint64_t queries = 0;
    while (writers_done.load() < 2 || queries < 100) {
      index.find_overlaps(prompt, hits);
      ++queries;
      ASSERT_EQ(hits.size(), kWorkers);
      for (WorkerId w = 0; w < kWorkers; ++w) {
        ASSERT_GE(hits[w], kPinned);
        ASSERT_LE(hits[w], kLen);
      }
      (void)index.block_count(static_cast<WorkerId>(queries % kWorkers));
    }
  };
  std::thread r1(reader);
  reader();
  r1.join();
  w1.join();
  w2.join();
  const IndexCounters c = index.counters();
  EXPECT_GT(c.blocks_stored, 0u);
  EXPECT_GT(c.blocks_removed, 0u);
}

}  // namespace
}  // namespace infera::kv
