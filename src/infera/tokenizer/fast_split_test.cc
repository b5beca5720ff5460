// FastSplit must give exactly the matches PCRE2 gives for the same pattern (the Regex path):
// checked on the parity corpus and on random strings of characters at every class boundary.
#include "infera/tokenizer/fast_split.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "infera/tokenizer/regex.h"
#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

const char* const kPatterns[] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

using Spans = std::vector<std::pair<size_t, size_t>>;

Spans by_regex(const Regex& re, std::string_view text) {
  Spans out;
  re.for_each_match(text, [&](size_t b, size_t e) { out.emplace_back(b, e); });
  return out;
}

Spans by_scanner(const FastSplit& fs, std::string_view text) {
  Spans out;
  for (size_t i = 0; i < text.size();) {
    const size_t e = fs.match(text, i);
    EXPECT_GT(e, i);
    out.emplace_back(i, e);
    i = e;
  }
  return out;
}

TEST(FastSplitTest, RecognisesOnlyTheKnownPatterns) {
  for (const char* p : kPatterns) EXPECT_NE(FastSplit::for_pattern(p), nullptr);
  EXPECT_EQ(FastSplit::for_pattern("\\s+"), nullptr);
  EXPECT_EQ(FastSplit::for_pattern(std::string(kPatterns[0]) + "|x"), nullptr);
}

TEST(FastSplitTest, AgreesWithTheRegexOnTheCorpus) {
  std::ifstream in(std::filesystem::path(INFERA_TESTDATA_DIR) / "tokenizer" / "corpus.jsonl");
  std::stringstream ss;
  ss << in.rdbuf();
  std::istringstream lines(ss.str());
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(lines, line)) {
    const boost::json::object o = boost::json::parse(line).as_object();
    if (o.contains("text")) texts.emplace_back(o.at("text").as_string());
  }
  ASSERT_GT(texts.size(), 300u);
  for (const char* p : kPatterns) {
    const Regex re = *Regex::compile(p);
    const auto fs = FastSplit::for_pattern(p);
    for (const std::string& t : texts) ASSERT_EQ(by_scanner(*fs, t), by_regex(re, t)) << t;
  }
}

TEST(FastSplitTest, AgreesWithTheRegexOnRandomStrings) {
  // Letters (incl. the long s that case-folds to s, Kelvin sign, Greek, CJK), numbers of all three
  // categories, every kind of white space and CR/LF, apostrophes, marks, symbols, emoji.
  const std::vector<char32_t> pool = {
      'a', 'S', 's', 'T', 'r', 'E', 'v', 'M', 'l', 'L', 'd', 'D', 'x', 0x17F, 0x212A, 0x3A3, 0x4E2D,
      0x3042, 0xAC00, '0', '7', 0x663, 0xB2, 0xBD, 0x216B, '\'', 0x2019, ' ', ' ', '\t', '\n', '\r',
      0x0B, 0x0C, 0x85, 0xA0, 0x1680, 0x2028, 0x3000, 0x180E, 0x200B, 0xFEFF, '!', '.', ',', '-',
      '(', '"', '$', 0x301, 0x93F, 0x200D, 0x1F600, 0x1F3FD, 0xE000, 0x10FFFD};
  std::mt19937 rng(11);
  for (const char* p : kPatterns) {
    const Regex re = *Regex::compile(p);
    const auto fs = FastSplit::for_pattern(p);
    for (int n = 0; n < 100000; ++n) {
      std::string s;
      const int len = 1 + static_cast<int>(rng() % 10);
      for (int k = 0; k < len; ++k) unicode::append_utf8(s, pool[rng() % pool.size()]);
      ASSERT_EQ(by_scanner(*fs, s), by_regex(re, s)) << "string #" << n;
    }
  }
}

TEST(FastSplitTest, NoClassedCharactersAboveItsTable) {
  // The scanner classifies code points from U+40000 up as "other": PCRE2 must agree.
  std::string high;
  for (char32_t c = 0x40000; c <= 0x10FFFF; ++c) unicode::append_utf8(high, c);
  for (const char* p : {"\\p{L}", "\\p{N}", "\\s", "(?i:[stremvld])"}) {
    size_t matches = 0;
    Regex::compile(p)->for_each_match(high, [&](size_t, size_t) { ++matches; });
    EXPECT_EQ(matches, 0u) << p;
  }
}

}  // namespace
}  // namespace infera::tokenizer
