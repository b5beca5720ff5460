// AddedVocabulary: the "added_tokens" of tokenizer.json (special and normal) and how the Rust
// `tokenizers` crate finds them in text: a leftmost-longest scan (its Aho-Corasick with
// MatchKind::LeftmostLongest) of the raw text for tokens with normalized=false and of each
// normalized piece for tokens with normalized=true; single_word discards a match glued to word
// characters; lstrip / rstrip widen a match over the White_Space beside it. Internal to
// src/infera/tokenizer/. Built once at load, immutable: any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "infera/common/flat_map.h"
#include "infera/tokenizer/regex.h"
#include "infera/tokenizer/vocab.h"

namespace infera::tokenizer {

class Normalizer;

struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool special = false;
  bool normalized = true;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// One piece of a split: plain text [begin, end), or an added token that covers [begin, end).
struct AddedSplit {
  size_t begin;
  size_t end;
  int64_t token;  // index into tokens(), or -1 for plain text
};

class AddedVocabulary {
 public:
  // `normalizer` (may be null) normalizes the content of normalized tokens for matching.
  static Result<std::unique_ptr<AddedVocabulary>> create(std::vector<AddedToken> tokens,
                                                         const Normalizer* normalizer);
  ~AddedVocabulary();

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }
  bool has_normalized() const { return normalized_.root_used; }
  std::optional<TokenId> find(std::string_view content) const;
  // The added token with this id, or null.
  const AddedToken* by_id(TokenId id) const;

  // Splits `text` on tokens with normalized=false (raw text) / normalized=true (normalized text).
  void split_raw(std::string_view text, std::vector<AddedSplit>& out) const {
    split(raw_, text, out);
  }
  void split_normalized(std::string_view text, std::vector<AddedSplit>& out) const {
    split(normalized_, text, out);
  }

 private:
  // A byte trie over token contents; node 0 is the root.
  struct Trie {
    FlatU64Map<uint32_t> edges{50};  // (node << 8 | byte) -> child node
    std::vector<int64_t> terminal;   // per node: token index ending here, or -1
    bool first_byte[256] = {};
    int single_first_byte = -1;      // the only first byte, when there is exactly one
    bool root_used = false;
    void add(std::string_view content, size_t token);
  };
  AddedVocabulary() = default;
  void split(const Trie& trie, std::string_view text, std::vector<AddedSplit>& out) const;
  // Length of the longest token starting at text[pos] and its index, or 0.
  size_t longest_match(const Trie& trie, std::string_view text, size_t pos, int64_t& token) const;
  bool is_word_char_before(std::string_view text, size_t pos) const;
  bool is_word_char_at(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  Trie raw_;
  Trie normalized_;
  FlatU64Map<uint32_t> by_id_{50};  // id -> token index
  std::unordered_map<std::string, TokenId> by_content_;
  std::unique_ptr<Regex> word_char_;  // Rust regex \w
};

}  // namespace infera::tokenizer
