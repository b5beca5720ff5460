// Normalizers of tokenizer.json ("normalizer"): NFC, NFD, NFKC, NFKD, Lowercase, Replace,
// Prepend, Strip and Sequence, each with the semantics of the Rust `tokenizers` crate.
// Internal to src/infera/tokenizer/. Built once at load, immutable: any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "infera/tokenizer/regex.h"
#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Normalizes `in` (valid UTF-8). Returns false when the result equals `in` (nothing written),
  // true when the result was written to `out`. `at_origin` is cleared when the first
  // character of the result no longer comes from offset 0 of `in` (Rust's offsets_original),
  // which only Metaspace's prepend_scheme "first" cares about.
  virtual bool normalize(std::string_view in, std::string& out, bool& at_origin) const = 0;
  // True when normalizing a text equals normalizing, separately, the two sides of any word cut
  // (an ASCII letter, then a space and an ASCII letter; Tokenizer's chunked encoding).
  virtual bool word_cut_safe() const { return false; }
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::Form form) : form_(form) {
    // Build the form's quick-check table now, at load, not on the first request.
    std::string unused;
    unicode::normalize("", form_, unused);
  }
  bool normalize(std::string_view in, std::string& out, bool& at_origin) const override;
  // ASCII letters and the space are starters that neither decompose nor compose with a
  // neighbour, in every form: nothing on one side of the cut changes the other.
  bool word_cut_safe() const override { return true; }

 private:
  unicode::Form form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  bool normalize(std::string_view in, std::string& out, bool& at_origin) const override;
  bool word_cut_safe() const override { return true; }  // character by character
};

// Replaces every non-overlapping match of `pattern` with `content`.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  bool normalize(std::string_view in, std::string& out, bool& at_origin) const override;

 private:
  Regex pattern_;
  std::string content_;
};

// Prepends `prefix` to non-empty input.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  bool normalize(std::string_view in, std::string& out, bool& at_origin) const override;

 private:
  std::string prefix_;
};

// Strips White_Space from either end.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  bool normalize(std::string_view in, std::string& out, bool& at_origin) const override;

 private:
  bool left_;
  bool right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  bool normalize(std::string_view in, std::string& out, bool& at_origin) const override;
  // Each step keeps the cut's characters as they are, so the next step sees a word cut too.
  bool word_cut_safe() const override {
    for (const auto& s : steps_) {
      if (!s->word_cut_safe()) return false;
    }
    return true;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace infera::tokenizer
