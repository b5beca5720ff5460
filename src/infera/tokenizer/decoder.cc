#include "infera/tokenizer/decoder.h"

#include "infera/tokenizer/pre_tokenizer.h"
#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Rust u8::from_str_radix(s, 16) for a two-byte string (a leading '+' is accepted).
int parse_byte(std::string_view s) {
  if (s.size() != 2) return -1;
  if (s[0] == '+') return hex_value(s[1]);
  const int hi = hex_value(s[0]), lo = hex_value(s[1]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

void ByteLevelDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string bytes;
  for (const std::string& t : tokens) {
    // A token decodes through the byte map only if every character is in it; otherwise its
    // own UTF-8 bytes are used (Rust's try_fold ... unwrap_or_else).
    const size_t mark = bytes.size();
    bool all = true;
    size_t i = 0;
    while (i < t.size()) {
      const int b = byte_level_byte(unicode::next_char(t, i));
      if (b < 0) {
        all = false;
        break;
      }
      bytes.push_back(static_cast<char>(b));
    }
    if (!all) {
      bytes.resize(mark);
      bytes.append(t);
    }
  }
  tokens.assign(1, unicode::is_valid_utf8(bytes) ? bytes : unicode::to_valid_utf8(bytes));
}

void ReplaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string out;
  for (std::string& t : tokens) {
    out.clear();
    size_t last = 0;
    pattern_.for_each_match(t, [&](size_t begin, size_t end) {
      out.append(t, last, begin - last);
      out.append(content_);
      last = end;
    });
    out.append(t, last, std::string::npos);
    t.swap(out);
  }
}

void ByteFallbackDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> result;
  result.reserve(tokens.size());
  std::string pending;
  auto flush = [&] {
    if (pending.empty()) return;
    if (unicode::is_valid_utf8(pending)) {
      result.push_back(pending);
    } else {
      for (size_t k = 0; k < pending.size(); ++k) result.emplace_back("\xEF\xBF\xBD");
    }
    pending.clear();
  };
  for (std::string& t : tokens) {
    int byte = -1;
    if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>') {
      byte = parse_byte(std::string_view(t).substr(3, 2));
    }
    if (byte >= 0) {
      pending.push_back(static_cast<char>(byte));
    } else {
      flush();
      result.push_back(std::move(t));
    }
  }
  flush();
  tokens.swap(result);
}

void FuseDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string all;
  for (const std::string& t : tokens) all += t;
  tokens.clear();
  tokens.push_back(std::move(all));  // assign(1, x) would copy
}

void StripDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<size_t> starts;
  for (std::string& t : tokens) {
    // Character boundaries of t.
    starts.clear();
    size_t i = 0;
    std::vector<char32_t> chars;
    while (i < t.size()) {
      starts.push_back(i);
      chars.push_back(unicode::next_char(t, i));
    }
    starts.push_back(t.size());
    size_t start_cut = 0;
    for (size_t k = 0; k < start_ && k < chars.size(); ++k) {
      if (chars[k] != content_) break;
      start_cut = k + 1;
    }
    size_t stop_cut = chars.size();
    for (size_t k = 0; k < stop_ && k < chars.size(); ++k) {
      const size_t index = chars.size() - k - 1;
      if (chars[index] != content_) break;
      stop_cut = index;
    }
    // Rust would panic when the cuts cross; an empty token is the sane reading.
    if (stop_cut < start_cut) stop_cut = start_cut;
    t = t.substr(starts[start_cut], starts[stop_cut] - starts[start_cut]);
  }
}

void MetaspaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string out;
  for (size_t k = 0; k < tokens.size(); ++k) {
    const std::string& t = tokens[k];
    out.clear();
    size_t i = 0;
    while (i < t.size()) {
      const size_t start = i;
      const char32_t c = unicode::next_char(t, i);
      if (c == replacement_) {
        if (!(k == 0 && drop_in_first_)) out.push_back(' ');
      } else {
        out.append(t, start, i - start);
      }
    }
    tokens[k].swap(out);
  }
}

}  // namespace infera::tokenizer
