#include "infera/tokenizer/normalizer.h"

namespace infera::tokenizer {

bool UnicodeNormalizer::normalize(std::string_view in, std::string& out, bool&) const {
  return unicode::normalize(in, form_, out);
}

bool LowercaseNormalizer::normalize(std::string_view in, std::string& out, bool&) const {
  bool any = false;
  for (const char c : in) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x80 || (b >= 'A' && b <= 'Z')) {
      any = true;
      break;
    }
  }
  if (!any) return false;
  unicode::lowercase(in, out);
  return out != in;
}

bool ReplaceNormalizer::normalize(std::string_view in, std::string& out, bool& at_origin) const {
  out.clear();
  size_t last = 0;
  bool replaced = false;
  pattern_.for_each_match(in, [&](size_t begin, size_t end) {
    out.append(in.substr(last, begin - last));
    out.append(content_);
    if (begin == 0 && end > 0 && content_.empty()) at_origin = false;
    last = end;
    replaced = true;
  });
  if (!replaced) return false;
  out.append(in.substr(last));
  return true;
}

bool PrependNormalizer::normalize(std::string_view in, std::string& out, bool&) const {
  if (in.empty() || prefix_.empty()) return false;
  out.clear();
  out.reserve(prefix_.size() + in.size());
  out.append(prefix_);
  out.append(in);
  return true;
}

bool StripNormalizer::normalize(std::string_view in, std::string& out, bool& at_origin) const {
  size_t begin = 0, end = in.size();
  if (left_) {
    while (begin < end) {
      size_t i = begin;
      if (!unicode::is_white_space(unicode::next_char(in, i))) break;
      begin = i;
    }
  }
  if (right_) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(in[start]) & 0xC0) == 0x80) --start;
      size_t i = start;
      if (!unicode::is_white_space(unicode::next_char(in, i))) break;
      end = start;
    }
  }
  if (begin == 0 && end == in.size()) return false;
  if (begin > 0) at_origin = false;
  out.assign(in.substr(begin, end - begin));
  return true;
}

bool SequenceNormalizer::normalize(std::string_view in, std::string& out, bool& at_origin) const {
  // Ping-pong between `out` and a local buffer; `current` always views the latest result.
  std::string other;
  std::string_view current = in;
  bool changed = false;
  bool in_out = false;  // whether `current` lives in `out` (else in `other` or the input)
  for (const auto& step : steps_) {
    std::string& target = in_out ? other : out;
    if (step->normalize(current, target, at_origin)) {
      current = target;
      in_out = &target == &out;
      changed = true;
    }
  }
  if (!changed) return false;
  if (!in_out) out.assign(current);
  return true;
}

}  // namespace infera::tokenizer
