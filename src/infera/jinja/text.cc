#include "infera/jinja/text.h"

#include <utf8proc.h>

#include <algorithm>
#include <iterator>
#include <vector>

namespace infera::jinja::text {
namespace {
// Python's surrogateescape: an invalid byte b decodes to the lone surrogate U+DC00 + b, which no
// character class matches, and encodes back to b.
constexpr char32_t kEscapeBase = 0xDC00;
}  // namespace

char32_t decode(std::string_view s, size_t* i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const size_t at = *i;
  const unsigned char c0 = p[at];
  if (c0 < 0x80) {
    *i = at + 1;
    return c0;
  }
  size_t len = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if ((c0 & 0xE0) == 0xC0) {
    len = 2;
    cp = c0 & 0x1F;
    min = 0x80;
  } else if ((c0 & 0xF0) == 0xE0) {
    len = 3;
    cp = c0 & 0x0F;
    min = 0x800;
  } else if ((c0 & 0xF8) == 0xF0) {
    len = 4;
    cp = c0 & 0x07;
    min = 0x10000;
  }
  if (len == 0 || at + len > n) {
    *i = at + 1;
    return kEscapeBase + c0;
  }
  for (size_t k = 1; k < len; ++k) {
    const unsigned char c = p[at + k];
    if ((c & 0xC0) != 0x80) {
      *i = at + 1;
      return kEscapeBase + c0;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    *i = at + 1;
    return kEscapeBase + c0;
  }
  *i = at + len;
  return cp;
}

void append_utf8(std::string* out, char32_t c) {
  if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF) {
    out->push_back(static_cast<char>(c - kEscapeBase));  // an escaped invalid byte goes back as is
  } else if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

size_t length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) decode(s, &i);
  return n;
}

size_t byte_offset(std::string_view s, size_t index) {
  size_t i = 0;
  for (size_t k = 0; k < index && i < s.size(); ++k) decode(s, &i);
  return i;
}

