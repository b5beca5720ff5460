#include "infera/kv/index.h"

#include <gtest/gtest.h>

#include <array>
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

// `count` families of `len` blocks each (tokens_for), with their router hashes.
struct Families {
  Families(uint32_t count, size_t len) {
    for (uint32_t f = 0; f < count; ++f) {
      tokens.push_back(tokens_for(f, len));
      hashes.push_back(seq_hashes(tokens.back(), kBs));
    }
  }
  std::vector<std::vector<TokenId>> tokens;
  std::vector<std::vector<uint64_t>> hashes;
};

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
  const Families families(kFamilies, kLen);
  const auto& fams = families.tokens;
  const auto& fam_hashes = families.hashes;
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

// Property: the same over four groups (the query walks them level by level) and every tier:
// random stores and removals on GPU, CPU and disk, and resets, against a naive model of each
// worker's tiers; GPU hits, the lower-tier run after them and its disk-only part all agree.
TEST(KvIndexPropertyTest, AgreesWithNaiveModelOnEveryTierAcrossGroups) {
  constexpr uint32_t kWorkers = 200;  // four groups, the last one partial
  KvIndex index(KvIndex::Options{kBs, kWorkers});
  for (WorkerId w = 0; w < kWorkers; ++w) index.add_worker(w);
  Rng rng(77);
  constexpr uint32_t kFamilies = 6;
  constexpr size_t kLen = 8;
  const Families families(kFamilies, kLen);
  const auto& fams = families.tokens;
  const auto& fam_hashes = families.hashes;
  // Model: per worker and medium, engine hash -> (router hash, stores not yet removed).
  using Tier = std::map<uint64_t, std::pair<uint64_t, int>>;
  std::vector<std::array<Tier, kNumMedia>> model(kWorkers);
  auto engine_of = [](WorkerId w, uint32_t f, size_t b, size_t m) {
    return (uint64_t{w} << 40) ^ (uint64_t{f} << 20) ^ (uint64_t{m} << 16) ^ b ^ 0x5A5A;
  };
  auto held = [&](WorkerId w, size_t m, uint64_t router) {
    for (const auto& [e, entry] : model[w][m]) {
      if (entry.first == router) return true;
    }
    return false;
  };
  for (int step = 0; step < 6000; ++step) {
    const WorkerId w = static_cast<WorkerId>(rng.uniform(kWorkers));
    const uint32_t f = static_cast<uint32_t>(rng.uniform(kFamilies));
    const size_t m = rng.uniform(kNumMedia);
    const uint64_t roll = rng.uniform(20);
    if (roll == 0) {
      index.reset_worker(w);
      for (Tier& tier : model[w]) tier.clear();
    } else if (roll < 13) {
      // A run [first, first + n) whose parent this tier (or the GPU) holds, as engines send.
      const size_t first = rng.uniform(kLen);
      const size_t n = 1 + rng.uniform(kLen - first);
      const uint64_t parent = engine_of(w, f, first - 1, m);
      const bool parent_known = first == 0 || model[w][m].count(parent);
      std::vector<uint64_t> engines;
      for (size_t b = first; b < first + n; ++b) engines.push_back(engine_of(w, f, b, m));
      StoredEvent e;
      e.worker = w;
      if (first > 0) e.parent_engine_hash = parent;
      e.engine_hashes = engines;
      e.token_ids = std::span<const TokenId>(fams[f]).subspan(first * kBs, n * kBs);
      e.block_size = kBs;
      e.medium = static_cast<Medium>(m);
      const ApplyResult r = index.apply(e);
      ASSERT_EQ(r, parent_known ? ApplyResult::kApplied : ApplyResult::kUnknownParent);
      if (!parent_known) continue;
      for (size_t b = first; b < first + n; ++b) {
        auto& entry = model[w][m][engine_of(w, f, b, m)];
        entry.first = fam_hashes[f][b];
        ++entry.second;
      }
    } else {
      const uint64_t engine = engine_of(w, f, rng.uniform(kLen), m);
      index.apply(RemovedEvent{w, std::vector<uint64_t>{engine}, static_cast<Medium>(m)});
      auto it = model[w][m].find(engine);
      if (it != model[w][m].end() && --it->second.second == 0) model[w][m].erase(it);
    }
    if (step % 61 != 0) continue;
    const uint32_t qf = static_cast<uint32_t>(rng.uniform(kFamilies));
    std::vector<uint32_t> gpu, lower, disk;
    index.find_overlaps(fam_hashes[qf], gpu, &lower, &disk);
    for (WorkerId qw = 0; qw < kWorkers; ++qw) {
      const auto& hs = fam_hashes[qf];
      uint32_t g = 0;
      while (g < kLen && held(qw, 0, hs[g])) ++g;
      uint32_t extra = 0, disk_only = 0;
      for (size_t b = g; b < kLen; ++b, ++extra) {
        if (held(qw, 1, hs[b])) continue;
        if (!held(qw, 2, hs[b])) break;
        ++disk_only;
      }
      ASSERT_EQ(gpu[qw], g) << "worker " << qw << " step " << step;
      ASSERT_EQ(lower[qw], extra) << "worker " << qw << " step " << step;
      ASSERT_EQ(disk[qw], disk_only) << "worker " << qw << " step " << step;
    }
  }
}

