#include "infera/routing/selection.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "infera/common/check.h"

namespace infera::routing {

size_t pick_lowest(std::span<const double> costs, double temperature, Rng& rng) {
  INFERA_CHECK(!costs.empty());
  const auto [lo_it, hi_it] = std::minmax_element(costs.begin(), costs.end());
  const double lo = *lo_it;
  const double hi = *hi_it;
  if (temperature > 0 && hi > lo) {
    // Softmax over normalised costs, sampled by the cumulative sum.
    const double scale = 1.0 / ((hi - lo) * temperature);
    double total = 0;
    std::vector<double> weights(costs.size());
    for (size_t i = 0; i < costs.size(); ++i) {
      weights[i] = std::exp(-(costs[i] - lo) * scale);
      total += weights[i];
    }
    double x = rng.uniform_double() * total;
    for (size_t i = 0; i < costs.size(); ++i) {
      x -= weights[i];
      if (x < 0) return i;
    }
    return static_cast<size_t>(lo_it - costs.begin());  // rounding left x at ~0
  }
  // Reservoir sampling over exact minima: each tied position wins with equal probability.
  size_t chosen = 0;
  uint64_t ties = 0;
  for (size_t i = 0; i < costs.size(); ++i) {
    if (costs[i] != lo) continue;
    ++ties;
    if (rng.uniform(ties) == 0) chosen = i;
  }
  return chosen;
}

}  // namespace infera::routing
