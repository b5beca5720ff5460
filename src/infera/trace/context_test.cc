#include "infera/trace/context.h"

#include <gtest/gtest.h>

namespace infera::trace {
namespace {

constexpr std::string_view kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceparentTest, ReadsTheSpecsExample) {
  auto p = parse_traceparent(kValid);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(hex16(p->span_id), "00f067aa0ba902b7");
  EXPECT_TRUE(p->sampled);
  EXPECT_EQ(format_traceparent(p->trace_id, p->span_id, true), kValid);
  EXPECT_FALSE(parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")->sampled);
}

TEST(TraceparentTest, MalformedMeansAbsent) {
  for (std::string_view bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",     // short
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // v00 with more
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // uppercase
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero parent
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // separator
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // not hex
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",    // flags
       }) {
    EXPECT_FALSE(parse_traceparent(bad).has_value()) << bad;
  }
}

TEST(TraceparentTest, AHigherVersionIsReadByItsFirstFields) {
  EXPECT_TRUE(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what").has_value());
  EXPECT_TRUE(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").has_value());
  EXPECT_FALSE(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01what").has_value());
}

TEST(TraceIdsTest, NewIdsAreValidAndDistinct) {
  const TraceId a = new_trace_id();
  const TraceId b = new_trace_id();
  EXPECT_TRUE(a.valid());
  EXPECT_NE(a, b);
  EXPECT_NE(new_span_id(), 0u);
  const auto round = parse_traceparent(format_traceparent(a, 7, false));
  ASSERT_TRUE(round.has_value());
  EXPECT_EQ(round->trace_id, a);
  EXPECT_EQ(round->span_id, 7u);
}

TEST(SamplerTest, TheRatioKeepsItsShareOfTraces) {
  EXPECT_TRUE(sample_trace(new_trace_id(), 1.0));
  EXPECT_FALSE(sample_trace(new_trace_id(), 0.0));
  int kept = 0;
  for (int i = 0; i < 20'000; ++i) kept += sample_trace(new_trace_id(), 0.25) ? 1 : 0;
  EXPECT_NEAR(kept / 20'000.0, 0.25, 0.02);
  // Decided by the id alone: the same trace gets the same answer everywhere.
  const TraceId t = new_trace_id();
  EXPECT_EQ(sample_trace(t, 0.5), sample_trace(t, 0.5));
  EXPECT_TRUE(sample_trace({1, 0}, 0.001));  // low bits zero: below any positive bound
}

}  // namespace
}  // namespace infera::trace