// --- export_worker / import_worker (a booting replica's copy of a sibling's mirror) ---

// Every answer the index gives about `worker`, for comparing a copy with its original.
struct WorkerView {
  std::vector<uint32_t> gpu, lower, disk;  // per prompt: that worker's hits
  std::vector<std::array<uint32_t, 3>> blocks;  // per block of every prompt, asked alone
  std::array<uint64_t, kNumMedia> counts{};
  bool operator==(const WorkerView&) const = default;
};

WorkerView view_of(const KvIndex& index, WorkerId worker,
                   const std::vector<std::vector<TokenId>>& prompts) {
  WorkerView v;
  std::vector<uint32_t> gpu, lower, disk;
  for (const auto& p : prompts) {
    const std::vector<uint64_t> hashes = seq_hashes(p, kBs);
    index.find_overlaps(hashes, gpu, &lower, &disk);
    v.gpu.push_back(gpu.at(worker));
    v.lower.push_back(lower.at(worker));
    v.disk.push_back(disk.at(worker));
    // Each block alone too: residency that a hole earlier in the prompt would hide.
    for (size_t i = 0; i < hashes.size(); ++i) {
      index.find_overlaps(std::span(hashes).subspan(i, 1), gpu, &lower, &disk);
      v.blocks.push_back({gpu.at(worker), lower.at(worker), disk.at(worker)});
    }
  }
  for (size_t m = 0; m < kNumMedia; ++m) {
    v.counts[m] = index.block_count(worker, static_cast<Medium>(m));
  }
  return v;
}

class KvIndexImportTest : public KvIndexTest {
 protected:
  KvIndexImportTest() : copy_(KvIndex::Options{kBs, 256}) {
    for (WorkerId w = 0; w < 4; ++w) copy_.add_worker(w);
  }

  // Copies worker 0 of index_ into copy_ through a dump.
  void copy_worker0() { ASSERT_TRUE(copy_.import_worker(0, index_.export_worker(0))); }

  void remove_both(std::vector<uint64_t> engines, Medium m = Medium::kGpu) {
    remove(0, engines, m);
    copy_.apply(RemovedEvent{0, engines, m});
  }

  ::testing::AssertionResult same(const std::vector<std::vector<TokenId>>& prompts) {
    const WorkerView a = view_of(index_, 0, prompts);
    const WorkerView b = view_of(copy_, 0, prompts);
    if (a == b) return ::testing::AssertionSuccess();
    ::testing::AssertionResult f = ::testing::AssertionFailure();
    if (a.blocks != b.blocks) f << "single blocks differ; ";
    for (size_t i = 0; i < a.gpu.size(); ++i) {
      f << "prompt " << i << ": gpu " << a.gpu[i] << "/" << b.gpu[i] << " lower " << a.lower[i]
        << "/" << b.lower[i] << " disk " << a.disk[i] << "/" << b.disk[i] << "; ";
    }
    for (size_t m = 0; m < kNumMedia; ++m) {
      f << "count[" << m << "] " << a.counts[m] << "/" << b.counts[m] << " ";
    }
    return f;
  }

