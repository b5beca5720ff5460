#include "infera/tokenizer/pre_tokenizer.h"

#include <array>

#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

using Span = PreTokenizeScratch::Span;

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the other 68 to U+0100.. in
// byte order.
struct ByteLevelTables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 256 + 68> to_byte{};
  ByteLevelTables() {
    to_byte.fill(-1);
    char32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t c = printable ? static_cast<char32_t>(b) : 256 + n++;
      to_char[static_cast<size_t>(b)] = c;
      to_byte[c] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables t;
  return t;
}

// Rust NormalizedString::split: turns the (offsets, is_match) spans that cover a piece into the
// kept sub-pieces for `behavior`, appending them to `out`. Empty sub-pieces are dropped.
void emit_splits(const std::vector<Span>& spans, SplitBehavior behavior, const Piece& parent,
                 std::vector<Piece>& out) {
  auto push = [&](size_t begin, size_t end) {
    if (end > begin) out.push_back({begin, end, parent.at_origin && begin == parent.begin});
  };
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) push(s.begin, s.end);
      return;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) push(s.begin, s.end);
      }
      return;
    case SplitBehavior::kContiguous: {
      bool have = false, previous_match = false;
      size_t begin = 0, end = 0;
      for (const Span& s : spans) {
        if (have && s.is_match == previous_match) {
          end = s.end;
        } else {
          if (have) push(begin, end);
          begin = s.begin;
          end = s.end;
          have = true;
        }
        previous_match = s.is_match;
      }
      if (have) push(begin, end);
      return;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool have = false, previous_match = false;
      size_t begin = 0, end = 0;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && have) {
          end = s.end;
        } else {
          if (have) push(begin, end);
          begin = s.begin;
          end = s.end;
          have = true;
        }
        previous_match = s.is_match;
      }
      if (have) push(begin, end);
      return;
    }
    case SplitBehavior::kMergedWithNext:
      // Rust folds from the right: a match joins the split right after it when that split is
      // not a match itself. The same decision, made left to right.
      for (size_t k = 0; k < spans.size(); ++k) {
        if (spans[k].is_match && k + 1 < spans.size() && !spans[k + 1].is_match) {
          push(spans[k].begin, spans[k + 1].end);
          ++k;
        } else {
          push(spans[k].begin, spans[k].end);
        }
      }
      return;
  }
}

// Rust `Pattern::find_matches` for a regex: the spans covering [begin, end).
void regex_spans(const Regex& re, std::string_view work, const Piece& p, bool invert,
                 std::vector<Span>& spans) {
  spans.clear();
  const std::string_view text = work.substr(p.begin, p.end - p.begin);
  size_t prev = 0;
  const bool complete = re.for_each_match(text, [&](size_t b, size_t e) {
    if (prev != b) spans.push_back({p.begin + prev, p.begin + b, invert});
    spans.push_back({p.begin + b, p.begin + e, !invert});
    prev = e;
  });
  (void)complete;  // on an engine limit the rest of the piece stays one unmatched span
  if (prev != text.size()) spans.push_back({p.begin + prev, p.end, invert});
}

// Isolated keeps every span, so the pieces come straight from the matches (the hot path of the
// GPT-2 / Llama 3 / Qwen pre-tokenizers).
void split_isolated(const Regex& re, std::string_view work, const std::vector<Piece>& pieces,
                    std::vector<Piece>& next) {
  next.clear();
  for (const Piece& p : pieces) {
    const std::string_view text = work.substr(p.begin, p.end - p.begin);
    size_t prev = 0;
    re.for_each_match(text, [&](size_t b, size_t e) {
      if (prev != b) next.push_back({p.begin + prev, p.begin + b, p.at_origin && prev == 0});
      if (e > b) next.push_back({p.begin + b, p.begin + e, p.at_origin && b == 0});
      prev = e;
    });
    if (prev != text.size()) next.push_back({p.begin + prev, p.end, p.at_origin && prev == 0});
  }
}

bool char_matches(CharSplitPreTokenizer::Kind kind, char32_t c) {
  switch (kind) {
    case CharSplitPreTokenizer::Kind::kPunctuation: return unicode::is_punctuation(c);
    case CharSplitPreTokenizer::Kind::kDigit: return unicode::is_numeric(c);
    case CharSplitPreTokenizer::Kind::kWhiteSpace: return unicode::is_white_space(c);
  }
  return false;
}

// Rust `impl Pattern for Fn(char) -> bool`: every matching character is its own match.
void char_spans(CharSplitPreTokenizer::Kind kind, std::string_view work, const Piece& p,
                std::vector<Span>& spans) {
  spans.clear();
  size_t last = p.begin;
  size_t i = p.begin;
  while (i < p.end) {
    const size_t start = i;
    const char32_t c = unicode::next_char(work, i);
    if (char_matches(kind, c)) {
      if (last < start) spans.push_back({last, start, false});
      spans.push_back({start, i, true});
      last = i;
    }
  }
  if (last < p.end) spans.push_back({last, p.end, false});
}

}  // namespace

char32_t byte_level_char(uint8_t byte) { return byte_level_tables().to_char[byte]; }

