#include "infera/common/flat_map.h"

#include <gtest/gtest.h>

#include <unordered_map>

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

// Random operations against std::unordered_map: every lookup agrees, through growth and
// backward-shift deletions, with both random and sequential keys.
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
      m.prefetch_cluster(key);
      if (op == 0) {
        m.try_emplace(key, key + 1);
        ref.emplace(key, key + 1);
      } else if (op == 1) {
        EXPECT_EQ(m.erase(key), ref.erase(key) == 1);
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
