#include "infera/tokenizer/unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "infera/common/check.h"

namespace infera::tokenizer::unicode {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;

bool in_range(unsigned char b, unsigned char lo, unsigned char hi) { return b >= lo && b <= hi; }

// Bit set over all code points: set = the code point may change under normalization in its
// context (it decomposes differently, has a non-zero combining class, or can be the second
// element of a canonical composition), so a string holding it takes the slow path.
class QuickCheckTable {
 public:
  explicit QuickCheckTable(Form form) : bits_((kMaxCodePoint + 64) / 64, 0) {
    const bool compose = form == Form::kNfc || form == Form::kNfkc;
    const bool compat = form == Form::kNfkc || form == Form::kNfkd;
    const int options = UTF8PROC_STABLE | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) |
                        (compat ? UTF8PROC_COMPAT : 0);
    // Hangul: a leading-vowel (V) or trailing (T) jamo composes with what precedes it. Syllables
    // are algorithmic: the decomposed forms split them, the composed forms keep them.
    for (char32_t c = 0x1160; c <= 0x11FF; ++c) set(c);
    if (!compose) {
      for (char32_t c = 0xAC00; c <= 0xD7A3; ++c) set(c);
    }
    std::vector<bool> second(kMaxCodePoint + 1, false);
    std::vector<char32_t> candidates;
    for (char32_t c = 0; c <= kMaxCodePoint; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(c));
      if (p->combining_class != 0) {
        set(c);
        continue;
      }
      if (c >= 0xAC00 && c <= 0xD7A3) continue;  // Hangul syllables: handled above
      const bool decomposes =
          p->decomp_seqindex != UINT16_MAX && (compat || p->decomp_type == 0);
      if (decomposes) candidates.push_back(c);
    }
    for (const char32_t c : candidates) {
      utf8proc_int32_t decomposed[32];
      utf8proc_int32_t boundclass = 0;
      const utf8proc_ssize_t n = utf8proc_decompose_char(
          static_cast<utf8proc_int32_t>(c), decomposed, 32,
          static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0)),
          &boundclass);
      if (!compose) {
        if (n != 1 || static_cast<char32_t>(decomposed[0]) != c) set(c);
        continue;
      }
      // Composed forms: stable only when the character survives a round trip on its own.
      std::string one;
      append_utf8(one, c);
      utf8proc_uint8_t* mapped = nullptr;
      const utf8proc_ssize_t len =
          utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(one.data()),
                       static_cast<utf8proc_ssize_t>(one.size()), &mapped,
                       static_cast<utf8proc_option_t>(options));
      const bool same = len == static_cast<utf8proc_ssize_t>(one.size()) &&
                        std::memcmp(mapped, one.data(), one.size()) == 0;
      std::free(mapped);
      if (!same) {
        set(c);
        continue;
      }
      // A primary composite: its last decomposed character composes with what precedes it.
      // Its first one must not itself be a second element, or neighbours could recompose.
      if (n >= 2) second[static_cast<size_t>(decomposed[n - 1])] = true;
    }
    for (const char32_t c : candidates) {
      if (get(c)) continue;
      utf8proc_int32_t decomposed[32];
      utf8proc_int32_t boundclass = 0;
      const utf8proc_ssize_t n = utf8proc_decompose_char(
          static_cast<utf8proc_int32_t>(c), decomposed, 32,
          static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0)),
          &boundclass);
      if (n >= 1 && second[static_cast<size_t>(decomposed[0])]) set(c);
    }
    if (compose) {
      for (char32_t c = 0; c <= kMaxCodePoint; ++c) {
        if (second[c]) set(c);
      }
    }
  }

  bool get(char32_t c) const { return (bits_[c >> 6] >> (c & 63)) & 1; }

 private:
  void set(char32_t c) { bits_[c >> 6] |= uint64_t{1} << (c & 63); }
  std::vector<uint64_t> bits_;
};

const QuickCheckTable& table(Form form) {
  // Built on first use (a few milliseconds each), immutable afterwards.
  switch (form) {
    case Form::kNfc: {
      static const QuickCheckTable t(Form::kNfc);
      return t;
    }
    case Form::kNfd: {
      static const QuickCheckTable t(Form::kNfd);
      return t;
    }
    case Form::kNfkc: {
      static const QuickCheckTable t(Form::kNfkc);
      return t;
    }
    case Form::kNfkd: {
      static const QuickCheckTable t(Form::kNfkd);
      return t;
    }
  }
  INFERA_CHECK(false);
}

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

}  // namespace

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the well-formed sequence at s[i], or 0 with `consumed` = bytes of its maximal
// ill-formed subpart (at least 1). Table 3-7 of the Unicode standard.
size_t valid_sequence(std::string_view s, size_t i, size_t& consumed) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2;
    lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2;
    hi = 0x9F;
  } else if (b0 == 0xF0) {
    need = 3;
    lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3;
    hi = 0x8F;
  } else {
    consumed = 1;
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size() ||
        !in_range(static_cast<unsigned char>(s[i + k]), k == 1 ? lo : 0x80, k == 1 ? hi : 0xBF)) {
      consumed = k;
      return 0;
    }
  }
  return need + 1;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // ASCII fast path, eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t consumed = 0;
    const size_t len = valid_sequence(s, i, consumed);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    size_t consumed = 0;
    const size_t len = valid_sequence(s, i, consumed);
    if (len > 0) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      append_utf8(out, kReplacementChar);
      i += consumed;
    }
  }
  return out;
}

bool is_white_space(char32_t c) {
  // PropList.txt White_Space (unchanged since Unicode 6.3).
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const utf8proc_category_t cat = category(c);
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL ||
         cat == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  }
  const utf8proc_category_t cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool normalize(std::string_view s, Form form, std::string& out) {
  // ASCII never changes under any form; other characters go through the quick-check table.
  const QuickCheckTable& qc = table(form);
  size_t i = 0;
  bool stable = true;
  while (i < s.size()) {
    if (i + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if ((w & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    if (qc.get(next_char(s, i))) {
      stable = false;
      break;
    }
  }
  if (stable) return false;
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Form::kNfc: options |= UTF8PROC_COMPOSE; break;
    case Form::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case Form::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case Form::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t len =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &mapped,
                   static_cast<utf8proc_option_t>(options));
  if (len < 0) {
    // Only on invalid UTF-8 or allocation failure; the input here is always valid UTF-8.
    std::free(mapped);
    return false;
  }
  out.assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(len));
  std::free(mapped);
  return true;
}

void lowercase(std::string_view s, std::string& out) {
  out.clear();
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
      ++i;
      continue;
    }
    const char32_t c = next_char(s, i);
    if (c == 0x130) {
      // SpecialCasing.txt: the only unconditional multi-character lowercase mapping.
      append_utf8(out, 'i');
      append_utf8(out, 0x307);
      continue;
    }
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
}

}  // namespace infera::tokenizer::unicode
