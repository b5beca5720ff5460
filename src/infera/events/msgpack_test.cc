#include "infera/events/msgpack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace infera::events {
namespace {

std::vector<uint8_t> bytes(std::initializer_list<int> b) {
  std::vector<uint8_t> out;
  for (const int x : b) out.push_back(static_cast<uint8_t>(x));
  return out;
}

std::string hex(const std::string& s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (const char c : s) {
    out.push_back(kDigits[static_cast<uint8_t>(c) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(c) & 15]);
  }
  return out;
}

TEST(MsgpackWriterTest, IntegersUseTheSmallestFamily) {
  struct Case {
    uint64_t value;
    const char* hex;
  };
  for (const Case& c : {Case{0, "00"}, Case{127, "7f"}, Case{128, "cc80"}, Case{255, "ccff"},
                        Case{256, "cd0100"}, Case{65535, "cdffff"}, Case{65536, "ce00010000"},
                        Case{0xffffffffu, "ceffffffff"}, Case{0x100000000ull, "cf0000000100000000"},
                        Case{~0ull, "cfffffffffffffffff"}}) {
    std::string out;
    MsgpackWriter(out).uint(c.value);
    EXPECT_EQ(hex(out), c.hex) << c.value;
  }
  struct SCase {
    int64_t value;
    const char* hex;
  };
  for (const SCase& c : {SCase{5, "05"}, SCase{-1, "ff"}, SCase{-32, "e0"}, SCase{-33, "d0df"},
                         SCase{-128, "d080"}, SCase{-129, "d1ff7f"}, SCase{-32769, "d2ffff7fff"},
                         SCase{std::numeric_limits<int64_t>::min(), "d38000000000000000"}}) {
    std::string out;
    MsgpackWriter(out).sint(c.value);
    EXPECT_EQ(hex(out), c.hex) << c.value;
  }
}

TEST(MsgpackWriterTest, StringsBinsContainersAndFloats) {
  std::string out;
  MsgpackWriter w(out);
  w.str("GPU");
  w.str(std::string(32, 'x'));
  w.array(3);
  w.array(16);
  w.map(1);
  w.map(16);
  w.float64(1.5);
  const uint8_t b[2] = {1, 2};
  w.bin(b);
  w.nil();
  w.boolean(true);
  EXPECT_EQ(hex(out), "a3475055" "d920" + hex(std::string(32, 'x')) +
                         "93" "dc0010" "81" "de0010" "cb3ff8000000000000" "c4020102" "c0" "c3");
}

TEST(MsgpackReaderTest, ReadsEveryIntegerFamily) {
  const auto in = bytes({0x05, 0xe0, 0xcc, 0x80, 0xcd, 0x01, 0x00, 0xce, 0x00, 0x01, 0x00, 0x00,
                         0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xd0, 0x80, 0xd1,
                         0xff, 0x7f, 0xd2, 0xff, 0xff, 0x7f, 0xff, 0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0});
  MsgpackReader r(in);
  MsgpackInt v;
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(v.bits, 5u);
  EXPECT_FALSE(v.negative);
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(static_cast<int64_t>(v.bits), -32);
  EXPECT_TRUE(v.negative);
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(v.bits, 128u);
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(v.bits, 256u);
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(v.bits, 65536u);
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(v.bits, ~0ull);
  EXPECT_FALSE(v.negative);
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(static_cast<int64_t>(v.bits), -128);
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(static_cast<int64_t>(v.bits), -129);
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(static_cast<int64_t>(v.bits), -32769);
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(static_cast<int64_t>(v.bits), std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(r.at_end());
  EXPECT_TRUE(r.ok());
}

TEST(MsgpackReaderTest, RoundTripsWhatTheWriterWrites) {
  std::string out;
  MsgpackWriter w(out);
  w.map(2);
  w.str("ts");
  w.float64(1700000000.5);
  w.str("list");
  w.array(3);
  w.uint(~0ull);
  w.sint(-7);
  w.nil();
  MsgpackReader r(byte_span(out));
  uint32_t n = 0;
  ASSERT_TRUE(r.read_map(n));
  EXPECT_EQ(n, 2u);
  std::string_view key;
  ASSERT_TRUE(r.read_str(key));
  EXPECT_EQ(key, "ts");
  double ts = 0;
  ASSERT_TRUE(r.read_number(ts));
  EXPECT_EQ(ts, 1700000000.5);
  ASSERT_TRUE(r.read_str(key));
  ASSERT_TRUE(r.read_array(n));
  EXPECT_EQ(n, 3u);
  MsgpackInt v;
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(v.bits, ~0ull);
  ASSERT_TRUE(r.read_int(v));
  EXPECT_EQ(static_cast<int64_t>(v.bits), -7);
  EXPECT_TRUE(r.skip_nil());
  EXPECT_TRUE(r.at_end());
}

TEST(MsgpackReaderTest, Float32AndIntegersReadAsNumbers) {
  const auto in = bytes({0xca, 0x3f, 0xc0, 0x00, 0x00, 0x07, 0xff});
  MsgpackReader r(in);
  double d = 0;
  ASSERT_TRUE(r.read_number(d));
  EXPECT_EQ(d, 1.5);
  ASSERT_TRUE(r.read_number(d));
  EXPECT_EQ(d, 7.0);
  ASSERT_TRUE(r.read_number(d));
  EXPECT_EQ(d, -1.0);
}

TEST(MsgpackReaderTest, TruncatedValuesFail) {
  for (const auto& in : {bytes({0xcd, 0x01}), bytes({0xcb, 0, 0}), bytes({0xa5, 'a', 'b'}),
                         bytes({0xc4, 0x04, 1}), bytes({0xdc, 0x00}), bytes({})}) {
    MsgpackReader r(in);
    EXPECT_FALSE(r.skip());
    EXPECT_EQ(r.error(), MsgpackError::kTruncated);
  }
}

TEST(MsgpackReaderTest, HugeDeclaredLengthsFailWithoutReading) {
  // A 4 GiB string and a 4-billion-element array in a few bytes.
  for (const auto& in : {bytes({0xdb, 0xff, 0xff, 0xff, 0xff, 'a'}),
                         bytes({0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}),
                         bytes({0xc6, 0xff, 0xff, 0xff, 0xff})}) {
    MsgpackReader r(in);
    EXPECT_FALSE(r.skip());
    EXPECT_EQ(r.error(), MsgpackError::kTooLarge);
  }
  // Below the limit but beyond the bytes left: truncated, and nothing was reserved for it.
  const auto lie = bytes({0xdc, 0x10, 0x00, 0x01});
  MsgpackReader r(lie);
  uint32_t n = 0;
  EXPECT_FALSE(r.read_array(n));
  EXPECT_EQ(r.error(), MsgpackError::kTruncated);
}

TEST(MsgpackReaderTest, DeepNestingIsAnErrorNotARecursion) {
  std::vector<uint8_t> deep(100000, 0x91);  // [[[[...]]]]
  deep.push_back(0x00);
  MsgpackReader r(deep, MsgpackLimits{1u << 24, 32});
  EXPECT_FALSE(r.skip());
  EXPECT_EQ(r.error(), MsgpackError::kTooDeep);

  std::vector<uint8_t> ok(20, 0x91);
  ok.push_back(0x00);
  MsgpackReader shallow(ok, MsgpackLimits{1u << 24, 32});
  EXPECT_TRUE(shallow.skip());
  EXPECT_TRUE(shallow.at_end());
}

TEST(MsgpackReaderTest, SkipsEveryType) {
  const auto in = bytes({0x82, 0xa1, 'a', 0xd4, 0x01, 0x02, 0xc7, 0x02, 0x05, 0xaa, 0xbb, 0x93,
                         0xc2, 0xca, 0, 0, 0, 0, 0xc4, 0x01, 0xff});
  MsgpackReader r(in);
  EXPECT_TRUE(r.skip());
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.at_end());
}

TEST(MsgpackReaderTest, ErrorsStickAndTypesAreChecked) {
  const auto in = bytes({0xc1, 0x01});
  MsgpackReader r(in);
  EXPECT_FALSE(r.skip());
  EXPECT_EQ(r.error(), MsgpackError::kInvalidByte);
  MsgpackInt v;
  EXPECT_FALSE(r.read_int(v));  // sticky: nothing reads after the first error
  EXPECT_EQ(r.error(), MsgpackError::kInvalidByte);

  const auto s = bytes({0xa1, 'x'});
  MsgpackReader t(s);
  uint32_t n = 0;
  EXPECT_FALSE(t.read_array(n));
  EXPECT_EQ(t.error(), MsgpackError::kWrongType);
  EXPECT_EQ(t.error_position(), 0u);
}

}  // namespace
}  // namespace infera::events
