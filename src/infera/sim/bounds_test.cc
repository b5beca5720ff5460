#include "infera/sim/bounds.h"

#include <gtest/gtest.h>

namespace infera::sim {
namespace {

RequestSpec req(uint64_t id, std::vector<uint32_t> prompt) {
  RequestSpec r;
  r.id = id;
  r.prompt = Prompt(std::move(prompt));
  return r;
}

std::vector<uint32_t> blocks(std::initializer_list<uint32_t> ids, uint32_t bs = 4) {
  std::vector<uint32_t> out;
  for (uint32_t id : ids) {
    for (uint32_t i = 0; i < bs; ++i) out.push_back(id * 100 + i);
  }
  return out;
}

TEST(BoundsTest, InfiniteCacheCountsLeadingRepeatedBlocks) {
  Workload w;
  w.requests.push_back(req(0, blocks({1, 2, 3})));
  w.requests.push_back(req(1, blocks({1, 2, 4})));  // 2 of 3 blocks hit
  w.requests.push_back(req(2, blocks({5, 2})));     // different first block: chained, no hit
  EXPECT_DOUBLE_EQ(infinite_cache_hit_ratio(w, 4), 8.0 / 32.0);
}

TEST(BoundsTest, PooledLruEvictsTheLeastRecentlyUsed) {
  Workload w;
  w.requests.push_back(req(0, blocks({1})));
  w.requests.push_back(req(1, blocks({2})));
  w.requests.push_back(req(2, blocks({3})));
  w.requests.push_back(req(3, blocks({1})));  // evicted with capacity 2, kept with 3
  EXPECT_DOUBLE_EQ(pooled_lru_hit_ratio(w, 4, 2), 0.0);
  EXPECT_DOUBLE_EQ(pooled_lru_hit_ratio(w, 4, 3), 4.0 / 16.0);
  EXPECT_DOUBLE_EQ(infinite_cache_hit_ratio(w, 4), 4.0 / 16.0);
}

TEST(BoundsTest, LruNeverBeatsInfinite) {
  WorkloadOptions o;
  o.requests = 200;
  o.system_tokens = 256;
  auto w = make_workload("prefix-families", o);
  ASSERT_TRUE(w.ok());
  const double inf = infinite_cache_hit_ratio(*w, 16);
  EXPECT_GT(inf, 0.5);
  EXPECT_LE(pooled_lru_hit_ratio(*w, 16, 64), inf);
  EXPECT_DOUBLE_EQ(pooled_lru_hit_ratio(*w, 16, 1u << 20), inf);
}

}  // namespace
}  // namespace infera::sim