  KvIndex copy_;
};

TEST_F(KvIndexImportTest, ImportedMirrorAnswersLikeTheOriginalOnEveryTier) {
  const auto t = tokens_for(1, 8);
  const auto u = tokens_for(2, 4);
  ASSERT_EQ(store(0, t, 0, 3, 1000), ApplyResult::kApplied);                 // GPU 0-2
  ASSERT_EQ(store(0, t, 0, 6, 7000, Medium::kCpu), ApplyResult::kApplied);   // CPU 0-5
  ASSERT_EQ(store(0, t, 0, 8, 9000, Medium::kDisk), ApplyResult::kApplied);  // disk 0-7
  ASSERT_EQ(store(0, u, 0, 4, 3000), ApplyResult::kApplied);
  std::vector<uint64_t> offloaded{3000, 3001, 55555};  // two known, one residency only
  ASSERT_EQ(index_.apply(StoredEvent{0, std::nullopt, offloaded, {}, 0, Medium::kCpu, {}}),
            ApplyResult::kApplied);
  copy_worker0();
  const std::vector<std::vector<TokenId>> prompts{t, u, tokens_for(3, 2)};
  ASSERT_TRUE(same(prompts));
  const WorkerView v = view_of(copy_, 0, prompts);
  EXPECT_EQ(v.gpu[0], 3u);
  EXPECT_EQ(v.lower[0], 5u);  // blocks 3-7 right after the GPU run: 3-5 on CPU, 6-7 on disk
  EXPECT_EQ(v.disk[0], 2u);
  EXPECT_EQ(v.counts[static_cast<size_t>(Medium::kCpu)], 9u);  // 6 with tokens, 3 tokenless
  // Lower tiers evolve alike: the tokenless copies of 3000-3001 carry their router hashes.
  remove_both({3000, 3001, 3002, 3003});
  ASSERT_TRUE(same(prompts));
  EXPECT_EQ(view_of(copy_, 0, prompts).lower[1], 2u);
  remove_both({7003, 3000, 55555}, Medium::kCpu);
  remove_both({9003}, Medium::kDisk);
  ASSERT_TRUE(same(prompts));
  EXPECT_EQ(view_of(copy_, 0, prompts).lower[0], 0u);  // block 3: on neither lower tier now
}

TEST_F(KvIndexImportTest, ImportedDuplicateNeedsTwoRemoves) {
  const auto t = tokens_for(1, 2);
  ASSERT_EQ(store(0, t, 0, 2, 1000), ApplyResult::kApplied);
  ASSERT_EQ(store(0, t, 0, 1, 1000), ApplyResult::kApplied);  // engine hash 1000 stored twice
  const WorkerDump dump = index_.export_worker(0);
  ASSERT_EQ(dump.gpu.size(), 2u);
  for (const WorkerDump::GpuEntry& e : dump.gpu) EXPECT_EQ(e.copies, e.engine == 1000 ? 2u : 1u);
  ASSERT_TRUE(copy_.import_worker(0, dump));
  remove_both({1000});
  ASSERT_TRUE(same({t}));
  EXPECT_EQ(view_of(copy_, 0, {t}).gpu[0], 2u);
  remove_both({1000});
  ASSERT_TRUE(same({t}));
  EXPECT_EQ(view_of(copy_, 0, {t}).gpu[0], 0u);
}

TEST_F(KvIndexImportTest, ImportedAliasKeepsTheRouterHashHeldUntilItsLastName) {
  // The same tokens under two engine hashes (a cache salt): two records, one router hash.
  const auto t = tokens_for(1, 1);
  ASSERT_EQ(store(0, t, 0, 1, 1000), ApplyResult::kApplied);
  ASSERT_EQ(store(0, t, 0, 1, 2000), ApplyResult::kApplied);
  copy_worker0();
  remove_both({2000});
  ASSERT_TRUE(same({t}));
  EXPECT_EQ(view_of(copy_, 0, {t}).gpu[0], 1u);
  remove_both({1000});
  ASSERT_TRUE(same({t}));
  EXPECT_EQ(view_of(copy_, 0, {t}).gpu[0], 0u);
}

