#include "infera/kv/predicted_blocks.h"

#include <gtest/gtest.h>

#include "infera/kv/index.h"

namespace infera::kv {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class PredictedBlocksTest : public ::testing::Test {
 protected:
  PredictedBlocksTest() : predicted_(PredictedBlocks::Options{seconds(2), 4, 1000}, clock_) {}
  ManualClock clock_;
  PredictedBlocks predicted_;
  const std::vector<uint64_t> prompt_{11, 12, 13, 14, 15};
};

TEST_F(PredictedBlocksTest, RoutedBlocksArePredictedFromTheConfirmedRun) {
  predicted_.add(0, prompt_, 2);  // blocks 0-1 were cached already
  EXPECT_EQ(predicted_.extend(0, prompt_, 2), 3u);
  EXPECT_EQ(predicted_.extend(0, prompt_, 0), 0u)
      << "block 0 is not predicted: the run starts at 2";
  EXPECT_EQ(predicted_.extend(1, prompt_, 0), 0u) << "another worker";
  EXPECT_EQ(predicted_.size(0), 3u);
}

TEST_F(PredictedBlocksTest, EntriesExpireAfterTheTtl) {
  predicted_.add(0, prompt_, 0);
  clock_.advance(milliseconds(1999));
  EXPECT_EQ(predicted_.extend(0, prompt_, 0), 5u);
  clock_.advance(milliseconds(1));
  EXPECT_EQ(predicted_.extend(0, prompt_, 0), 0u);
  predicted_.add(1, prompt_, 0);  // an add sweeps its own worker only
  EXPECT_EQ(predicted_.size(0), 5u);
  predicted_.add(0, std::vector<uint64_t>{99}, 0);
  EXPECT_EQ(predicted_.size(0), 1u) << "swept on the next add";
  EXPECT_EQ(predicted_.expired_total(), 5u);
}

TEST_F(PredictedBlocksTest, ARouteRefreshesTheTtl) {
  predicted_.add(0, prompt_, 0);
  clock_.advance(milliseconds(1500));
  predicted_.add(0, std::span<const uint64_t>(prompt_).first(3), 0);
  clock_.advance(milliseconds(1000));
  EXPECT_EQ(predicted_.extend(0, prompt_, 0), 3u) << "blocks 0-2 refreshed, 3-4 expired";
}

TEST_F(PredictedBlocksTest, ConfirmedBlocksAreNoLongerPredicted) {
  predicted_.add(0, prompt_, 0);
  predicted_.confirm(0, std::span<const uint64_t>(prompt_).first(2));
  EXPECT_EQ(predicted_.size(0), 3u);
  EXPECT_EQ(predicted_.confirmed_total(), 2u);
  EXPECT_EQ(predicted_.extend(0, prompt_, 2), 3u);
}

TEST_F(PredictedBlocksTest, EachWorkerIsBounded) {
  std::vector<uint64_t> many(1500);
  for (size_t i = 0; i < many.size(); ++i) many[i] = 1000 + i;
  predicted_.add(2, many, 0);
  EXPECT_EQ(predicted_.size(2), 1000u);
  EXPECT_EQ(predicted_.extend(2, many, 500), 1000u) << "the oldest gave way";
}

TEST_F(PredictedBlocksTest, OffAddsNothing) {
  PredictedBlocks off(PredictedBlocks::Options{Nanos(0), 4}, clock_);
  EXPECT_FALSE(off.enabled());
  off.add(0, prompt_, 0);
  EXPECT_EQ(off.size(0), 0u);
  EXPECT_EQ(off.extend(0, prompt_, 0), 0u);
}

// The index erases predicted entries as BlockStored confirms them, and forgets a worker's
// predictions when the worker leaves or restarts.
TEST_F(PredictedBlocksTest, TheIndexConfirmsWhatItStores) {
  constexpr uint32_t kBlockSize = 4;
  KvIndex index(KvIndex::Options{kBlockSize, 4, &predicted_});
  index.add_worker(0);
  std::vector<TokenId> tokens(3 * kBlockSize);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<TokenId>(100 + i);
  const std::vector<uint64_t> hashes = seq_hashes(tokens, kBlockSize);
  predicted_.add(0, hashes, 0);
  const std::vector<uint64_t> engine{7, 8};
  ASSERT_EQ(index.apply(StoredEvent{0,
                                    std::nullopt,
                                    engine,
                                    std::span<const TokenId>(tokens).first(2 * kBlockSize),
                                    kBlockSize,
                                    Medium::kGpu,
                                    {}}),
            ApplyResult::kApplied);
  EXPECT_EQ(predicted_.size(0), 1u) << "blocks 0-1 confirmed, block 2 still predicted";
  EXPECT_EQ(predicted_.extend(0, hashes, 2), 1u);
  index.reset_worker(0);
  EXPECT_EQ(predicted_.size(0), 0u);
}

}  // namespace
}  // namespace infera::kv