namespace {
// Unconditional SpecialCasing.txt mappings to more than one code point (Unicode 14.0, which
// CPython 3.11's str.upper / str.title apply; utf8proc only has the one-to-one mappings).
// Listed with: python3 -c "print([(hex(c), chr(c).upper()) for c in range(0x110000)
//                                 if len(chr(c).upper()) > 1])"  (and .title()).
struct Special {
  char32_t code;
  const char* utf8;
};
constexpr Special kUpperSpecial[] = {
    {0xDF, "\x53\x53"},
    {0x149, "\xca\xbc\x4e"},
    {0x1F0, "\x4a\xcc\x8c"},
    {0x390, "\xce\x99\xcc\x88\xcc\x81"},
    {0x3B0, "\xce\xa5\xcc\x88\xcc\x81"},
    {0x587, "\xd4\xb5\xd5\x92"},
    {0x1E96, "\x48\xcc\xb1"},
    {0x1E97, "\x54\xcc\x88"},
    {0x1E98, "\x57\xcc\x8a"},
    {0x1E99, "\x59\xcc\x8a"},
    {0x1E9A, "\x41\xca\xbe"},
    {0x1F50, "\xce\xa5\xcc\x93"},
    {0x1F52, "\xce\xa5\xcc\x93\xcc\x80"},
    {0x1F54, "\xce\xa5\xcc\x93\xcc\x81"},
    {0x1F56, "\xce\xa5\xcc\x93\xcd\x82"},
    {0x1F80, "\xe1\xbc\x88\xce\x99"},
    {0x1F81, "\xe1\xbc\x89\xce\x99"},
    {0x1F82, "\xe1\xbc\x8a\xce\x99"},
    {0x1F83, "\xe1\xbc\x8b\xce\x99"},
    {0x1F84, "\xe1\xbc\x8c\xce\x99"},
    {0x1F85, "\xe1\xbc\x8d\xce\x99"},
    {0x1F86, "\xe1\xbc\x8e\xce\x99"},
    {0x1F87, "\xe1\xbc\x8f\xce\x99"},
    {0x1F88, "\xe1\xbc\x88\xce\x99"},
    {0x1F89, "\xe1\xbc\x89\xce\x99"},
    {0x1F8A, "\xe1\xbc\x8a\xce\x99"},
    {0x1F8B, "\xe1\xbc\x8b\xce\x99"},
    {0x1F8C, "\xe1\xbc\x8c\xce\x99"},
    {0x1F8D, "\xe1\xbc\x8d\xce\x99"},
    {0x1F8E, "\xe1\xbc\x8e\xce\x99"},
    {0x1F8F, "\xe1\xbc\x8f\xce\x99"},
    {0x1F90, "\xe1\xbc\xa8\xce\x99"},
    {0x1F91, "\xe1\xbc\xa9\xce\x99"},
    {0x1F92, "\xe1\xbc\xaa\xce\x99"},
    {0x1F93, "\xe1\xbc\xab\xce\x99"},
    {0x1F94, "\xe1\xbc\xac\xce\x99"},
    {0x1F95, "\xe1\xbc\xad\xce\x99"},
    {0x1F96, "\xe1\xbc\xae\xce\x99"},
    {0x1F97, "\xe1\xbc\xaf\xce\x99"},
    {0x1F98, "\xe1\xbc\xa8\xce\x99"},
    {0x1F99, "\xe1\xbc\xa9\xce\x99"},
    {0x1F9A, "\xe1\xbc\xaa\xce\x99"},
    {0x1F9B, "\xe1\xbc\xab\xce\x99"},
    {0x1F9C, "\xe1\xbc\xac\xce\x99"},
    {0x1F9D, "\xe1\xbc\xad\xce\x99"},
    {0x1F9E, "\xe1\xbc\xae\xce\x99"},
    {0x1F9F, "\xe1\xbc\xaf\xce\x99"},
    {0x1FA0, "\xe1\xbd\xa8\xce\x99"},
    {0x1FA1, "\xe1\xbd\xa9\xce\x99"},
    {0x1FA2, "\xe1\xbd\xaa\xce\x99"},
    {0x1FA3, "\xe1\xbd\xab\xce\x99"},
    {0x1FA4, "\xe1\xbd\xac\xce\x99"},
    {0x1FA5, "\xe1\xbd\xad\xce\x99"},
    {0x1FA6, "\xe1\xbd\xae\xce\x99"},
    {0x1FA7, "\xe1\xbd\xaf\xce\x99"},
    {0x1FA8, "\xe1\xbd\xa8\xce\x99"},
    {0x1FA9, "\xe1\xbd\xa9\xce\x99"},
    {0x1FAA, "\xe1\xbd\xaa\xce\x99"},
    {0x1FAB, "\xe1\xbd\xab\xce\x99"},
    {0x1FAC, "\xe1\xbd\xac\xce\x99"},
    {0x1FAD, "\xe1\xbd\xad\xce\x99"},
    {0x1FAE, "\xe1\xbd\xae\xce\x99"},
    {0x1FAF, "\xe1\xbd\xaf\xce\x99"},
    {0x1FB2, "\xe1\xbe\xba\xce\x99"},
    {0x1FB3, "\xce\x91\xce\x99"},
    {0x1FB4, "\xce\x86\xce\x99"},
    {0x1FB6, "\xce\x91\xcd\x82"},
    {0x1FB7, "\xce\x91\xcd\x82\xce\x99"},
    {0x1FBC, "\xce\x91\xce\x99"},
    {0x1FC2, "\xe1\xbf\x8a\xce\x99"},
    {0x1FC3, "\xce\x97\xce\x99"},
    {0x1FC4, "\xce\x89\xce\x99"},
    {0x1FC6, "\xce\x97\xcd\x82"},
    {0x1FC7, "\xce\x97\xcd\x82\xce\x99"},
    {0x1FCC, "\xce\x97\xce\x99"},
    {0x1FD2, "\xce\x99\xcc\x88\xcc\x80"},
    {0x1FD3, "\xce\x99\xcc\x88\xcc\x81"},
    {0x1FD6, "\xce\x99\xcd\x82"},
    {0x1FD7, "\xce\x99\xcc\x88\xcd\x82"},
    {0x1FE2, "\xce\xa5\xcc\x88\xcc\x80"},
    {0x1FE3, "\xce\xa5\xcc\x88\xcc\x81"},
    {0x1FE4, "\xce\xa1\xcc\x93"},
    {0x1FE6, "\xce\xa5\xcd\x82"},
    {0x1FE7, "\xce\xa5\xcc\x88\xcd\x82"},
    {0x1FF2, "\xe1\xbf\xba\xce\x99"},
    {0x1FF3, "\xce\xa9\xce\x99"},
    {0x1FF4, "\xce\x8f\xce\x99"},
    {0x1FF6, "\xce\xa9\xcd\x82"},
    {0x1FF7, "\xce\xa9\xcd\x82\xce\x99"},
    {0x1FFC, "\xce\xa9\xce\x99"},
    {0xFB00, "\x46\x46"},
    {0xFB01, "\x46\x49"},
    {0xFB02, "\x46\x4c"},
    {0xFB03, "\x46\x46\x49"},
    {0xFB04, "\x46\x46\x4c"},
    {0xFB05, "\x53\x54"},
    {0xFB06, "\x53\x54"},
    {0xFB13, "\xd5\x84\xd5\x86"},
    {0xFB14, "\xd5\x84\xd4\xb5"},
    {0xFB15, "\xd5\x84\xd4\xbb"},
    {0xFB16, "\xd5\x8e\xd5\x86"},
    {0xFB17, "\xd5\x84\xd4\xbd"},
};
constexpr Special kTitleSpecial[] = {
    {0xDF, "\x53\x73"},
    {0x149, "\xca\xbc\x4e"},
    {0x1F0, "\x4a\xcc\x8c"},
    {0x390, "\xce\x99\xcc\x88\xcc\x81"},
    {0x3B0, "\xce\xa5\xcc\x88\xcc\x81"},
    {0x587, "\xd4\xb5\xd6\x82"},
    {0x1E96, "\x48\xcc\xb1"},
    {0x1E97, "\x54\xcc\x88"},
    {0x1E98, "\x57\xcc\x8a"},
    {0x1E99, "\x59\xcc\x8a"},
    {0x1E9A, "\x41\xca\xbe"},
    {0x1F50, "\xce\xa5\xcc\x93"},
    {0x1F52, "\xce\xa5\xcc\x93\xcc\x80"},
    {0x1F54, "\xce\xa5\xcc\x93\xcc\x81"},
    {0x1F56, "\xce\xa5\xcc\x93\xcd\x82"},
    {0x1FB2, "\xe1\xbe\xba\xcd\x85"},
    {0x1FB4, "\xce\x86\xcd\x85"},
    {0x1FB6, "\xce\x91\xcd\x82"},
    {0x1FB7, "\xce\x91\xcd\x82\xcd\x85"},
    {0x1FC2, "\xe1\xbf\x8a\xcd\x85"},
    {0x1FC4, "\xce\x89\xcd\x85"},
    {0x1FC6, "\xce\x97\xcd\x82"},
    {0x1FC7, "\xce\x97\xcd\x82\xcd\x85"},
    {0x1FD2, "\xce\x99\xcc\x88\xcc\x80"},
    {0x1FD3, "\xce\x99\xcc\x88\xcc\x81"},
    {0x1FD6, "\xce\x99\xcd\x82"},
    {0x1FD7, "\xce\x99\xcc\x88\xcd\x82"},
    {0x1FE2, "\xce\xa5\xcc\x88\xcc\x80"},
    {0x1FE3, "\xce\xa5\xcc\x88\xcc\x81"},
    {0x1FE4, "\xce\xa1\xcc\x93"},
    {0x1FE6, "\xce\xa5\xcd\x82"},
    {0x1FE7, "\xce\xa5\xcc\x88\xcd\x82"},
    {0x1FF2, "\xe1\xbf\xba\xcd\x85"},
    {0x1FF4, "\xce\x8f\xcd\x85"},
    {0x1FF6, "\xce\xa9\xcd\x82"},
    {0x1FF7, "\xce\xa9\xcd\x82\xcd\x85"},
    {0xFB00, "\x46\x66"},
    {0xFB01, "\x46\x69"},
    {0xFB02, "\x46\x6c"},
    {0xFB03, "\x46\x66\x69"},
    {0xFB04, "\x46\x66\x6c"},
    {0xFB05, "\x53\x74"},
    {0xFB06, "\x53\x74"},
    {0xFB13, "\xd5\x84\xd5\xb6"},
    {0xFB14, "\xd5\x84\xd5\xa5"},
    {0xFB15, "\xd5\x84\xd5\xab"},
    {0xFB16, "\xd5\x8e\xd5\xb6"},
    {0xFB17, "\xd5\x84\xd5\xad"},
};

const char* special(const Special* table, size_t n, char32_t c) {
  const Special* end = table + n;
  const Special* it =
      std::lower_bound(table, end, c, [](const Special& s, char32_t v) { return s.code < v; });
  return (it != end && it->code == c) ? it->utf8 : nullptr;
}

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}
}  // namespace

