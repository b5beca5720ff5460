#include "infera/engine/block_pool.h"

#include <gtest/gtest.h>

namespace infera::engine {
namespace {

using Blocks = std::vector<uint32_t>;

TEST(BlockPoolTest, NullBlockIsReservedAndTheRestQueueInIdOrder) {
  const BlockPool pool(6);
  EXPECT_EQ(pool.num_usable(), 5u);
  EXPECT_EQ(pool.num_free(), 5u);
  EXPECT_EQ(pool.free_queue(), (Blocks{1, 2, 3, 4, 5}));
  EXPECT_EQ(pool.usage(), 0.0);
}

TEST(BlockPoolTest, AllocationTakesTheHeadAndReleaseAppendsTheRequestBackwards) {
  BlockPool pool(6);
  Blocks a;
  std::vector<uint64_t> evicted;
  pool.allocate(3, a, evicted);
  EXPECT_EQ(a, (Blocks{1, 2, 3}));
  EXPECT_EQ(pool.free_queue(), (Blocks{4, 5}));
  EXPECT_DOUBLE_EQ(pool.usage(), 3.0 / 5.0);
  pool.release(a);
  // The request's tail block is the first of its blocks to be reused.
  EXPECT_EQ(pool.free_queue(), (Blocks{4, 5, 3, 2, 1}));
  EXPECT_TRUE(evicted.empty());
}

TEST(BlockPoolTest, FreedCachedBlockStaysHitUntilItIsReused) {
  BlockPool pool(4);  // blocks 1..3
  Blocks a;
  std::vector<uint64_t> evicted;
  pool.allocate(2, a, evicted);
  pool.cache(a[0], 100);
  pool.cache(a[1], 101);
  pool.release(a);  // queue: 3, 2(101), 1(100)
  EXPECT_EQ(pool.find_cached(100), 1u);
  EXPECT_EQ(pool.find_cached(101), 2u);
  EXPECT_EQ(pool.num_cached_blocks(), 2u);

  Blocks b;
  pool.allocate(2, b, evicted);  // takes 3 (never cached), then 2: evicts 101
  EXPECT_EQ(b, (Blocks{3, 2}));
  EXPECT_EQ(evicted, (std::vector<uint64_t>{101}));
  EXPECT_EQ(pool.find_cached(101), BlockPool::kNone);
  EXPECT_EQ(pool.find_cached(100), 1u);
}

TEST(BlockPoolTest, TouchingAFreeCachedBlockRefreshesItsRecency) {
  BlockPool pool(4);
  Blocks a;
  std::vector<uint64_t> evicted;
  pool.allocate(3, a, evicted);
  pool.cache(a[0], 10);
  pool.cache(a[1], 11);
  pool.cache(a[2], 12);
  pool.release(a);  // queue: 3(12), 2(11), 1(10)
  const Blocks hit{pool.find_cached(12)};
  pool.touch(hit);  // a new request hits block 3
  EXPECT_EQ(pool.ref_count(3), 1u);
  EXPECT_EQ(pool.free_queue(), (Blocks{2, 1}));
  pool.release(hit);
  EXPECT_EQ(pool.free_queue(), (Blocks{2, 1, 3}));
  Blocks b;
  pool.allocate(3, b, evicted);
  EXPECT_EQ(evicted, (std::vector<uint64_t>{11, 10, 12}));
}

TEST(BlockPoolTest, SharedBlocksReturnToTheQueueWhenTheLastHolderReleases) {
  BlockPool pool(3);
  Blocks a;
  std::vector<uint64_t> evicted;
  pool.allocate(1, a, evicted);
  pool.touch(a);
  EXPECT_EQ(pool.ref_count(a[0]), 2u);
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 1u);
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 2u);
}

TEST(BlockPoolTest, DuplicateHashesAreCachedAndEvictedPerCopy) {
  BlockPool pool(4);
  Blocks a;
  std::vector<uint64_t> evicted;
  pool.allocate(3, a, evicted);
  pool.cache(a[0], 7);
  pool.cache(a[1], 7);
  EXPECT_EQ(pool.num_cached_blocks(), 2u);
  EXPECT_EQ(pool.num_cached_hashes(), 1u);
  EXPECT_EQ(pool.find_cached(7), a[0]);  // the earliest copy
  pool.release(a);                       // queue: 3, 2(7), 1(7)
  Blocks b;
  pool.allocate(2, b, evicted);  // 3, then 2: one copy of 7 leaves
  EXPECT_EQ(evicted, (std::vector<uint64_t>{7}));
  EXPECT_EQ(pool.find_cached(7), 1u);
  EXPECT_EQ(pool.num_cached_hashes(), 1u);
  pool.allocate(1, b, evicted);
  EXPECT_EQ(evicted, (std::vector<uint64_t>{7, 7}));
  EXPECT_EQ(pool.num_cached_hashes(), 0u);
  EXPECT_EQ(pool.num_cached_blocks(), 0u);
}

TEST(BlockPoolTest, ResetIsRefusedWhileBlocksAreHeld) {
  BlockPool pool(4);
  Blocks a;
  std::vector<uint64_t> evicted;
  pool.allocate(1, a, evicted);
  pool.cache(a[0], 5);
  EXPECT_FALSE(pool.reset());
  EXPECT_EQ(pool.find_cached(5), a[0]);
  pool.release(a);
  EXPECT_TRUE(pool.reset());
  EXPECT_EQ(pool.find_cached(5), BlockPool::kNone);
  EXPECT_EQ(pool.num_cached_blocks(), 0u);
  // Reusing a block whose hash was reset evicts nothing.
  pool.allocate(3, a, evicted);
  EXPECT_TRUE(evicted.empty());
}

}  // namespace
}  // namespace infera::engine
