#include "infera/common/status.h"

#include <gtest/gtest.h>

namespace infera {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("not positive");
  return v;
}

Status use_assign(int v, int& out) {
  INFERA_ASSIGN_OR_RETURN(out, parse_positive(v));
  return ok_status();
}

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.to_string(), "OK");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = not_found("worker 'x'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "NOT_FOUND: worker 'x'");
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<int> good = parse_positive(3);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 3);
  Result<int> bad = parse_positive(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(ResultTest, AssignOrReturnPropagatesError) {
  int out = 0;
  EXPECT_TRUE(use_assign(5, out).ok());
  EXPECT_EQ(out, 5);
  EXPECT_EQ(use_assign(0, out).code(), StatusCode::kInvalidArgument);
}

TEST(ResultDeathTest, ValueOfErrorAborts) {
  Result<int> bad = parse_positive(-1);
  EXPECT_DEATH((void)bad.value(), "CHECK failed");
}

}  // namespace
}  // namespace infera