bool is_space(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_printable(char32_t c) {
  if (c < 0x80) return c >= 0x20 && c < 0x7F;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool is_upper(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z';
  return category(c) == UTF8PROC_CATEGORY_LU;
}

bool is_lower(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z';
  return category(c) == UTF8PROC_CATEGORY_LL;
}

bool is_cased(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

bool is_decimal(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return category(c) == UTF8PROC_CATEGORY_ND;
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

bool is_word(char32_t c) {
  return c == '_' || is_alpha(c) || is_numeric(c);
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}

char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

char32_t to_title(char32_t c) {
  if (c < 0x80) return to_upper(c);
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

size_t space_at(std::string_view s, size_t i) {
  const auto c0 = static_cast<unsigned char>(s[i]);
  if (c0 < 0x80) return is_space(c0) ? 1 : 0;
  size_t j = i;
  const char32_t c = decode(s, &j);
  return is_space(c) ? j - i : 0;
}

std::string_view strip_space(std::string_view s, bool left, bool right) {
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      const size_t k = space_at(s, begin);
      if (k == 0) break;
      begin += k;
    }
  }
  if (right) {
    // From the end: one byte per ASCII character, a decode only for non-ASCII ones.
    while (end > begin) {
      const auto c = static_cast<unsigned char>(s[end - 1]);
      if (c < 0x80) {
        if (!is_space(c)) break;
        --end;
        continue;
      }
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 &&
             end - start < 4)
        --start;
      size_t j = start;
      const char32_t cp = decode(s, &j);
      if (j != end || !is_space(cp)) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

std::string_view strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  if (is_ascii(chars)) {  // byte scans: a non-ASCII byte is never in an ASCII set
    auto in_ascii_set = [&](char c) {
      return static_cast<unsigned char>(c) < 0x80 && chars.find(c) != std::string_view::npos;
    };
    size_t begin = 0;
    size_t end = s.size();
    while (left && begin < end && in_ascii_set(s[begin])) ++begin;
    while (right && end > begin && in_ascii_set(s[end - 1])) --end;
    return s.substr(begin, end - begin);
  }
  auto in_set = [&](char32_t c) {
    for (size_t i = 0; i < chars.size();) {
      if (decode(chars, &i) == c) return true;
    }
    return false;
  };
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      size_t j = begin;
      if (!in_set(decode(s, &j))) break;
      begin = j;
    }
  }
  if (right) {
    size_t last = begin;
    for (size_t i = begin; i < end;) {
      if (!in_set(decode(s, &i))) last = i;
    }
    end = last;
  }
  return s.substr(begin, end - begin);
}

std::vector<std::string_view> split_lines(std::string_view s, bool keepends) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < s.size()) {
    const size_t at = i;
    const char32_t c = decode(s, &i);
    if (!is_line_break(c)) continue;
    size_t end = i;
    if (c == '\r' && i < s.size() && s[i] == '\n') end = ++i;
    lines.push_back(s.substr(start, (keepends ? end : at) - start));
    start = i;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

// CPython's pad() for center: the odd column goes left when the width is odd.
std::string center(std::string_view s, size_t width, std::string_view fill) {
  const size_t len = length(s);
  if (len >= width) return std::string(s);
  const size_t marg = width - len;
  const size_t left = marg / 2 + (marg & width & 1);
  std::string out;
  for (size_t i = 0; i < left; ++i) out.append(fill);
  out.append(s);
  for (size_t i = 0; i < marg - left; ++i) out.append(fill);
  return out;
}

bool all_space(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    const size_t k = space_at(s, i);
    if (k == 0) return false;
    i += k;
  }
  return true;
}

}  // namespace infera::jinja::text

