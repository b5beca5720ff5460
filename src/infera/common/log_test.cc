#include "infera/common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <string>

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

// What one LogLine writes to stderr (fd 2, redirected to a file for the call).
template <typename Fn>
std::string captured_stderr(Fn&& log) {
  std::FILE* file = std::tmpfile();
  const int saved = ::dup(2);
  ::dup2(::fileno(file), 2);
  log();
  ::dup2(saved, 2);
  ::close(saved);
  std::string out;
  std::rewind(file);
  for (int c; (c = std::fgetc(file)) != EOF;) out.push_back(static_cast<char>(c));
  std::fclose(file);
  return out;
}

TEST(LogTest, JsonLinesAreOneObjectWithTypedFields) {
  set_log_format(LogFormat::kJson);
  const std::string line = captured_stderr([] {
    INFERA_LOG(kWarn, "events").msg("a \"gap\"\n").kv("worker", "w\x01\xff").kv("n", 42).kv("lag", 0.5)
        .kv("stale", true).kv("seq", uint64_t{7});
  });
  set_log_format(LogFormat::kLogfmt);
  ASSERT_EQ(line.rfind(R"({"ts":")", 0), 0u) << line;
  const size_t rest = line.find(R"(","level")");
  ASSERT_NE(rest, std::string::npos) << line;
  // UTC to the millisecond (the part up to the second is formatted once per second).
  const std::string ts = line.substr(7, rest - 7);
  const std::regex utc_ms(R"(20\d\d-[01]\d-[0-3]\dT[0-2]\d:[0-5]\d:[0-6]\d\.\d{3}Z)");
  EXPECT_TRUE(std::regex_match(ts, utc_ms)) << ts;
  EXPECT_EQ(line.substr(rest),
            R"(","level":"WARN","component":"events","msg":"a \"gap\"\n","worker":"w\u0001)"
            "\xEF\xBF\xBD"  // the invalid byte, as U+FFFD
            R"(",)"
            R"("n":42,"lag":0.5,"stale":true,"seq":7})" "\n")
      << line;
}

TEST(LogTest, LogfmtLinesKeepTheirShape) {
  const std::string line = captured_stderr([] {
    INFERA_LOG(kInfo, "gateway").msg("served").kv("status", 200).kv("ok", false);
  });
  EXPECT_NE(line.find(" INFO gateway served status=200 ok=false\n"), std::string::npos) << line;
}

TEST(LogTest, BufferedLinesWaitForTheFlushOrAFullBuffer) {
  const std::string held = captured_stderr([] {
    INFERA_LOG(kInfo, "access").buffered().msg("request").kv("n", 1);
    INFERA_LOG(kInfo, "gateway").msg("unbuffered");
  });
  EXPECT_EQ(held.find("access"), std::string::npos) << held;
  EXPECT_NE(held.find("unbuffered"), std::string::npos) << held;
  const std::string flushed = captured_stderr([] { flush_log_buffer(); });
  EXPECT_NE(flushed.find(" INFO access request n=1\n"), std::string::npos) << flushed;
  // Past 32 KiB the appending line writes the buffer itself, every line whole and in order.
  const std::string full = captured_stderr([] {
    for (int i = 0; i < 1000; ++i) INFERA_LOG(kInfo, "access").buffered().msg("request").kv("i", i);
  });
  ASSERT_GE(full.size(), size_t{32} * 1024);
  EXPECT_EQ(full.back(), '\n');
  EXPECT_NE(full.find(" i=0\n"), std::string::npos);
  EXPECT_LT(full.find(" i=0\n"), full.find(" i=1\n"));
  flush_log_buffer();
}

TEST(LogTest, ParsesFormats) {
  EXPECT_EQ(*parse_log_format("json"), LogFormat::kJson);
  EXPECT_EQ(*parse_log_format("logfmt"), LogFormat::kLogfmt);
  EXPECT_FALSE(parse_log_format("xml").ok());
}

TEST(LogTest, ParsesLevels) {
  EXPECT_EQ(*parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(*parse_log_level("warn"), LogLevel::kWarn);
  EXPECT_FALSE(parse_log_level("loud").ok());
}

}  // namespace
}  // namespace infera
