#include "infera/kv/index.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "infera/common/random.h"

namespace infera::kv {
namespace {

constexpr uint32_t kBs = 4;  // small blocks keep the tests readable

// Tokens for `blocks` blocks of a sequence identified by `family`; block i of every family with
// the same prefix length is distinct from other families.
std::vector<TokenId> tokens_for(uint32_t family, size_t blocks) {
  std::vector<TokenId> t;
  for (size_t i = 0; i < blocks * kBs; ++i) t.push_back(family * 100000 + static_cast<TokenId>(i));
  return t;
}

class KvIndexTest : public ::testing::Test {
 protected:
  KvIndexTest() : index_(KvIndex::Options{kBs, 256}) {
    for (WorkerId w = 0; w < 4; ++w) index_.add_worker(w);
  }

  // Stores blocks [first, first + n) of `tokens` on `worker` with engine hashes `engine_base+i`
  // (parent = engine hash of block first-1 when first > 0).
  ApplyResult store(WorkerId worker, const std::vector<TokenId>& tokens, size_t first, size_t n,
                    uint64_t engine_base, Medium medium = Medium::kGpu) {
    std::vector<uint64_t> engines;
    for (size_t i = first; i < first + n; ++i) engines.push_back(engine_base + i);
    StoredEvent e;
    e.worker = worker;
    if (first > 0) e.parent_engine_hash = engine_base + first - 1;
    e.engine_hashes = engines;
    e.token_ids = std::span<const TokenId>(tokens).subspan(first * kBs, n * kBs);
    e.block_size = kBs;
    e.medium = medium;
    return index_.apply(e);
  }

  ApplyResult remove(WorkerId worker, std::vector<uint64_t> engines, Medium m = Medium::kGpu) {
    return index_.apply(RemovedEvent{worker, engines, m});
  }

  std::vector<uint32_t> hits(const std::vector<TokenId>& tokens,
                             std::vector<uint32_t>* lower = nullptr) {
    std::vector<uint32_t> out;
    index_.find_overlaps(seq_hashes(tokens, kBs), out, lower);
    return out;
  }

