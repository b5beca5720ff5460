#include "infera/common/flat_map.h"

#include <gtest/gtest.h>

#include <unordered_map>
#include <vector>

#include "infera/common/random.h"

namespace infera {
namespace {

TEST(FlatU64MapTest, InsertFindErase) {
  FlatU64Map<int> m;
  EXPECT_EQ(m.find(7), nullptr);
  auto [v, inserted] = m.try_emplace(7, 70);
  EXPECT_TRUE(inserted);
  EXPECT_EQ(*v, 70);
  auto [v2, inserted2] = m.try_emplace(7, 99);
  EXPECT_FALSE(inserted2);
  EXPECT_EQ(*v2, 70);
  EXPECT_TRUE(m.erase(7));
  EXPECT_FALSE(m.erase(7));
  EXPECT_TRUE(m.empty());
}

TEST(FlatU64MapTest, KeyZeroIsAnOrdinaryKey) {
  FlatU64Map<int> m;
  m.try_emplace(0, 5);
  m.try_emplace(1, 6);
  EXPECT_EQ(m.size(), 2u);
  ASSERT_NE(m.find(0), nullptr);
  EXPECT_EQ(*m.find(0), 5);
  EXPECT_TRUE(m.erase(0));
  EXPECT_EQ(m.find(0), nullptr);
  EXPECT_EQ(m.size(), 1u);
}

// Keys whose home is slot `home` of a 16-slot table: home = top 4 bits of key * phi, so take
// the wanted product and multiply by phi's inverse modulo 2^64.
uint64_t key_with_home(uint64_t home, uint64_t n) {
  constexpr uint64_t kPhiInverse = 0xf1de83e19937733dULL;  // * 0x9E3779B97F4A7C15 == 1
  return ((home << 60) | n) * kPhiInverse;
}

TEST(FlatU64MapTest, InsertShiftsARunAcrossTheTableEnd) {
  FlatU64Map<uint64_t> m;
  std::vector<uint64_t> keys;
  // Four keys at home 15 fill slots 15, 0, 1, 2; keys at home 14 then go before them, so each
  // insert shifts the run that wraps around the table's end.
  for (uint64_t n = 1; n <= 4; ++n) keys.push_back(key_with_home(15, n));
  for (uint64_t n = 1; n <= 4; ++n) keys.push_back(key_with_home(14, n));
  for (const uint64_t k : keys) EXPECT_TRUE(m.try_emplace(k, k + 1).second);
  ASSERT_EQ(m.capacity(), 16u);  // still the first table: the homes above hold
  for (const uint64_t k : keys) {
    ASSERT_NE(m.find(k), nullptr);
    EXPECT_EQ(*m.find(k), k + 1);
    EXPECT_FALSE(m.try_emplace(k, 0).second);
  }
  // Erasing from the front of the run shifts the rest back across the end again.
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE(m.erase(keys[i]));
    for (size_t j = i + 1; j < keys.size(); ++j) ASSERT_NE(m.find(keys[j]), nullptr);
  }
  EXPECT_TRUE(m.empty());
}

// Random operations against std::unordered_map: every lookup agrees, through growth and
// backward-shift deletions (by key, by take, by found value), with random and sequential keys;
// for_each gives back the keys inserted (the slots hold codes).
TEST(FlatU64MapTest, MatchesReferenceUnderRandomOperations) {
  for (const bool sequential : {false, true}) {
    FlatU64Map<uint64_t> m;
    std::unordered_map<uint64_t, uint64_t> ref;
    Rng rng(42);
    for (int step = 0; step < 200000; ++step) {
      const uint64_t key = sequential ? rng.uniform(5000) : rng.uniform(5000) * 0x9E3779B97F4A7C15ULL;
      const uint64_t op = rng.uniform(3);
      // Prefetch hints change nothing and read only inside the table (ASan checks), including
      // on the empty table of step 0 and on clusters that wrap around the table's end.
      m.prefetch(key);
      m.prefetch_for_write(key);
      if (op == 0) {
        m.try_emplace(key, key + 1);
        ref.emplace(key, key + 1);
      } else if (op == 1) {
        // The three ways to erase: by key, by key returning the value, by found value.
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

}  // namespace
}  // namespace infera
