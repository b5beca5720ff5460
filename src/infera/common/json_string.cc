#include "infera/common/json_string.h"

#include <cstdint>

namespace infera {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF).
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  const size_t left = s.size() - i;
  auto cont = [&](size_t k) { return (static_cast<uint8_t>(s[i + k]) & 0xC0) == 0x80; };
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return left >= 2 && cont(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (left < 3 || !cont(1) || !cont(2)) return 0;
    const auto b1 = static_cast<uint8_t>(s[i + 1]);
    if (b0 == 0xE0 && b1 < 0xA0) return 0;  // overlong
    if (b0 == 0xED && b1 > 0x9F) return 0;  // UTF-16 surrogates
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (left < 4 || !cont(1) || !cont(2) || !cont(3)) return 0;
    const auto b1 = static_cast<uint8_t>(s[i + 1]);
    if (b0 == 0xF0 && b1 < 0x90) return 0;  // overlong
    if (b0 == 0xF4 && b1 > 0x8F) return 0;  // > U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t i = 0;
  while (i < text.size()) {
    // A run of bytes that go out as they are, appended at once (most strings are one run).
    size_t j = i;
    while (j < text.size()) {
      const auto b = static_cast<uint8_t>(text[j]);
      if (b < 0x20 || b >= 0x7F || b == '"' || b == '\\') break;
      ++j;
    }
    out.append(text.data() + i, j - i);
    i = j;
    if (i == text.size()) break;
    const auto c = static_cast<uint8_t>(text[i]);
    if (c >= 0x80) {
      const size_t n = utf8_sequence_length(text, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD for one invalid byte
        ++i;
      } else {
        out.append(text.data() + i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xF]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
}

}  // namespace infera
