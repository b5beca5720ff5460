#include "infera/engine/timing_model.h"

#include <gtest/gtest.h>

namespace infera::engine {
namespace {

TEST(TimingModelTest, PrefillPolynomialMatchesDynamoCoefficients) {
  // 4.209989e-7 * 1000^2 + 1.518344e-2 * 1000 + 16.50142 (Dynamo's own test value).
  EXPECT_NEAR(TimingModel::prefill_ms(1000), 32.1058589, 1e-9);
  EXPECT_NEAR(TimingModel::prefill_ms(0), 16.50142, 1e-12);
  EXPECT_NEAR(TimingModel::prefill_ms(8192),
              4.209989e-7 * 8192.0 * 8192 + 1.518344e-2 * 8192 + 16.50142, 1e-9);
}

TEST(TimingModelTest, DecodePolynomialOfKvUsageWithOneMillisecondFloor) {
  EXPECT_NEAR(TimingModel::decode_ms(0.5), 26.31, 1e-9);
  EXPECT_NEAR(TimingModel::decode_ms(0.0), 5.74, 1e-12);
  EXPECT_NEAR(TimingModel::decode_ms(1.0), 34.01, 1e-9);
  EXPECT_EQ(TimingModel::decode_ms(-1.0), 1.0);
}

TEST(TimingModelTest, MixedStepIsPrefillPlusDecode) {
  const StepShape shape{512, 7, 0.25};
  EXPECT_NEAR(TimingModel::step_ms(shape),
              TimingModel::prefill_ms(512) + TimingModel::decode_ms(0.25), 1e-9);
  EXPECT_NEAR(TimingModel::step_ms(StepShape{512, 0, 0.9}), TimingModel::prefill_ms(512), 1e-9);
  EXPECT_NEAR(TimingModel::step_ms(StepShape{0, 3, 0.9}), TimingModel::decode_ms(0.9), 1e-9);
  EXPECT_EQ(TimingModel::step_ms(StepShape{}), 0.0);
}

TEST(TimingModelTest, DurationIsDividedBySpeedupRatio) {
  const StepShape shape{1000, 0, 0};
  EXPECT_EQ(TimingModel(1.0).step_duration(shape).count(), 32105859);  // ns, rounded
  EXPECT_EQ(TimingModel(100.0).step_duration(shape).count(), 321059);
  // Time always moves forward, even for an empty step or an absurd speedup.
  EXPECT_EQ(TimingModel(1.0).step_duration(StepShape{}).count(), 1);
  EXPECT_EQ(TimingModel(1e12).step_duration(shape).count(), 1);
}

}  // namespace
}  // namespace infera::engine
