// What FlatU64Map (Robin Hood) and GroupU64Map (Swiss) promise alike, tested on both.
#include <gtest/gtest.h>

#include <unordered_map>

#include "infera/common/flat_map.h"
#include "infera/common/group_map.h"
#include "infera/common/random.h"

namespace infera {
namespace {

template <typename Map>
class U64MapTest : public ::testing::Test {};
using Maps = ::testing::Types<FlatU64Map<uint64_t>, GroupU64Map<uint64_t>>;
TYPED_TEST_SUITE(U64MapTest, Maps);

TYPED_TEST(U64MapTest, InsertFindEraseAndTheZeroKey) {
  TypeParam m;
  EXPECT_EQ(m.find(7), nullptr);
  EXPECT_FALSE(m.erase(7));
  auto [v, inserted] = m.try_emplace(7, 70);
  EXPECT_TRUE(inserted);
  EXPECT_EQ(*v, 70u);
  EXPECT_FALSE(m.try_emplace(7, 99).second);
  EXPECT_EQ(*m.find(7), 70u);
  // The key 0 marks empty slots inside the tables: it is an ordinary key all the same.
  EXPECT_TRUE(m.try_emplace(0, 5).second);
  EXPECT_EQ(m.size(), 2u);
  uint64_t out = 0;
  EXPECT_TRUE(m.take(0, out));
  EXPECT_EQ(out, 5u);
  EXPECT_EQ(m.find(0), nullptr);
  EXPECT_FALSE(m.take(0, out));
  EXPECT_TRUE(m.erase(7));
  EXPECT_FALSE(m.erase(7));
  EXPECT_TRUE(m.empty());
}

// Random operations against std::unordered_map, with random and sequential keys: every lookup
// agrees through growth and deletions; the three ways to erase (by key, take, found value)
// agree; for_each gives back the keys inserted (the slots hold codes).
TYPED_TEST(U64MapTest, MatchesReferenceUnderRandomOperations) {
  for (const bool sequential : {false, true}) {
    TypeParam m;
    std::unordered_map<uint64_t, uint64_t> ref;
    Rng rng(42);
    for (int step = 0; step < 200000; ++step) {
      const uint64_t key = sequential ? rng.uniform(5000) : rng.uniform(5000) * 0x2545F4914F6CDD1DULL;
      // Prefetch hints change nothing and read only inside the table (ASan checks), including
      // on the empty table of step 0.
      m.prefetch(key);
      m.prefetch_for_write(key);
      const uint64_t op = rng.uniform(3);
      if (op == 0) {
        EXPECT_EQ(m.try_emplace(key, key + 1).second, ref.emplace(key, key + 1).second);
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

}  // namespace
}  // namespace infera
