// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split, ByteLevel, Metaspace, Digits,
// Punctuation, Whitespace, WhitespaceSplit and Sequence, with the split behaviours of the Rust
// `tokenizers` crate (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous;
// invert). Pieces are byte ranges of one work buffer, so splitting allocates nothing per piece;
// transforms (ByteLevel's byte-to-char map, Metaspace's replacement) append to the buffer.
// Internal to src/infera/tokenizer/. Built once at load, immutable: any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "infera/tokenizer/fast_split.h"
#include "infera/tokenizer/regex.h"

namespace infera::tokenizer {

// Bytes [begin, end) of the work buffer. `at_origin`: starts at offset 0 of the original text
// (Rust offsets_original().0 == 0), for Metaspace's prepend_scheme "first".
struct Piece {
  size_t begin = 0;
  size_t end = 0;
  bool at_origin = false;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Per-call scratch shared by the pre-tokenizers of one encode call.
struct PreTokenizeScratch {
  std::vector<Piece> next;
  struct Span {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Span> spans;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits (empty splits dropped, as Rust does). May append text to
  // `work`; piece offsets stay valid because they are offsets, not pointers.
  virtual void pre_tokenize(std::string& work, std::vector<Piece>& pieces,
                            PreTokenizeScratch& scratch) const = 0;
  // True when every word cut (an ASCII letter, then a space and an ASCII letter) ends a piece
  // and the pieces after it do not depend on the text before it, so that the pieces of a text
  // are those of its two sides (Tokenizer's chunked encoding).
  virtual bool word_cut_safe() const { return false; }
};

// Split with a regex or literal pattern; `fast` (optional) matches the same pattern without the
// regex engine (FastSplit) and is used for the Isolated behaviour.
class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex pattern, SplitBehavior behavior, bool invert,
                    std::unique_ptr<FastSplit> fast = nullptr)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert), fast_(std::move(fast)) {}
  void pre_tokenize(std::string& work, std::vector<Piece>& pieces,
                    PreTokenizeScratch& scratch) const override;
  // FastSplit's patterns (GPT-4 family): no alternative matches a letter and then a space, and
  // none looks behind, so a match ends at the letter and the next starts at the space.
  bool word_cut_safe() const override {
    return fast_ != nullptr && behavior_ == SplitBehavior::kIsolated && !invert_;
  }

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
  std::unique_ptr<FastSplit> fast_;
};

// Splits on characters for which a predicate holds, one match per character (Rust's
// `impl Pattern for Fn(char) -> bool`).
class CharSplitPreTokenizer final : public PreTokenizer {
 public:
  enum class Kind { kPunctuation, kDigit, kWhiteSpace };
  CharSplitPreTokenizer(Kind kind, SplitBehavior behavior) : kind_(kind), behavior_(behavior) {}
  void pre_tokenize(std::string& work, std::vector<Piece>& pieces,
                    PreTokenizeScratch& scratch) const override;

 private:
  Kind kind_;
  SplitBehavior behavior_;
};

// ByteLevel: optional prefix space, optional GPT-2 regex split, then every byte becomes its
// printable stand-in character. When it is the last pre-tokenizer, the BPE model consumes raw
// bytes directly (`map_bytes` false) and this step only splits.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> split, bool map_bytes)
      : add_prefix_space_(add_prefix_space), split_(std::move(split)), map_bytes_(map_bytes) {}
  void pre_tokenize(std::string& work, std::vector<Piece>& pieces,
                    PreTokenizeScratch& scratch) const override;
  // Without its own split, prefix space or byte mapping (the last step, before a BPE model that
  // reads raw bytes) it changes nothing.
  bool word_cut_safe() const override {
    return !add_prefix_space_ && split_ == nullptr && !map_bytes_;
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> split_;
  bool map_bytes_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(char32_t replacement, Prepend prepend, bool split);
  void pre_tokenize(std::string& work, std::vector<Piece>& pieces,
                    PreTokenizeScratch& scratch) const override;

 private:
  char32_t replacement_;
  std::string replacement_utf8_;
  Prepend prepend_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(std::string& work, std::vector<Piece>& pieces,
                    PreTokenizeScratch& scratch) const override;
  // Every step splits at the cut and leaves the cut's characters as they are.
  bool word_cut_safe() const override {
    for (const auto& s : steps_) {
      if (!s->word_cut_safe()) return false;
    }
    return true;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// The printable character GPT-2's byte-level alphabet uses for each byte (bytes_to_unicode).
char32_t byte_level_char(uint8_t byte);
// The byte a byte-level character stands for, or -1 for characters outside the alphabet.
int byte_level_byte(char32_t c);

}  // namespace infera::tokenizer