int byte_level_byte(char32_t c) {
  const auto& t = byte_level_tables().to_byte;
  return c < t.size() ? t[c] : -1;
}

void SplitPreTokenizer::pre_tokenize(std::string& work, std::vector<Piece>& pieces,
                                     PreTokenizeScratch& scratch) const {
  if (behavior_ == SplitBehavior::kIsolated && fast_) {
    // The known patterns match at every position, so the pieces are exactly the matches.
    scratch.next.clear();
    const std::string_view w = work;
    for (const Piece& p : pieces) {
      const std::string_view text = w.substr(0, p.end);
      for (size_t i = p.begin; i < p.end;) {
        const size_t e = fast_->match(text, i);
        scratch.next.push_back({i, e, p.at_origin && i == p.begin});
        i = e;
      }
    }
    pieces.swap(scratch.next);
    return;
  }
  if (behavior_ == SplitBehavior::kIsolated) {
    split_isolated(pattern_, work, pieces, scratch.next);
    pieces.swap(scratch.next);
    return;
  }
  scratch.next.clear();
  for (const Piece& p : pieces) {
    regex_spans(pattern_, work, p, invert_, scratch.spans);
    emit_splits(scratch.spans, behavior_, p, scratch.next);
  }
  pieces.swap(scratch.next);
}

void CharSplitPreTokenizer::pre_tokenize(std::string& work, std::vector<Piece>& pieces,
                                         PreTokenizeScratch& scratch) const {
  scratch.next.clear();
  for (const Piece& p : pieces) {
    char_spans(kind_, work, p, scratch.spans);
    emit_splits(scratch.spans, behavior_, p, scratch.next);
  }
  pieces.swap(scratch.next);
}

void ByteLevelPreTokenizer::pre_tokenize(std::string& work, std::vector<Piece>& pieces,
                                         PreTokenizeScratch& scratch) const {
  if (add_prefix_space_) {
    for (Piece& p : pieces) {
      if (work[p.begin] == ' ') continue;
      const size_t begin = work.size();
      const size_t len = p.end - p.begin;
      work.reserve(begin + 1 + len);  // appending from itself: no reallocation mid-copy
      work.push_back(' ');
      work.append(work.data() + p.begin, len);
      p.begin = begin;
      p.end = work.size();
    }
  }
  if (split_) {
    split_isolated(*split_, work, pieces, scratch.next);
    pieces.swap(scratch.next);
  }
  if (map_bytes_) {
    const ByteLevelTables& t = byte_level_tables();
    for (Piece& p : pieces) {
      const size_t begin = work.size();
      for (size_t i = p.begin; i < p.end; ++i) {
        unicode::append_utf8(work, t.to_char[static_cast<unsigned char>(work[i])]);
      }
      p.begin = begin;
      p.end = work.size();
    }
  }
}

MetaspacePreTokenizer::MetaspacePreTokenizer(char32_t replacement, Prepend prepend, bool split)
    : replacement_(replacement), prepend_(prepend), split_(split) {
  unicode::append_utf8(replacement_utf8_, replacement_);
}

void MetaspacePreTokenizer::pre_tokenize(std::string& work, std::vector<Piece>& pieces,
                                         PreTokenizeScratch& scratch) const {
  scratch.next.clear();
  for (const Piece& p : pieces) {
    // Replace spaces, then prepend the replacement when the scheme asks for it.
    const size_t begin = work.size();
    const bool starts_with_space = work[p.begin] == ' ';
    const bool starts_with_replacement =
        starts_with_space ||
        std::string_view(work).substr(p.begin, p.end - p.begin).starts_with(replacement_utf8_);
    const bool prepend =
        !starts_with_replacement &&
        (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_origin));
    if (prepend) work.append(replacement_utf8_);
    for (size_t i = p.begin; i < p.end; ++i) {
      if (work[i] == ' ') {
        work.append(replacement_utf8_);
      } else {
        work.push_back(work[i]);
      }
    }
    const Piece replaced{begin, work.size(), p.at_origin};
    if (!split_) {
      if (replaced.end > replaced.begin) scratch.next.push_back(replaced);
      continue;
    }
    // Split on each replacement character, MergedWithNext.
    scratch.spans.clear();
    size_t last = replaced.begin;
    size_t i = replaced.begin;
    while (i < replaced.end) {
      const size_t start = i;
      const char32_t c = unicode::next_char(work, i);
      if (c == replacement_) {
        if (last < start) scratch.spans.push_back({last, start, false});
        scratch.spans.push_back({start, i, true});
        last = i;
      }
    }
    if (last < replaced.end) scratch.spans.push_back({last, replaced.end, false});
    emit_splits(scratch.spans, SplitBehavior::kMergedWithNext, replaced, scratch.next);
  }
  pieces.swap(scratch.next);
}

void SequencePreTokenizer::pre_tokenize(std::string& work, std::vector<Piece>& pieces,
                                        PreTokenizeScratch& scratch) const {
  for (const auto& step : steps_) step->pre_tokenize(work, pieces, scratch);
}

}  // namespace infera::tokenizer