  KvIndex index_;
};

TEST_F(KvIndexTest, StoredRunMatchesLeadingBlocks) {
  const auto t = tokens_for(1, 6);
  ASSERT_EQ(store(0, t, 0, 4, 1000), ApplyResult::kApplied);
  const auto h = hits(t);
  EXPECT_EQ(h[0], 4u);
  EXPECT_EQ(h[1], 0u);
  EXPECT_EQ(index_.block_count(0), 4u);
}

TEST_F(KvIndexTest, ParentChainsAcrossEvents) {
  const auto t = tokens_for(1, 6);
  ASSERT_EQ(store(0, t, 0, 2, 1000), ApplyResult::kApplied);
  ASSERT_EQ(store(0, t, 2, 3, 1000), ApplyResult::kApplied);
  EXPECT_EQ(hits(t)[0], 5u);
}

TEST_F(KvIndexTest, UnknownParentIsRejectedAndNothingApplied) {
  const auto t = tokens_for(1, 6);
  ASSERT_EQ(store(0, t, 2, 3, 1000), ApplyResult::kUnknownParent);
  EXPECT_EQ(index_.block_count(0), 0u);
  EXPECT_EQ(index_.counters().events[static_cast<size_t>(ApplyResult::kUnknownParent)], 1u);
}

TEST_F(KvIndexTest, BlockSizeMismatchIsRejected) {
  const auto t = tokens_for(1, 2);
  std::vector<uint64_t> engines{1};
  StoredEvent e{0, std::nullopt, engines, t, 8, Medium::kGpu, {}};
  EXPECT_EQ(index_.apply(e), ApplyResult::kBlockSizeMismatch);
  EXPECT_EQ(index_.block_count(0), 0u);
  EXPECT_EQ(index_.counters().events[static_cast<size_t>(ApplyResult::kBlockSizeMismatch)], 1u);
}

TEST_F(KvIndexTest, PartialBlockIsRejected) {
  const auto t = tokens_for(1, 2);
  std::vector<uint64_t> engines{1, 2};
  StoredEvent e{0, std::nullopt, engines, std::span<const TokenId>(t).first(7), kBs,
                Medium::kGpu, {}};
  EXPECT_EQ(index_.apply(e), ApplyResult::kPartialBlock);
  EXPECT_EQ(index_.block_count(0), 0u);
}

TEST_F(KvIndexTest, HashCountDisagreeingWithTokensIsMalformed) {
  const auto t = tokens_for(1, 2);
  std::vector<uint64_t> engines{1, 2, 3};
  StoredEvent e{0, std::nullopt, engines, t, kBs, Medium::kGpu, {}};
  EXPECT_EQ(index_.apply(e), ApplyResult::kMalformed);
  StoredEvent empty{0, std::nullopt, {}, {}, kBs, Medium::kGpu, {}};
  EXPECT_EQ(index_.apply(empty), ApplyResult::kMalformed);
  EXPECT_EQ(index_.block_count(0), 0u);
  EXPECT_EQ(index_.counters().events[static_cast<size_t>(ApplyResult::kMalformed)], 2u);
}

TEST_F(KvIndexTest, EventsForUnknownWorkersAreRejected) {
  const auto t = tokens_for(1, 1);
  EXPECT_EQ(store(9, t, 0, 1, 1), ApplyResult::kUnknownWorker);
  EXPECT_EQ(store(100000, t, 0, 1, 1), ApplyResult::kUnknownWorker);
}

TEST_F(KvIndexTest, DuplicateStoreNeedsTwoRemoves) {
  const auto t = tokens_for(1, 1);
  ASSERT_EQ(store(0, t, 0, 1, 1000), ApplyResult::kApplied);
  ASSERT_EQ(store(0, t, 0, 1, 1000), ApplyResult::kApplied);
  EXPECT_EQ(index_.block_count(0), 1u);
  remove(0, {1000});
  EXPECT_EQ(hits(t)[0], 1u);
  remove(0, {1000});
  EXPECT_EQ(hits(t)[0], 0u);
  EXPECT_EQ(index_.block_count(0), 0u);
}

TEST_F(KvIndexTest, AHashNamedTwiceInOneRemovalIsRemovedAsOftenAsItWasStored) {
  const auto t = tokens_for(1, 1);
  ASSERT_EQ(store(0, t, 0, 1, 1000), ApplyResult::kApplied);
  EXPECT_EQ(remove(0, {1000, 1000}), ApplyResult::kApplied);  // stored once: the second is unknown
  EXPECT_EQ(index_.counters().blocks_removed, 1u);
  EXPECT_EQ(index_.counters().removals_unknown, 1u);
  EXPECT_EQ(hits(t)[0], 0u);
  ASSERT_EQ(store(0, t, 0, 1, 1000), ApplyResult::kApplied);
  ASSERT_EQ(store(0, t, 0, 1, 1000), ApplyResult::kApplied);
  EXPECT_EQ(remove(0, {1000, 1000}), ApplyResult::kApplied);  // stored twice: both copies go
  EXPECT_EQ(index_.counters().blocks_removed, 3u);
  EXPECT_EQ(index_.counters().removals_unknown, 1u);
  EXPECT_EQ(hits(t)[0], 0u);
  EXPECT_EQ(index_.block_count(0), 0u);
}

TEST_F(KvIndexTest, TwoEngineHashesForTheSameTokensNeedBothRemoved) {
  // Same tokens under two engine hashes (e.g. a cache salt): the router hash stays held until
  // the last engine copy goes.
  const auto t = tokens_for(1, 1);
  ASSERT_EQ(store(0, t, 0, 1, 1000), ApplyResult::kApplied);
  ASSERT_EQ(store(0, t, 0, 1, 2000), ApplyResult::kApplied);
  remove(0, {1000});
  EXPECT_EQ(hits(t)[0], 1u);
  remove(0, {2000});
  EXPECT_EQ(hits(t)[0], 0u);
}

TEST_F(KvIndexTest, RemovalInTheMiddleEndsTheMatchAtTheHole) {
  const auto t = tokens_for(1, 6);
  ASSERT_EQ(store(0, t, 0, 6, 1000), ApplyResult::kApplied);
  remove(0, {1003});
  EXPECT_EQ(hits(t)[0], 3u);
  EXPECT_EQ(index_.block_count(0), 5u);
}

TEST_F(KvIndexTest, UnknownRemovalsAreCountedNotFatal) {
  const auto t = tokens_for(1, 2);
  ASSERT_EQ(store(0, t, 0, 2, 1000), ApplyResult::kApplied);
  EXPECT_EQ(remove(0, {42, 1001}), ApplyResult::kApplied);
  EXPECT_EQ(index_.counters().removals_unknown, 1u);
  EXPECT_EQ(hits(t)[0], 1u);
}

TEST_F(KvIndexTest, EachWorkerMatchesIndependently) {
  const auto t = tokens_for(1, 8);
  store(0, t, 0, 8, 1000);
  store(1, t, 0, 3, 5000);
  store(2, t, 0, 5, 9000);
  const auto h = hits(t);
  EXPECT_EQ(h[0], 8u);
  EXPECT_EQ(h[1], 3u);
  EXPECT_EQ(h[2], 5u);
  EXPECT_EQ(h[3], 0u);
}

TEST_F(KvIndexTest, ClearedDropsGpuBlocksOnly) {
  const auto t = tokens_for(1, 4);
  store(0, t, 0, 4, 1000);
  store(0, t, 0, 2, 7000, Medium::kCpu);
  index_.clear_worker(0);
  EXPECT_EQ(hits(t)[0], 0u);
  EXPECT_EQ(index_.block_count(0), 0u);
  EXPECT_EQ(index_.block_count(0, Medium::kCpu), 2u);
  // A cleared worker rebuilds from new events.
  store(0, t, 0, 2, 1000);
  EXPECT_EQ(hits(t)[0], 2u);
}

TEST_F(KvIndexTest, ResetDropsEveryTier) {
  const auto t = tokens_for(1, 4);
  store(0, t, 0, 4, 1000);
  store(0, t, 0, 2, 7000, Medium::kCpu);
  index_.reset_worker(0);
  EXPECT_EQ(index_.block_count(0), 0u);
  EXPECT_EQ(index_.block_count(0, Medium::kCpu), 0u);
  EXPECT_EQ(store(0, t, 0, 1, 1000), ApplyResult::kApplied);
}

TEST_F(KvIndexTest, RemovedWorkerIsForgotten) {
  const auto t = tokens_for(1, 4);
  store(0, t, 0, 4, 1000);
  store(1, t, 0, 4, 1000);
  index_.remove_worker(0);
  const auto h = hits(t);
  EXPECT_EQ(h[0], 0u);
  EXPECT_EQ(h[1], 4u);
  EXPECT_EQ(store(0, t, 0, 1, 1000), ApplyResult::kUnknownWorker);
}

TEST_F(KvIndexTest, TiersAreKeptApart) {
  const auto t = tokens_for(1, 6);
  store(0, t, 0, 2, 1000);                 // GPU: blocks 0-1
  store(0, t, 0, 5, 7000, Medium::kCpu);   // CPU: blocks 0-4
  std::vector<uint32_t> lower;
  const auto h = hits(t, &lower);
  EXPECT_EQ(h[0], 2u);      // cache_hits counts GPU only
  EXPECT_EQ(lower[0], 3u);  // blocks 2-4 are on CPU right after the GPU run
  EXPECT_EQ(index_.block_count(0, Medium::kGpu), 2u);
  EXPECT_EQ(index_.block_count(0, Medium::kCpu), 5u);
  EXPECT_EQ(index_.block_count(0, Medium::kDisk), 0u);
  remove(0, {7002}, Medium::kCpu);
  hits(t, &lower);
  EXPECT_EQ(lower[0], 0u);
  EXPECT_EQ(index_.block_count(0, Medium::kGpu), 2u);
}

TEST_F(KvIndexTest, TokenlessOffloadAttachesToKnownBlocks) {
  const auto t = tokens_for(1, 4);
  store(0, t, 0, 2, 1000);  // GPU knows engine hashes 1000, 1001
  std::vector<uint64_t> offloaded{1000, 1001, 55555};  // 55555: never seen with tokens
  StoredEvent e{0, std::nullopt, offloaded, {}, 0, Medium::kCpu, {}};
  ASSERT_EQ(index_.apply(e), ApplyResult::kApplied);
  EXPECT_EQ(index_.block_count(0, Medium::kCpu), 3u);  // residency includes the unknown one
  remove(0, {1000, 1001});                            // evicted from GPU, still on CPU
  std::vector<uint32_t> lower;
  const auto h = hits(t, &lower);
  EXPECT_EQ(h[0], 0u);
  EXPECT_EQ(lower[0], 2u);
}

TEST_F(KvIndexTest, TokenlessGpuStoreIsMalformed) {
  std::vector<uint64_t> engines{1};
  StoredEvent e{0, std::nullopt, engines, {}, kBs, Medium::kGpu, {}};
  EXPECT_EQ(index_.apply(e), ApplyResult::kMalformed);
}

TEST_F(KvIndexTest, StaleWorkerHitsCountAsZero) {
  const auto t = tokens_for(1, 3);
  store(0, t, 0, 3, 1000);
  index_.set_stale(0, true);
  EXPECT_TRUE(index_.is_stale(0));
  EXPECT_EQ(hits(t)[0], 0u);
  index_.set_stale(0, false);
  EXPECT_EQ(hits(t)[0], 3u);
}

TEST_F(KvIndexTest, LoraBlocksMatchOnlyLoraPrompts) {
  const auto t = tokens_for(1, 2);
  std::vector<uint64_t> engines{1, 2};
  StoredEvent e{0, std::nullopt, engines, t, kBs, Medium::kGpu, "my-lora"};
  ASSERT_EQ(index_.apply(e), ApplyResult::kApplied);
  std::vector<uint32_t> out;
  index_.find_overlaps(seq_hashes(t, kBs), out);
  EXPECT_EQ(out[0], 0u);
  index_.find_overlaps(seq_hashes(t, kBs, "my-lora"), out);
  EXPECT_EQ(out[0], 2u);
}

TEST(KvIndexGroupsTest, WorkersBeyondSixtyFourAreIndexed) {
  KvIndex index(KvIndex::Options{kBs, 300});
  const auto t = tokens_for(3, 5);
  for (WorkerId w : {0u, 63u, 64u, 130u, 299u}) index.add_worker(w);
  std::vector<uint64_t> engines{1, 2, 3, 4, 5};
  for (WorkerId w : {63u, 130u, 299u}) {
    StoredEvent e{w, std::nullopt, std::span<const uint64_t>(engines).first(1 + w % 5), 
                  std::span<const TokenId>(t).first((1 + w % 5) * kBs), kBs, Medium::kGpu, {}};
    ASSERT_EQ(index.apply(e), ApplyResult::kApplied);
  }
  std::vector<uint32_t> out;
  index.find_overlaps(seq_hashes(t, kBs), out);
  ASSERT_EQ(out.size(), 300u);
  EXPECT_EQ(out[0], 0u);
  EXPECT_EQ(out[63], 1u + 63 % 5);
  EXPECT_EQ(out[64], 0u);
  EXPECT_EQ(out[130], 1u + 130 % 5);
  EXPECT_EQ(out[299], 1u + 299 % 5);
}

// Property: after thousands of random stores (prefix runs with parents) and removals, every
// worker's overlap for random prompts equals a naive model's (per-worker multiset of router
// hashes, walked block by block).
TEST(KvIndexPropertyTest, AgreesWithNaiveModel) {
  constexpr uint32_t kWorkers = 70;  // two groups
  KvIndex index(KvIndex::Options{kBs, kWorkers});
  for (WorkerId w = 0; w < kWorkers; ++w) index.add_worker(w);
  Rng rng(2024);
  constexpr uint32_t kFamilies = 12;
  constexpr size_t kLen = 10;
  std::vector<std::vector<TokenId>> fams;
  std::vector<std::vector<uint64_t>> fam_hashes;
  for (uint32_t f = 0; f < kFamilies; ++f) {
    fams.push_back(tokens_for(f, kLen));
    fam_hashes.push_back(seq_hashes(fams.back(), kBs));
  }
  // Model: per worker, engine hash -> (router hash, copies).
  std::vector<std::map<uint64_t, std::pair<uint64_t, int>>> model(kWorkers);
  auto engine_of = [](WorkerId w, uint32_t f, size_t b) {
    return (uint64_t{w} << 40) ^ (uint64_t{f} << 20) ^ b ^ 0xABCDEF;
  };
  for (int step = 0; step < 20000; ++step) {
    const WorkerId w = static_cast<WorkerId>(rng.uniform(kWorkers));
    const uint32_t f = static_cast<uint32_t>(rng.uniform(kFamilies));
    if (rng.uniform(3) != 0) {
      // Store blocks [first, first+n) if the parent is held (as a real engine would).
      const size_t first = rng.uniform(kLen);
      const size_t n = 1 + rng.uniform(kLen - first);
      const bool parent_known = first == 0 || model[w].count(engine_of(w, f, first - 1));
      std::vector<uint64_t> engines;
      for (size_t b = first; b < first + n; ++b) engines.push_back(engine_of(w, f, b));
      StoredEvent e;
      e.worker = w;
      if (first > 0) e.parent_engine_hash = engine_of(w, f, first - 1);
      e.engine_hashes = engines;
      e.token_ids = std::span<const TokenId>(fams[f]).subspan(first * kBs, n * kBs);
      e.block_size = kBs;
      const ApplyResult r = index.apply(e);
      ASSERT_EQ(r, parent_known ? ApplyResult::kApplied : ApplyResult::kUnknownParent);
      if (parent_known) {
        for (size_t b = first; b < first + n; ++b) {
          auto& entry = model[w][engine_of(w, f, b)];
          entry.first = fam_hashes[f][b];
          ++entry.second;
        }
      }
    } else {
      const size_t b = rng.uniform(kLen);
      const uint64_t engine = engine_of(w, f, b);
      index.apply(RemovedEvent{w, std::vector<uint64_t>{engine}, Medium::kGpu});
      auto it = model[w].find(engine);
      if (it != model[w].end() && --it->second.second == 0) model[w].erase(it);
    }
    if (step % 97 != 0) continue;
    const uint32_t qf = static_cast<uint32_t>(rng.uniform(kFamilies));
    std::vector<uint32_t> got;
    index.find_overlaps(fam_hashes[qf], got);
    for (WorkerId qw = 0; qw < kWorkers; ++qw) {
      std::set<uint64_t> held;
      for (const auto& [e, entry] : model[qw]) held.insert(entry.first);
      uint32_t expect = 0;
      while (expect < kLen && held.count(fam_hashes[qf][expect])) ++expect;
      ASSERT_EQ(got[qw], expect) << "worker " << qw << " family " << qf << " step " << step;
      ASSERT_EQ(index.block_count(qw), model[qw].size());
    }
  }
}

}  // namespace
}  // namespace infera::kv
