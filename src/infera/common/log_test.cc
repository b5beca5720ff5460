#include "infera/common/log.h"

#include <gtest/gtest.h>

namespace infera {
namespace {

TEST(LogTest, PlainValuesAreWrittenAsIs) {
  std::string out;
  append_log_value(out, "10.0.0.1:8000");
  EXPECT_EQ(out, "10.0.0.1:8000");
}

TEST(LogTest, UntrustedValuesCannotForgeLines) {
  std::string out;
  append_log_value(out, "evil\nINFO fake=1 \"x\"\x01");
  EXPECT_EQ(out, "\"evil\\nINFO fake=1 \\\"x\\\"\\x01\"");
  EXPECT_EQ(out.find('\n'), std::string::npos);
}

TEST(LogTest, ParsesLevels) {
  EXPECT_EQ(*parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(*parse_log_level("warn"), LogLevel::kWarn);
  EXPECT_FALSE(parse_log_level("loud").ok());
}

}  // namespace
}  // namespace infera
