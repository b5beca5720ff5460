// Unicode helpers for the tokenizer module: UTF-8 decoding and repair, character classes with
// the semantics of Rust's `char` methods (the reference tokenizer is Rust), lowercase and the
// four normalization forms through libutf8proc with an allocation-free fast path when the text
// is already normalized. Internal to src/infera/tokenizer/. Pure functions over immutable,
// lazily built tables: any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace infera::tokenizer::unicode {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes the code point that starts at s[i] and advances i past it. `s` must be valid UTF-8.
inline char32_t next_char(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  if (b0 < 0xE0) {
    const char32_t c = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
    i += 2;
    return c;
  }
  if (b0 < 0xF0) {
    const char32_t c = ((b0 & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
                       (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
    i += 3;
    return c;
  }
  const char32_t c = ((b0 & 0x07u) << 18) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 12) |
                     ((static_cast<unsigned char>(s[i + 2]) & 0x3Fu) << 6) |
                     (static_cast<unsigned char>(s[i + 3]) & 0x3Fu);
  i += 4;
  return c;
}

// Length in bytes of the UTF-8 sequence that starts with lead byte `b` (1 for stray bytes).
inline size_t char_len(unsigned char b) {
  if (b < 0xC0) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

// Appends the UTF-8 encoding of `cp` (a Unicode scalar value).
void append_utf8(std::string& out, char32_t cp);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Well-formed UTF-8 for any bytes: each maximal ill-formed subsequence becomes one U+FFFD, the
// "substitution of maximal subparts" that Rust's String::from_utf8_lossy, Python's
// errors="replace" and the WHATWG TextDecoder all use.
std::string to_valid_utf8(std::string_view s);

// Rust char::is_whitespace: the Unicode White_Space property.
bool is_white_space(char32_t c);
// Rust char::is_numeric: general categories Nd, Nl, No.
bool is_numeric(char32_t c);
// Rust char::is_ascii_punctuation or a P* general category (tokenizers' `is_punc`).
bool is_punctuation(char32_t c);

enum class Form { kNfc, kNfd, kNfkc, kNfkd };

// Writes the normalization of `s` (valid UTF-8) to `out` and returns true, or returns false and
// leaves `out` untouched when `s` is already normalized (the common case, decided without
// allocating by a per-code-point quick-check table).
bool normalize(std::string_view s, Form form, std::string& out);

// Rust NormalizedString::lowercase: per character full lowercase mapping (char::to_lowercase;
// U+0130 becomes "i\u0307"), without the context-dependent final-sigma rule.
void lowercase(std::string_view s, std::string& out);

}  // namespace infera::tokenizer::unicode
