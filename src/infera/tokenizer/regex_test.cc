#include "infera/tokenizer/regex.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace infera::tokenizer {
namespace {

std::vector<std::string> matches(const Regex& re, std::string_view text) {
  std::vector<std::string> out;
  re.for_each_match(text, [&](size_t b, size_t e) { out.emplace_back(text.substr(b, e - b)); });
  return out;
}

Regex compiled(std::string_view pattern) {
  auto r = Regex::compile(pattern);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

using Strings = std::vector<std::string>;

TEST(RegexTest, TranslatesOnigurumaShorthandsToTheirUnicodeMeaning) {
  EXPECT_EQ(*translate_oniguruma("\\s+"), "\\p{White_Space}+");
  EXPECT_EQ(*translate_oniguruma("[^\\s\\p{L}]"), "[^\\p{White_Space}\\p{L}]");
  EXPECT_EQ(*translate_oniguruma("\\d{,3}"), "\\p{Nd}{0,3}");
  EXPECT_EQ(*translate_oniguruma("\\h"), "[0-9A-Fa-f]");
  EXPECT_EQ(*translate_oniguruma("\\v"), "\\x{0B}");
  EXPECT_EQ(*translate_oniguruma("\\u00e9"), "\\x{00e9}");
  EXPECT_EQ(*translate_oniguruma("\\p{^L}"), "\\P{L}");
  EXPECT_EQ(*translate_oniguruma("(?m:.)"), "(?s:.)");
  EXPECT_EQ(*translate_oniguruma("a{x}"), "a\\{x}");
}

TEST(RegexTest, RejectsConstructsPcre2CannotExpressAndNamesThePattern) {
  const auto r = Regex::compile("[a-z&&[^aeiou]]");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("[a-z&&[^aeiou]]"), std::string::npos);
  EXPECT_NE(r.status().message().find("&&"), std::string::npos);
  EXPECT_FALSE(Regex::compile("(unclosed").ok());
}

TEST(RegexTest, WhiteSpaceIsTheUnicodeProperty) {
  // Oniguruma's \s is White_Space: NEL yes, ZWNBSP (U+FEFF) and U+180E no.
  const Regex re = compiled("\\s+");
  EXPECT_EQ(matches(re, "a\xC2\x85" "b"), Strings{"\xC2\x85"});
  EXPECT_TRUE(matches(re, "a\xEF\xBB\xBF" "b").empty());
  EXPECT_TRUE(matches(re, "a\xE1\xA0\x8E" "b").empty());
}

TEST(RegexTest, InlineCaseInsensitiveGroupFoldsUnicodeCase) {
  // Oniguruma folds case with Unicode rules: the long s (ſ) folds to s.
  const Regex re = compiled("(?i:'s|'t)");
  EXPECT_EQ(matches(re, "it's IT'S 'T 'ſ"), (Strings{"'s", "'S", "'T", "'ſ"}));
}

TEST(RegexTest, Qwen3PatternSplitsLikeTheReferenceDoes) {
  const Regex re = compiled(
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
  EXPECT_EQ(matches(re, "Hello world! I'M 123  x\n\n"),
            (Strings{"Hello", " world", "!", " I", "'M", " ", "1", "2", "3", " ", " x", "\n\n"}));
}

TEST(RegexTest, EmptyMatchesAdvanceOneCharacter) {
  const Regex re = compiled("x*");
  EXPECT_EQ(matches(re, "aé"), (Strings{"", "", ""}));
}

TEST(RegexTest, LiteralEscapesMetacharacters) {
  auto r = Regex::literal("a.b*(c)\\E[");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(matches(*r, "xa.b*(c)\\E[y a_b"), Strings{"a.b*(c)\\E["});
}

TEST(RegexTest, MatchHereOnlyAcceptsMatchesAtThePosition) {
  const Regex re = compiled("\\G[\\p{L}]");
  EXPECT_EQ(re.match_here("a1b", 0), std::optional<size_t>(1));
  EXPECT_FALSE(re.match_here("a1b", 1).has_value());
  EXPECT_EQ(re.match_here("a1b", 2), std::optional<size_t>(3));
}

TEST(RegexTest, PathologicalInputFinishesAndReportsMatches) {
  // Long whitespace runs make \s*[\r\n]+ scan ahead from each position; the matcher must still
  // finish in linear time per match and cover the whole run.
  const Regex re = compiled("\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
  const std::string spaces(200000, ' ');
  size_t covered = 0;
  EXPECT_TRUE(re.for_each_match(spaces + "x", [&](size_t b, size_t e) { covered += e - b; }));
  EXPECT_EQ(covered, spaces.size());
}

}  // namespace
}  // namespace infera::tokenizer
