#include "infera/events/applier.h"

#include <gtest/gtest.h>

#include "infera/kv/block_hash.h"

namespace infera::events {
namespace {

constexpr uint32_t kBs = 4;

std::vector<uint32_t> tokens(uint32_t base, size_t blocks) {
  std::vector<uint32_t> t;
  for (size_t i = 0; i < blocks * kBs; ++i) t.push_back(base + static_cast<uint32_t>(i));
  return t;
}

BlockStored stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent,
                   std::vector<uint32_t> toks) {
  BlockStored s;
  s.block_hashes = std::move(hashes);
  s.parent_block_hash = parent;
  s.token_ids = std::move(toks);
  s.block_size = kBs;
  s.medium = "GPU";
  return s;
}

BlockRemoved removed(std::vector<uint64_t> hashes, std::optional<std::string> medium = "GPU",
                     std::optional<int64_t> group = std::nullopt) {
  BlockRemoved r;
  r.block_hashes = std::move(hashes);
  r.medium = std::move(medium);
  r.group_idx = group;
  return r;
}

class EventApplierTest : public ::testing::Test {
 protected:
  EventApplierTest() : index_(kv::KvIndex::Options{kBs, 64}), applier_(index_, 3) {
    index_.add_worker(3);
  }

  uint32_t hits(const std::vector<uint32_t>& toks, const std::string& lora = {}) {
    std::vector<uint32_t> out;
    index_.find_overlaps(kv::seq_hashes(toks, kBs, lora), out);
    return out.at(3);
  }

  void apply(const Event& e) { applier_.apply(e, tally_); }

