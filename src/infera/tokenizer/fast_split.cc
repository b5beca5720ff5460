#include "infera/tokenizer/fast_split.h"

#include <string>
#include <vector>

#include "infera/common/check.h"
#include "infera/tokenizer/regex.h"
#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

// The two known patterns differ only in how many digits one match may take.
constexpr std::string_view kQwenPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr uint8_t kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3;

// No Unicode version assigns letters, numbers or white space at or above U+40000 (planes 4-13
// are unassigned, 14 holds tags and selectors, 15-16 private use); a test checks PCRE2 agrees.
constexpr char32_t kTableLimit = 0x40000;

// Per code point: its class for \p{L} / \p{N} / \s, and the ASCII letter it case-folds to for
// the (?i:...) contractions (0 when none), both computed with the same PCRE2 the Regex path uses.
struct ClassTable {
  std::vector<uint8_t> cls;
  std::vector<char> fold;

  ClassTable() : cls(kTableLimit, kOther), fold(kTableLimit, 0) {
    std::string all;
    all.reserve(size_t{kTableLimit} * 4);  // 4 UTF-8 bytes per code point at most
    for (char32_t c = 0; c < kTableLimit; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      unicode::append_utf8(all, c);
    }
    const auto mark = [&](std::string_view pattern, auto&& on_char) {
      auto re = Regex::compile(pattern);
      INFERA_CHECK(re.ok());
      const bool complete = re->for_each_match(all, [&](size_t b, size_t e) {
        for (size_t i = b; i < e;) on_char(unicode::next_char(all, i));
      });
      INFERA_CHECK(complete);
    };
    mark("\\p{L}+", [&](char32_t c) { cls[c] = kLetter; });
    mark("\\p{N}+", [&](char32_t c) { cls[c] = kNumber; });
    mark("\\s+", [&](char32_t c) { cls[c] = kSpace; });
    // The few code points that fold to one of the contraction letters, then which letter.
    std::vector<char32_t> folding;
    mark("(?i:[stremvld])+", [&](char32_t c) { folding.push_back(c); });
    for (const char letter : std::string_view("stremvld")) {
      auto re = Regex::compile("\\A(?i:" + std::string(1, letter) + ")\\z");
      INFERA_CHECK(re.ok());
      for (const char32_t c : folding) {
        std::string one;
        unicode::append_utf8(one, c);
        if (re->match_here(one, 0)) fold[c] = letter;
      }
    }
  }

  uint8_t of(char32_t c) const { return c < kTableLimit ? cls[c] : kOther; }
  char folded(char32_t c) const { return c < kTableLimit ? fold[c] : 0; }
};

const ClassTable& table() {
  static const ClassTable t;
  return t;
}

}  // namespace

std::unique_ptr<FastSplit> FastSplit::for_pattern(std::string_view pattern) {
  size_t digits = 0;
  if (pattern == kQwenPattern) {
    digits = 1;
  } else if (pattern == kLlama3Pattern) {
    digits = 3;
  } else {
    return nullptr;
  }
  table();  // build the class table now (milliseconds) rather than on the first encode
  return std::unique_ptr<FastSplit>(new FastSplit(digits));
}

size_t FastSplit::match(std::string_view t, size_t i) const {
  // Alternatives in the pattern's order; each returns as soon as the engine would succeed.
  const ClassTable& ct = table();
  const size_t n = t.size();
  size_t j = i;
  const char32_t c0 = unicode::next_char(t, j);
  const uint8_t k0 = ct.of(c0);

  // (?i:'s|'t|'re|'ve|'m|'ll|'d): at most one can match, they start with different letters.
  if (c0 == '\'' && j < n) {
    size_t a = j;
    const char f1 = ct.folded(unicode::next_char(t, a));
    if (f1 == 's' || f1 == 't' || f1 == 'm' || f1 == 'd') return a;
    if ((f1 == 'r' || f1 == 'v' || f1 == 'l') && a < n) {
      size_t b = a;
      if (ct.folded(unicode::next_char(t, b)) == (f1 == 'l' ? 'l' : 'e')) return b;
    }
  }
  const auto run = [&](size_t from, uint8_t k) {
    while (from < n) {
      size_t a = from;
      if (ct.of(unicode::next_char(t, a)) != k) break;
      from = a;
    }
    return from;
  };
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (k0 == kLetter) return run(j, kLetter);
  if (k0 != kNumber && c0 != '\r' && c0 != '\n' && j < n) {
    size_t a = j;
    if (ct.of(unicode::next_char(t, a)) == kLetter) return run(a, kLetter);
  }
  // \p{N} or \p{N}{1,3}
  if (k0 == kNumber) {
    size_t end = j;
    for (size_t count = 1; count < max_digits_ && end < n; ++count) {
      size_t a = end;
      if (ct.of(unicode::next_char(t, a)) != kNumber) break;
      end = a;
    }
    return end;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*  (without the space, c0 itself must be the first "other")
  {
    const size_t start = c0 == ' ' ? j : i;
    if (start < n) {
      size_t a = start;
      if (ct.of(unicode::next_char(t, a)) == kOther) {
        size_t end = run(a, kOther);
        while (end < n && (t[end] == '\r' || t[end] == '\n')) ++end;
        return end;
      }
    }
  }
  // Only white space is left. \s*[\r\n]+ takes the longest white-space run up to its last CR or
  // LF; \s+(?!\S) the run, or all but its last character when text follows; \s+ the run.
  size_t end = j;
  size_t last_start = i;
  size_t crlf_end = (c0 == '\r' || c0 == '\n') ? j : 0;
  while (end < n) {
    size_t a = end;
    const char32_t c = unicode::next_char(t, a);
    if (ct.of(c) != kSpace) break;
    if (c == '\r' || c == '\n') crlf_end = a;
    last_start = end;
    end = a;
  }
  if (crlf_end != 0) return crlf_end;
  if (end == n) return end;
  if (last_start > i) return last_start;
  return end;
}

}  // namespace infera::tokenizer
