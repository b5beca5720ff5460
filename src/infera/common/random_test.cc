#include "infera/common/random.h"

#include <gtest/gtest.h>

#include <vector>

namespace infera {
namespace {

TEST(RngTest, SameSeedSameSequence) {
  Rng a(7), b(7), c(8);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    differs |= x != c.next();
  }
  EXPECT_TRUE(differs);
}

TEST(RngTest, UniformIsInRangeAndRoughlyFlat) {
  Rng rng(1);
  std::vector<int> counts(10);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t v = rng.uniform(10);
    ASSERT_LT(v, 10u);
    ++counts[v];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
  for (int i = 0; i < 1000; ++i) {
    const double d = rng.uniform_double();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
}

}  // namespace
}  // namespace infera
