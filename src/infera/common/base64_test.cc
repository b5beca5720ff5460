#include "infera/common/base64.h"

#include <gtest/gtest.h>

#include <vector>

namespace infera {
namespace {

TEST(Base64Test, RoundTripsEveryPaddingLength) {
  for (const std::string& s : std::vector<std::string>{"", "f", "fo", "foo", "foob", "fooba", "foobar",
                                                      std::string("\0\xff\x10", 3)}) {
    const auto decoded = base64_decode(base64_encode(s));
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, s);
  }
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
}

TEST(Base64Test, DecodingSkipsLineBreaksAndRejectsForeignCharacters) {
  auto d = base64_decode("Zm9v\nYmFy\r\n");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, "foobar");
  EXPECT_FALSE(base64_decode("Zm9v*").ok());
}

}  // namespace
}  // namespace infera