TEST_F(KvIndexImportTest, ImportedLowerTierRefsNeedAsManyRemoves) {
  const auto t = tokens_for(1, 2);
  ASSERT_EQ(store(0, t, 0, 2, 7000, Medium::kCpu), ApplyResult::kApplied);
  ASSERT_EQ(store(0, t, 0, 2, 7000, Medium::kCpu), ApplyResult::kApplied);  // refs 2
  ASSERT_EQ(store(0, t, 0, 2, 8000, Medium::kCpu), ApplyResult::kApplied);  // second names
  copy_worker0();
  remove_both({7000, 7001, 8000, 8001}, Medium::kCpu);
  ASSERT_TRUE(same({t}));
  EXPECT_EQ(view_of(copy_, 0, {t}).lower[0], 2u);
  remove_both({8000, 8001}, Medium::kCpu);  // gone already: unknown, nothing changes
  remove_both({7000}, Medium::kCpu);        // the last ref of block 0
  ASSERT_TRUE(same({t}));
  EXPECT_EQ(view_of(copy_, 0, {t}).lower[0], 0u);
  EXPECT_EQ(view_of(copy_, 0, {t}).counts[static_cast<size_t>(Medium::kCpu)], 1u);
}

TEST_F(KvIndexImportTest, ImportReplacesTheWorkersWholeMirrorOnly) {
  const auto t = tokens_for(1, 3);
  const auto u = tokens_for(2, 3);
  ASSERT_EQ(store(0, t, 0, 2, 1000), ApplyResult::kApplied);
  // The copy's worker 0 held other blocks on every tier; worker 1 holds the same hashes.
  const std::vector<uint64_t> e123{1, 2, 3}, e4{4}, e12{1, 2};
  ASSERT_EQ(copy_.apply(StoredEvent{0, std::nullopt, e123, u, kBs, Medium::kGpu, {}}),
            ApplyResult::kApplied);
  ASSERT_EQ(copy_.apply(StoredEvent{0, std::nullopt, e4, {}, 0, Medium::kDisk, {}}),
            ApplyResult::kApplied);
  ASSERT_EQ(
      copy_.apply(StoredEvent{
          1, std::nullopt, e12, std::span<const TokenId>(t).first(2 * kBs), kBs, Medium::kGpu, {}}),
      ApplyResult::kApplied);
  copy_worker0();
  ASSERT_TRUE(same({t, u}));
  std::vector<uint32_t> out;
  copy_.find_overlaps(seq_hashes(t, kBs), out);
  EXPECT_EQ(out[1], 2u);  // worker 1's residency of the same router hashes is untouched
  // Removing the imported blocks leaves worker 1 holding them.
  remove_both({1000, 1001});
  copy_.find_overlaps(seq_hashes(t, kBs), out);
  EXPECT_EQ(out[0], 0u);
  EXPECT_EQ(out[1], 2u);
}

TEST_F(KvIndexImportTest, WorkersNotAddedExportNothingAndRefuseImports) {
  const auto t = tokens_for(1, 2);
  ASSERT_EQ(store(0, t, 0, 2, 1000), ApplyResult::kApplied);
  const WorkerDump dump = index_.export_worker(0);
  EXPECT_EQ(dump.size(), 2u);
  EXPECT_EQ(index_.export_worker(9).size(), 0u);
  EXPECT_FALSE(copy_.import_worker(9, dump));
  EXPECT_FALSE(copy_.import_worker(100000, dump));  // beyond max_workers: refused, no abort
  copy_.add_worker(9);
  std::vector<uint32_t> out;
  copy_.find_overlaps(seq_hashes(t, kBs), out);
  EXPECT_EQ(out[9], 0u);
  EXPECT_TRUE(copy_.import_worker(9, dump));
  copy_.find_overlaps(seq_hashes(t, kBs), out);
  EXPECT_EQ(out[9], 2u);
}