  kv::KvIndex index_;
  EventApplier applier_;
  ApplyTally tally_;
};

TEST(MediumTest, GpuCpuAndEverythingElseIsALowerTier) {
  EXPECT_EQ(medium_of(std::nullopt), kv::Medium::kGpu);
  EXPECT_EQ(medium_of("GPU"), kv::Medium::kGpu);
  EXPECT_EQ(medium_of("gpu"), kv::Medium::kGpu);
  EXPECT_EQ(medium_of("CPU"), kv::Medium::kCpu);
  EXPECT_EQ(medium_of("CPU_TIER1"), kv::Medium::kCpu);
  for (const char* m : {"CPU_TIER2", "DISK", "SSD", "STORAGE", "FS", "OBJ", "", "GPU2"}) {
    EXPECT_EQ(medium_of(std::string(m)), kv::Medium::kDisk) << m;
  }
}

TEST(MediumTest, FullAttentionKinds) {
  EXPECT_TRUE(is_full_attention(std::nullopt));
  EXPECT_TRUE(is_full_attention("full_attention"));
  EXPECT_FALSE(is_full_attention("sliding_window"));
  EXPECT_FALSE(is_full_attention("mamba"));
  EXPECT_FALSE(is_full_attention("chunked_local_attention"));
}

TEST_F(EventApplierTest, StoresRemovesAndClearsReachTheIndex) {
  const auto t = tokens(100, 3);
  apply(stored({11, 12}, std::nullopt, {t.begin(), t.begin() + 2 * kBs}));
  apply(stored({13}, 12, {t.begin() + 2 * kBs, t.end()}));
  EXPECT_EQ(hits(t), 3u);
  EXPECT_EQ(index_.block_count(3), 3u);
  apply(removed({12}));
  EXPECT_EQ(hits(t), 1u);  // the hole ends the match
  apply(AllBlocksCleared{});
  EXPECT_EQ(index_.block_count(3), 0u);
  EXPECT_EQ(tally_.events_applied, 4u);
  EXPECT_EQ(tally_.blocks_stored, 3u);
  EXPECT_EQ(tally_.blocks_removed, 1u);
  EXPECT_EQ(tally_.clears, 1u);
  EXPECT_EQ(tally_.rejected_total(), 0u);
}

TEST_F(EventApplierTest, RejectionsAreCountedByReason) {
  apply(stored({21}, 999, tokens(0, 1)));  // unknown parent
  BlockStored wrong_size = stored({22}, std::nullopt, tokens(0, 2));
  wrong_size.block_size = 8;
  apply(wrong_size);
  BlockStored partial = stored({23}, std::nullopt, tokens(0, 1));
  partial.token_ids.pop_back();
  apply(partial);
  EXPECT_EQ(tally_.rejected[static_cast<size_t>(kv::ApplyResult::kUnknownParent)], 1u);
  EXPECT_EQ(tally_.rejected[static_cast<size_t>(kv::ApplyResult::kBlockSizeMismatch)], 1u);
  EXPECT_EQ(tally_.rejected[static_cast<size_t>(kv::ApplyResult::kPartialBlock)], 1u);
  EXPECT_EQ(tally_.events_applied, 0u);
}

TEST_F(EventApplierTest, SlidingWindowGroupNeverTouchesTheMirror) {
  // A hybrid model stores the same hashes in a full-attention group 0 and a sliding-window
  // group 1, and the sliding window drops its old blocks early.
  const auto t = tokens(500, 2);
  BlockStored full = stored({31, 32}, std::nullopt, t);
  full.group_idx = 0;
  full.kv_cache_spec_kind = "full_attention";
  BlockStored sliding = full;
  sliding.group_idx = 1;
  sliding.kv_cache_spec_kind = "sliding_window";
  apply(full);
  apply(sliding);
  apply(removed({31}, "GPU", 1));
  EXPECT_EQ(hits(t), 2u);
  EXPECT_EQ(tally_.other_group_events, 2u);
  apply(removed({31}, "GPU", 0));
  EXPECT_EQ(hits(t), 0u);
}

TEST_F(EventApplierTest, MainGroupIsTheFirstFullAttentionGroup) {
  // Group 0 is mamba here; group 1 carries full attention and becomes the main group.
  const auto t = tokens(900, 1);
  BlockStored mamba = stored({41}, std::nullopt, t);
  mamba.group_idx = 0;
  mamba.kv_cache_spec_kind = "mamba";
  BlockStored full = mamba;
  full.group_idx = 1;
  full.kv_cache_spec_kind = "full_attention";
  BlockStored second_full = full;  // a second full-attention group: same blocks, not mirrored twice
  second_full.group_idx = 2;
  apply(mamba);
  apply(full);
  apply(second_full);
  EXPECT_EQ(hits(t), 1u);
  apply(removed({41}, "GPU", 0));
  apply(removed({41}, "GPU", 2));
  EXPECT_EQ(hits(t), 1u);
  EXPECT_EQ(tally_.other_group_events, 4u);
  apply(removed({41}, "GPU", 1));
  EXPECT_EQ(hits(t), 0u);

  // After an engine restart the groups are learned again.
  applier_.reset();
  BlockStored again = stored({42}, std::nullopt, t);
  again.group_idx = 2;
  apply(again);
  EXPECT_EQ(hits(t), 1u);
}

TEST_F(EventApplierTest, ASeededMainGroupIgnoresSlidingWindowRemovalsFromTheStart) {
  // A sibling replica learned group 0; a stream seeded from its copy starts with group 0, so the
  // sliding window's removal, which arrives before any new store, leaves the mirror alone.
  const auto t = tokens(600, 1);
  BlockStored full = stored({61}, std::nullopt, t);
  full.group_idx = 0;
  full.kv_cache_spec_kind = "full_attention";
  apply(full);
  EXPECT_EQ(applier_.main_group(), std::optional<int64_t>(0));
  applier_.reset();
  EXPECT_EQ(applier_.main_group(), std::nullopt);
  applier_.set_main_group(0);
  apply(removed({61}, "GPU", 1));
  EXPECT_EQ(hits(t), 1u);
  apply(removed({61}, "GPU", 0));
  EXPECT_EQ(hits(t), 0u);
}

TEST_F(EventApplierTest, TokenlessLowerTierStoresAttachToKnownBlocks) {
  const auto t = tokens(700, 2);
  apply(stored({51, 52}, std::nullopt, t));
  BlockStored offload;
  offload.block_hashes = {51, 52, 99};  // 99: never seen on GPU, residency only
  offload.medium = "CPU";
  apply(offload);
  EXPECT_EQ(index_.block_count(3, kv::Medium::kCpu), 3u);
  apply(removed({51, 52}));
  std::vector<uint32_t> gpu;
  std::vector<uint32_t> lower;
  index_.find_overlaps(kv::seq_hashes(t, kBs), gpu, &lower);
  EXPECT_EQ(gpu.at(3), 0u);
  EXPECT_EQ(lower.at(3), 2u);  // both blocks are still on the CPU tier
  apply(removed({51, 52, 99}, "CPU"));
  EXPECT_EQ(index_.block_count(3, kv::Medium::kCpu), 0u);
  EXPECT_EQ(tally_.rejected_total(), 0u);
}

TEST_F(EventApplierTest, UnknownMediumIsALowerTierNeverGpu) {
  const auto t = tokens(800, 1);
  BlockStored s = stored({61}, std::nullopt, t);
  s.medium = "OBJ";
  apply(s);
  EXPECT_EQ(hits(t), 0u);
  EXPECT_EQ(index_.block_count(3, kv::Medium::kDisk), 1u);
}

TEST_F(EventApplierTest, LoraNameSeedsTheRouterHash) {
  const auto t = tokens(300, 1);
  BlockStored s = stored({71}, std::nullopt, t);
  s.lora_name = "adapter";
  apply(s);
  EXPECT_EQ(hits(t), 0u);
  EXPECT_EQ(hits(t, "adapter"), 1u);
}

// Older vLLM names an adapter by id only: its blocks must not pass for the base model's, nor
// for another adapter's.
TEST_F(EventApplierTest, AnAdapterNamedOnlyByIdIsNeverTheBaseModel) {
  const auto t = tokens(400, 2);
  BlockStored s = stored({81, 82}, std::nullopt, t);
  s.lora_id = 7;
  apply(s);
  EXPECT_EQ(tally_.events_applied, 1u);
  EXPECT_EQ(index_.block_count(3), 2u);
  EXPECT_EQ(hits(t), 0u);
  EXPECT_EQ(hits(t, "7"), 0u);
  // Its blocks are still the worker's: they chain and are removed as usual.
  BlockStored child = stored({83}, 82, tokens(500, 1));
  child.lora_id = 7;
  apply(child);
  EXPECT_EQ(tally_.events_applied, 2u);
  apply(removed({81, 82, 83}));
  EXPECT_EQ(index_.block_count(3), 0u);
  // The same tokens stored without an adapter are the base model's.
  apply(stored({91, 92}, std::nullopt, t));
  EXPECT_EQ(hits(t), 2u);
}

}  // namespace
}  // namespace infera::events
