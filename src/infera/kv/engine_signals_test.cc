#include "infera/kv/engine_signals.h"

#include <gtest/gtest.h>

#include <cmath>

namespace infera::kv {
namespace {

using std::chrono::milliseconds;

TEST(EngineSignalsTest, AReadingIsFreshUntilItIsOlderThanTheMaxAge) {
  ManualClock clock;
  EngineSignals s(4, clock);
  EXPECT_FALSE(s.fresh(0, milliseconds(100)).has_value()) << "no reading yet";
  s.record(0, 3, 5, 0.42, 2, 1);
  auto r = s.fresh(0, milliseconds(100));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->waiting, 3u);
  EXPECT_EQ(r->running, 5u);
  EXPECT_NEAR(r->kv_usage, 0.42, 1e-6);
  EXPECT_EQ(r->ours_active, 2u) << "the router's own counts at the reading";
  EXPECT_EQ(r->ours_prefill, 1u);
  clock.advance(milliseconds(100));
  EXPECT_TRUE(s.fresh(0, milliseconds(100)).has_value());
  clock.advance(milliseconds(1));
  EXPECT_FALSE(s.fresh(0, milliseconds(100)).has_value()) << "stale: the caller falls back";
  EXPECT_TRUE(s.last(0).has_value());
  s.clear(0);
  EXPECT_FALSE(s.last(0).has_value());
}

TEST(EngineSignalsTest, OutOfRangeValuesAreClampedAndUnknownWorkersIgnored) {
  ManualClock clock;
  EngineSignals s(2, clock);
  s.record(1, 0, 0, 7.5, 0, 0);
  EXPECT_DOUBLE_EQ(s.last(1)->kv_usage, 1.0);
  s.record(1, 0, 0, -1, 0, 0);
  EXPECT_DOUBLE_EQ(s.last(1)->kv_usage, 0.0);
  s.record(1, 0, 0, std::nan(""), 0, 0);
  EXPECT_DOUBLE_EQ(s.last(1)->kv_usage, 0.0);
  s.record(9, 1, 1, 0.5, 0, 0);  // beyond max_workers: dropped, no crash
  EXPECT_FALSE(s.last(9).has_value());
}

}  // namespace
}  // namespace infera::kv
