#include "infera/common/flat_map.h"

#include <gtest/gtest.h>

#include <vector>

#include "infera/common/bits.h"

namespace infera {
namespace {

// Keys whose home is slot `home` of a 16-slot table: the home is the top 4 bits of the key's
// code, so pick the code and take its key.
uint64_t key_with_home(uint64_t home, uint64_t n) { return key_of((home << 60) | n); }

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

// A prompt's worth of keys goes in after one rehash, and room asked for a key at a time still
// grows the table geometrically (a handful of rehashes for thousands of keys).
TEST(FlatU64MapTest, ReserveMoreMakesRoomInOneStep) {
  FlatU64Map<uint32_t> m(50);
  m.reserve_more(512);
  const size_t room = m.capacity();
  EXPECT_GE(room * 50, 512u * 100);
  for (uint64_t k = 1; k <= 512; ++k) m.try_emplace(k * 0x9E3779B97F4A7C15ull, 1);
  EXPECT_EQ(m.capacity(), room);
  m.reserve_more(0);
  EXPECT_EQ(m.capacity(), room);

  size_t rehashes = 0;
  for (uint64_t k = 513; k <= 20000; ++k) {
    const size_t before = m.capacity();
    m.reserve_more(1);
    rehashes += m.capacity() != before ? 1 : 0;
    ASSERT_TRUE(m.try_emplace(k * 0x9E3779B97F4A7C15ull, 1).second);
  }
  EXPECT_LE(rehashes, 6u);  // doubling from ~1,000 slots to 40,000
  for (uint64_t k = 1; k <= 20000; ++k) ASSERT_NE(m.find(k * 0x9E3779B97F4A7C15ull), nullptr);
}

}  // namespace
}  // namespace infera
