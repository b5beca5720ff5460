// FastSplit: the split patterns of the GPT-4 family (Llama 3's and Qwen2/Qwen3's tokenizer.json)
// matched by a hand-written scanner that reproduces the regex engine's alternation and
// backtracking order exactly, so the hottest pre-tokenizer skips a regex call per word.
// Character classes come from PCRE2 itself (\p{L}, \p{N}, \p{White_Space} evaluated once per
// process over every code point), so the scanner and the Regex path cannot disagree on Unicode
// data; tests and the fuzz target compare both on arbitrary input. Immutable: any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

namespace infera::tokenizer {

class FastSplit {
 public:
  // A scanner for `pattern` (Oniguruma source, as in tokenizer.json), or null when the pattern is
  // not one of the known ones.
  static std::unique_ptr<FastSplit> for_pattern(std::string_view pattern);

  // End of the regex match that starts at text[i] (the patterns match at every position, so
  // there is always one and it is not empty). `text` must be valid UTF-8, i < text.size().
  size_t match(std::string_view text, size_t i) const;

 private:
  explicit FastSplit(size_t max_digits) : max_digits_(max_digits) {}
  size_t max_digits_;  // \p{N} repeats: 1 (Qwen) or up to 3 (Llama 3)
};

}  // namespace infera::tokenizer
