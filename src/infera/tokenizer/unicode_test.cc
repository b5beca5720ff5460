#include "infera/tokenizer/unicode.h"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <random>
#include <string>

namespace infera::tokenizer::unicode {
namespace {

std::string utf8(std::initializer_list<char32_t> cps) {
  std::string s;
  for (const char32_t c : cps) append_utf8(s, c);
  return s;
}

// utf8proc's full normalization, the slow path the quick check must agree with.
std::string reference(std::string_view s, Form form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Form::kNfc: options |= UTF8PROC_COMPOSE; break;
    case Form::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case Form::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case Form::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  std::string r = n >= 0 ? std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n))
                         : std::string("<error>");
  std::free(out);
  return r;
}

std::string normalized(std::string_view s, Form form) {
  std::string out;
  return normalize(s, form, out) ? out : std::string(s);
}

TEST(Utf8Test, RepairsWithOneReplacementPerMaximalSubpart) {
  // The worked example of the Unicode Standard, section 3.9 (U+FFFD substitution of maximal
  // subparts), which Rust's from_utf8_lossy and the WHATWG decoder follow.
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_EQ(to_valid_utf8(in), utf8({'a', 0xFFFD, 0xFFFD, 0xFFFD, 'b', 0xFFFD, 'c', 0xFFFD,
                                     0xFFFD, 'd'}));
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), utf8({0xFFFD, 0xFFFD, 0xFFFD}));  // surrogate
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), utf8({0xFFFD, 0xFFFD}));              // overlong
  EXPECT_EQ(to_valid_utf8("\xF4\x90\x80\x80"), utf8({0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD}));
  EXPECT_EQ(to_valid_utf8("\xE4\xB8"), utf8({0xFFFD}));  // truncated at the end
  EXPECT_EQ(to_valid_utf8("ok \xE4\xB8\xAD"), "ok \xE4\xB8\xAD");
}

TEST(Utf8Test, ValidationAcceptsExactlyWellFormedSequences) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii text that is longer than eight bytes"));
  EXPECT_TRUE(is_valid_utf8(utf8({0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF})));
  EXPECT_FALSE(is_valid_utf8("\xC0\x80"));
  EXPECT_FALSE(is_valid_utf8("\xED\xBF\xBF"));
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));
  EXPECT_FALSE(is_valid_utf8("abcdefgh\x80"));
  EXPECT_FALSE(is_valid_utf8("\xE2\x82"));
}

TEST(UnicodeTest, CharacterClassesFollowRust) {
  for (const char32_t c : {0x09u, 0x0Au, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x2028u,
                           0x202Fu, 0x3000u}) {
    EXPECT_TRUE(is_white_space(c)) << std::hex << static_cast<uint32_t>(c);
  }
  for (const char32_t c : {0x180Eu, 0x200Bu, 0xFEFFu, 0x61u}) EXPECT_FALSE(is_white_space(c));
  for (const char32_t c : {U'7', U'٣', U'²', U'Ⅻ', U'½'}) {
    EXPECT_TRUE(is_numeric(c)) << static_cast<uint32_t>(c);
  }
  EXPECT_FALSE(is_numeric(U'a'));
  for (const char32_t c : {U'!', U'$', U'+', U'~', U'。', U'«', U'—'}) {
    EXPECT_TRUE(is_punctuation(c)) << static_cast<uint32_t>(c);
  }
  EXPECT_FALSE(is_punctuation(U'€'));  // Sc, not punctuation
  EXPECT_FALSE(is_punctuation(U'a'));
}

TEST(UnicodeTest, LowercaseIsPerCharacterFullMapping) {
  std::string out;
  lowercase("HeLLo ÀÉÎ ΣΑΣ İ", out);
  // Σ always becomes σ (no final-sigma rule), İ becomes i + combining dot above.
  EXPECT_EQ(out, "hello àéî σασ i\xCC\x87");
}

TEST(UnicodeTest, NormalizationFormsOnKnownInputs) {
  EXPECT_EQ(normalized("e\xCC\x81", Form::kNfc), "\xC3\xA9");
  EXPECT_EQ(normalized("\xC3\xA9", Form::kNfd), "e\xCC\x81");
  EXPECT_EQ(normalized("\xEF\xAC\x81", Form::kNfc), "\xEF\xAC\x81");  // ﬁ kept by NFC
  EXPECT_EQ(normalized("\xEF\xAC\x81", Form::kNfkc), "fi");
  EXPECT_EQ(normalized(utf8({0x1112, 0x1161, 0x11AB}), Form::kNfc), utf8({0xD55C}));
  EXPECT_EQ(normalized(utf8({0x212B}), Form::kNfc), utf8({0xC5}));
  std::string untouched;
  EXPECT_FALSE(normalize("already normalized text 中文 😀", Form::kNfc, untouched));
  EXPECT_TRUE(untouched.empty());
}

TEST(UnicodeTest, QuickCheckAgreesWithFullNormalizationOnEveryCodePoint) {
  // When the quick check keeps a string as is, full normalization must keep it too: checked for
  // every code point alone, after a starter, and before a combining mark.
  for (const Form form : {Form::kNfc, Form::kNfd, Form::kNfkc, Form::kNfkd}) {
    size_t checked = 0;
    for (char32_t c = 1; c <= 0x10FFFF; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      if (c >= 0x30000 && c < 0xE0000) continue;  // unassigned planes
      const std::string alone = utf8({c});
      std::string out;
      if (!normalize(alone, form, out)) {
        ASSERT_EQ(reference(alone, form), alone) << "U+" << std::hex << static_cast<uint32_t>(c);
        ++checked;
      }
    }
    EXPECT_GT(checked, 100000u);
  }
}

TEST(UnicodeTest, QuickCheckAgreesWithFullNormalizationOnRandomStrings) {
  // Characters that interact: starters, combining marks of several classes, Hangul jamo and
  // syllables, Indic and Tamil vowel signs, compatibility and excluded characters.
  const std::vector<char32_t> pool = {
      'a', 'e', 'A', 'o', 'u', 'i', 0x300, 0x301, 0x308, 0x323, 0x327, 0x334, 0x345, 0x5B0,
      0x93C, 0x94D, 0x1100, 0x1161, 0x11A8, 0xAC00, 0xD55C, 0x0BC6, 0x0BBE, 0x0BD7, 0x0B47,
      0x0B3E, 0x1B05, 0x1B35, 0x212B, 0x2126, 0xF900, 0xFB01, 0x00BD, 0x3392, 0xFF21, 0x1E9B,
      0x0344, 0x0F73, 0x0F71, 0x0F72, 0x3099, 0x304B, 0x30AB, 0x1D15E, 0x2F800, 0x11099, 0x110BA,
      0x05D0, 0x0627, 0x0654, 0x00C5, 0x00E9, 0x03A9, 0x1F600, ' ', 0x3000};
  std::mt19937 rng(7);
  for (int n = 0; n < 20000; ++n) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < len; ++k) append_utf8(s, pool[rng() % pool.size()]);
    for (const Form form : {Form::kNfc, Form::kNfd, Form::kNfkc, Form::kNfkd}) {
      ASSERT_EQ(normalized(s, form), reference(s, form)) << "string #" << n;
    }
  }
}

}  // namespace
}  // namespace infera::tokenizer::unicode
