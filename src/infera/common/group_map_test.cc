#include "infera/common/group_map.h"

#include <gtest/gtest.h>

#include <unordered_map>
#include <vector>

#include "infera/common/bits.h"
#include "infera/common/random.h"

namespace infera {
namespace {

TEST(GroupU64MapTest, InsertFindEraseAndTheZeroKey) {
  GroupU64Map<int> m;
  EXPECT_EQ(m.find(7), nullptr);
  EXPECT_FALSE(m.erase(7));
  auto [v, inserted] = m.try_emplace(7, 70);
  EXPECT_TRUE(inserted);
  EXPECT_EQ(*v, 70);
  EXPECT_FALSE(m.try_emplace(7, 99).second);
  EXPECT_EQ(*m.find(7), 70);
  m.try_emplace(0, 5);
  EXPECT_EQ(m.size(), 2u);
  int out = 0;
  EXPECT_TRUE(m.take(0, out));
  EXPECT_EQ(out, 5);
  EXPECT_EQ(m.find(0), nullptr);
  EXPECT_TRUE(m.erase(7));
  EXPECT_TRUE(m.empty());
}

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

// Random operations against std::unordered_map, with random and sequential keys: every
// lookup agrees through growth, tombstones and rebuilds; the three ways to erase agree;
// for_each gives back the keys inserted.
TEST(GroupU64MapTest, MatchesReferenceUnderRandomOperations) {
  for (const bool sequential : {false, true}) {
    GroupU64Map<uint64_t> m;
    std::unordered_map<uint64_t, uint64_t> ref;
    Rng rng(7);
    for (int step = 0; step < 200000; ++step) {
      const uint64_t key = sequential ? rng.uniform(5000) : rng.uniform(5000) * 0x2545F4914F6CDD1DULL;
      m.prefetch(key);
      const uint64_t op = rng.uniform(3);
      if (op == 0) {
        const bool inserted = m.try_emplace(key, key + 1).second;
        EXPECT_EQ(inserted, ref.emplace(key, key + 1).second);
      } else if (op == 1) {
        auto it = ref.find(key);
        uint64_t taken = 0;
        if (step % 3 == 0) {
          EXPECT_EQ(m.erase(key), it != ref.end());
        } else if (step % 3 == 1) {
          ASSERT_EQ(m.take(key, taken), it != ref.end());
          if (it != ref.end()) {
            EXPECT_EQ(taken, it->second);
          }
        } else {
          uint64_t* found = m.find(key);
          ASSERT_EQ(found != nullptr, it != ref.end());
          if (found) m.erase_found(found);
        }
        if (it != ref.end()) ref.erase(it);
      } else {
        const uint64_t* got = m.find(key);
        auto it = ref.find(key);
        ASSERT_EQ(got != nullptr, it != ref.end());
        if (got) {
          EXPECT_EQ(*got, it->second);
        }
      }
      ASSERT_EQ(m.size(), ref.size());
    }
    size_t visited = 0;
    m.for_each([&](uint64_t k, uint64_t& v) {
      ++visited;
      EXPECT_EQ(ref.at(k), v);
    });
    EXPECT_EQ(visited, ref.size());
  }
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
