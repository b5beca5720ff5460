#include "infera/common/group_map.h"

#include <gtest/gtest.h>

#include <vector>

#include "infera/common/bits.h"
#include "infera/common/random.h"

namespace infera {
namespace {

// Keys whose codes are 1..n all have home group 0, whatever the group count: the first 16
// fill group 0 and the rest go on to group 1.
TEST(GroupU64MapTest, AnEraseFromAFullGroupLeavesATombstoneThatKeepsLaterKeysFindable) {
  GroupU64Map<uint64_t> m;
  std::vector<uint64_t> keys;
  for (uint64_t code = 1; code <= 20; ++code) keys.push_back(key_of(code));
  for (const uint64_t k : keys) ASSERT_TRUE(m.try_emplace(k, k + 1).second);
  ASSERT_EQ(m.tombstones(), 0u);
  // Group 0 is full: erasing from it must not end the probe of the 4 keys in group 1.
  EXPECT_TRUE(m.erase(keys[3]));
  EXPECT_EQ(m.tombstones(), 1u);
  for (size_t i = 16; i < keys.size(); ++i) {
    ASSERT_NE(m.find(keys[i]), nullptr) << i;
    EXPECT_EQ(*m.find(keys[i]), keys[i] + 1);
  }
  EXPECT_EQ(m.find(keys[3]), nullptr);
  // A new key of the same home group takes the tombstone's slot.
  EXPECT_TRUE(m.try_emplace(key_of(21), 1).second);
  EXPECT_EQ(m.tombstones(), 0u);
  // Group 1 has empty slots: erasing there leaves none.
  EXPECT_TRUE(m.erase(keys[18]));
  EXPECT_EQ(m.tombstones(), 0u);
}

// Endless churn at a constant size (a worker's cache at steady state: one block stored, one
// evicted) must not grow the table: tombstones are reused or rebuilt away.
TEST(GroupU64MapTest, ChurnAtAConstantSizeKeepsTheTableSmall) {
  GroupU64Map<uint64_t> m;
  Rng rng(11);
  std::vector<uint64_t> live;
  for (int i = 0; i < 1000; ++i) {
    live.push_back(rng.next() | 1);
    m.try_emplace(live.back(), 1);
  }
  const size_t start_capacity = m.capacity();
  for (int step = 0; step < 500000; ++step) {
    const size_t victim = rng.uniform(live.size());
    ASSERT_TRUE(m.erase(live[victim]));
    live[victim] = rng.next() | 1;
    ASSERT_TRUE(m.try_emplace(live[victim], 1).second);
  }
  EXPECT_EQ(m.size(), 1000u);
  EXPECT_LE(m.capacity(), start_capacity * 5 / 4 + 16);
  for (const uint64_t k : live) ASSERT_NE(m.find(k), nullptr);
}

}  // namespace
}  // namespace infera
