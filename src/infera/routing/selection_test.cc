#include "infera/routing/selection.h"

#include <gtest/gtest.h>

#include <vector>

namespace infera::routing {
namespace {

// With a fixed seed, exact ties spread evenly: 4 tied minima among 6 candidates over 200,000
// picks each win 25 % +- 1 %, and the non-minimal ones never win.
TEST(SelectionTest, TiesSpreadEvenly) {
  Rng rng(12345);
  const std::vector<double> costs{5, 3, 3, 9, 3, 3};
  std::vector<int> wins(costs.size());
  constexpr int kPicks = 200000;
  for (int i = 0; i < kPicks; ++i) ++wins[pick_lowest(costs, 0.0, rng)];
  EXPECT_EQ(wins[0], 0);
  EXPECT_EQ(wins[3], 0);
  for (size_t i : {1u, 2u, 4u, 5u}) EXPECT_NEAR(wins[i], kPicks / 4, kPicks / 100) << i;
}

TEST(SelectionTest, LowestCostWinsWithoutTemperature) {
  Rng rng(1);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(pick_lowest(std::vector<double>{4, 2, 3}, 0.0, rng), 1u);
}

TEST(SelectionTest, TemperatureSamplesASoftmaxOverNormalisedCosts) {
  Rng rng(7);
  const std::vector<double> costs{0, 10};  // normalised: 0 and 1
  constexpr int kPicks = 100000;
  int low_wins = 0;
  for (int i = 0; i < kPicks; ++i) low_wins += pick_lowest(costs, 1.0, rng) == 0 ? 1 : 0;
  // p(low) = 1 / (1 + e^-1) = 0.731
  EXPECT_NEAR(static_cast<double>(low_wins) / kPicks, 0.731, 0.01);
  int cold_low = 0;
  for (int i = 0; i < kPicks; ++i) cold_low += pick_lowest(costs, 0.05, rng) == 0 ? 1 : 0;
  EXPECT_GT(cold_low, kPicks * 99 / 100);  // e^-20: essentially greedy
}

TEST(SelectionTest, EqualCostsWithTemperatureAreUniform) {
  Rng rng(3);
  std::vector<int> wins(3);
  for (int i = 0; i < 30000; ++i) ++wins[pick_lowest(std::vector<double>{2, 2, 2}, 0.5, rng)];
  for (int w : wins) EXPECT_NEAR(w, 10000, 400);
}

}  // namespace
}  // namespace infera::routing
