// Regex: tokenizer.json's Oniguruma patterns (the Rust crate compiles them with Oniguruma, Ruby
// syntax) translated to PCRE2, run with UTF + UCP and the JIT. The translation keeps Oniguruma's
// meaning where PCRE2 differs (\s is White_Space, \d is \p{Nd}, \w is Oniguruma's word set, \h a
// hex digit, \v U+000B, ^/$ line anchors, (?m) dot-all, {,n} {0,n}); what PCRE2 cannot express
// (class intersection `&&`, negated nested classes) is a load error naming the pattern.
// Immutable and shared; matching uses per-thread scratch, so any thread may match concurrently.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "infera/common/status.h"

namespace infera::tokenizer {

class Regex {
 public:
  // `pattern` in Oniguruma (Ruby) syntax, as found in tokenizer.json "Regex" fields.
  static Result<Regex> compile(std::string_view pattern);
  // Matches `text` literally (tokenizer.json "String" patterns).
  static Result<Regex> literal(std::string_view text);

  // Calls on_match(begin, end) (byte offsets) for each match, left to right, non-overlapping.
  // After an empty match the search resumes one character later, as Oniguruma's iterator does.
  // `text` must be valid UTF-8. Returns false if the engine gave up (JIT stack or match limit on
  // adversarial input): matches reported so far stand, the rest of the text had none.
  template <typename OnMatch>
  bool for_each_match(std::string_view text, OnMatch&& on_match) const {
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t begin = 0, end = 0;
      const int rc = match_at(text, pos, begin, end);
      if (rc == 0) return true;
      if (rc < 0) return false;
      on_match(begin, end);
      if (end > begin) {
        pos = end;
      } else {
        if (end >= text.size()) return true;
        pos = end + char_len_at(text, end);
      }
    }
    return true;
  }

  // End of the match that starts exactly at text[pos], if there is one. Patterns meant for
  // this start with \G, so the engine does not scan ahead.
  std::optional<size_t> match_here(std::string_view text, size_t pos) const {
    size_t begin = 0, end = 0;
    if (match_at(text, pos, begin, end) == 1 && begin == pos) return end;
    return std::nullopt;
  }

  const std::string& source() const { return source_; }
  const std::string& translated() const { return translated_; }

 private:
  struct Code;
  Regex(std::shared_ptr<const Code> code, std::string source, std::string translated)
      : code_(std::move(code)), source_(std::move(source)), translated_(std::move(translated)) {}
  static Result<Regex> compile_pcre2(std::string source, std::string translated);
  // 1: match found in [begin, end); 0: no match; -1: engine error.
  int match_at(std::string_view text, size_t start, size_t& begin, size_t& end) const;
  static size_t char_len_at(std::string_view text, size_t i);

  std::shared_ptr<const Code> code_;
  std::string source_;
  std::string translated_;
};

// Exposed for tests: the PCRE2 pattern for an Oniguruma pattern, or why there is none.
Result<std::string> translate_oniguruma(std::string_view pattern);

}  // namespace infera::tokenizer