TEST(KvIndexImportPredictedTest, ImportDropsTheWorkersPredictedEntries) {
  ManualClock clock;
  PredictedBlocks predicted(PredictedBlocks::Options{std::chrono::seconds(10), 8, 100}, clock);
  KvIndex index(KvIndex::Options{kBs, 8, &predicted});
  index.add_worker(2);
  const auto hashes = seq_hashes(tokens_for(1, 3), kBs);
  predicted.add(2, hashes, 0);
  ASSERT_EQ(predicted.size(2), 3u);
  ASSERT_TRUE(index.import_worker(2, WorkerDump{}));
  EXPECT_EQ(predicted.size(2), 0u);
}

// Property: a copy taken at any point of a random history (stores with duplicates and second
// names, tokenless offloads, removals on every tier, clears) answers like the original, and
// keeps doing so while both receive the rest of the history.
TEST(KvIndexImportPropertyTest, CopyEvolvesLikeTheOriginal) {
  constexpr uint32_t kFamilies = 6;
  constexpr size_t kLen = 6;
  std::vector<std::vector<TokenId>> fams;
  for (uint32_t f = 0; f < kFamilies; ++f) fams.push_back(tokens_for(f, kLen));
  Rng rng(77);
  for (int round = 0; round < 20; ++round) {
    KvIndex a(KvIndex::Options{kBs, 8});
    KvIndex b(KvIndex::Options{kBs, 8});
    a.add_worker(0);
    b.add_worker(0);
    const int copy_at = static_cast<int>(rng.uniform(300));
    for (int step = 0; step < 400; ++step) {
      if (step == copy_at) {
        ASSERT_TRUE(b.import_worker(0, a.export_worker(0)));
      }
      const uint32_t f = static_cast<uint32_t>(rng.uniform(kFamilies));
      const Medium m = static_cast<Medium>(rng.uniform(kNumMedia));
      // Two engine-hash namespaces per family: the same tokens under two names.
      const uint64_t base = (uint64_t{f} << 8) + (rng.uniform(2) == 0 ? 0 : 0x10000);
      const uint64_t op = rng.uniform(100);  // clears rare: they wipe duplicates and aliases
      std::vector<uint64_t> engines;
      StoredEvent s;
      s.worker = 0;
      s.block_size = kBs;
      s.medium = m;
      if (op < 50) {
        const size_t first = rng.uniform(kLen);
        const size_t n = 1 + rng.uniform(kLen - first);
        for (size_t i = first; i < first + n; ++i) engines.push_back(base + i);
        if (first > 0) s.parent_engine_hash = base + first - 1;
        s.engine_hashes = engines;
        s.token_ids = std::span<const TokenId>(fams[f]).subspan(first * kBs, n * kBs);
      } else if (op < 60 && m != Medium::kGpu) {
        const uint64_t n = 1 + rng.uniform(3);
        for (uint64_t i = 0; i < n; ++i) engines.push_back(base + rng.uniform(kLen + 2));
        s.engine_hashes = engines;  // tokenless offload
      } else if (op < 99) {
        const uint64_t n = 1 + rng.uniform(3);
        for (uint64_t i = 0; i < n; ++i) engines.push_back(base + rng.uniform(kLen));
      }
      const bool copied = step >= copy_at;
      if (op == 99) {
        a.clear_worker(0);
        if (copied) b.clear_worker(0);
      } else if (s.engine_hashes.empty()) {
        const RemovedEvent r{0, engines, m};
        a.apply(r);
        if (copied) b.apply(r);
      } else {
        const ApplyResult ra = a.apply(s);
        if (copied) {
          ASSERT_EQ(b.apply(s), ra) << "round " << round << " step " << step;
        }
      }
      if (!copied || step % 3 != 0) continue;
      ASSERT_EQ(view_of(a, 0, fams), view_of(b, 0, fams)) << "round " << round << " step " << step;
    }
    ASSERT_EQ(view_of(a, 0, fams), view_of(b, 0, fams)) << "round " << round;
  }
}

}  // namespace
}  // namespace infera::kv