namespace infera::jinja::text {
namespace {

// Unicode Case_Ignorable, approximately: marks, format characters, modifier letters and
// symbols, and the word-internal punctuation of Unicode's Word_Break MidLetter/MidNumLet.
bool is_case_ignorable(char32_t c) {
  switch (c) {
    case 0x27:
    case 0x2E:
    case 0x3A:
    case 0x5E:
    case 0x60:
    case 0xA8:
    case 0xAD:
    case 0xAF:
    case 0xB4:
    case 0xB7:
    case 0xB8:
    case 0x2018:
    case 0x2019:
    case 0x2024:
    case 0x2027:
      return true;
    default:
      break;
  }
  if (c < 0x80) return false;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      return false;
  }
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) cps.push_back(decode(s, &i));
  return cps;
}

// CPython lower_ucs4: U+0130 lowers to "i\u0307", capital sigma to final sigma at a word end.
void append_lower_at(const std::vector<char32_t>& cps, size_t i, std::string* out) {
  const char32_t c = cps[i];
  if (c == 0x130) {
    out->append("i\xcc\x87");
    return;
  }
  if (c == 0x3A3) {  // handle_capital_sigma: \p{cased}\p{case-ignorable}* SIGMA
                     // !(\p{case-ignorable}*\p{cased})
    size_t j = i;
    char32_t before = 0;
    bool found = false;
    while (j > 0) {
      before = cps[--j];
      if (!is_case_ignorable(before)) {
        found = true;
        break;
      }
    }
    bool final_sigma = found && is_cased(before);
    if (final_sigma) {
      size_t k = i + 1;
      while (k < cps.size() && is_case_ignorable(cps[k])) ++k;
      final_sigma = k == cps.size() || !is_cased(cps[k]);
    }
    append_utf8(out, final_sigma ? 0x3C2 : 0x3C3);
    return;
  }
  append_utf8(out, to_lower(c));
}

}  // namespace

void append_upper(std::string* out, char32_t c) {
  if (const char* s = c >= 0xDF ? special(kUpperSpecial, std::size(kUpperSpecial), c) : nullptr) {
    out->append(s);
  } else {
    append_utf8(out, to_upper(c));
  }
}

void append_title(std::string* out, char32_t c) {
  if (const char* s = c >= 0xDF ? special(kTitleSpecial, std::size(kTitleSpecial), c) : nullptr) {
    out->append(s);
  } else {
    append_utf8(out, to_title(c));
  }
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_upper(&out, decode(s, &i));
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  if (is_ascii(s)) {
    for (char c : s) out.push_back(static_cast<char>(to_lower(static_cast<unsigned char>(c))));
    return out;
  }
  const std::vector<char32_t> cps = code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) append_lower_at(cps, i, &out);
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  const std::vector<char32_t> cps = code_points(s);
  bool previous_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (previous_cased) {
      append_lower_at(cps, i, &out);
    } else {
      append_title(&out, cps[i]);
    }
    previous_cased = is_cased(cps[i]);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  const std::vector<char32_t> cps = code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      append_title(&out, cps[i]);
    } else {
      append_lower_at(cps, i, &out);
    }
  }
  return out;
}

}  // namespace infera::jinja::text
