#include "infera/tokenizer/added_vocabulary.h"

#include <cstring>

#include "infera/tokenizer/normalizer.h"
#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

// The Rust regex crate's Unicode \w, which the crate uses for single_word.
constexpr std::string_view kRustWordChar =
    "\\G[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";

}  // namespace

void AddedVocabulary::Trie::add(std::string_view content, size_t token) {
  if (content.empty()) return;  // an empty pattern would match everywhere; Rust skips it too
  if (terminal.empty()) terminal.push_back(-1);
  uint32_t node = 0;
  for (const char ch : content) {
    const auto b = static_cast<unsigned char>(ch);
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
    auto [child, inserted] = edges.try_emplace(key, static_cast<uint32_t>(terminal.size()));
    if (inserted) terminal.push_back(-1);
    node = *child;
  }
  if (terminal[node] < 0) terminal[node] = static_cast<int64_t>(token);  // first one wins
  const auto first = static_cast<unsigned char>(content[0]);
  if (!root_used) {
    single_first_byte = first;
  } else if (single_first_byte != first) {
    single_first_byte = -1;
  }
  first_byte[first] = true;
  root_used = true;
}

AddedVocabulary::~AddedVocabulary() = default;

Result<std::unique_ptr<AddedVocabulary>> AddedVocabulary::create(std::vector<AddedToken> tokens,
                                                                 const Normalizer* normalizer) {
  std::unique_ptr<AddedVocabulary> v(new AddedVocabulary());
  v->tokens_ = std::move(tokens);
  INFERA_ASSIGN_OR_RETURN(Regex word, Regex::compile(kRustWordChar));
  v->word_char_ = std::make_unique<Regex>(std::move(word));
  std::string normalized;
  for (size_t i = 0; i < v->tokens_.size(); ++i) {
    const AddedToken& t = v->tokens_[i];
    if (!unicode::is_valid_utf8(t.content)) {
      return invalid_argument("added_tokens[" + std::to_string(i) + "]: content is not UTF-8");
    }
    v->by_id_.try_emplace(t.id, static_cast<uint32_t>(i));
    v->by_content_.emplace(t.content, t.id);
    if (t.normalized && normalizer != nullptr) {
      bool at_origin = true;
      if (normalizer->normalize(t.content, normalized, at_origin)) {
        v->normalized_.add(normalized, i);
      } else {
        v->normalized_.add(t.content, i);
      }
    } else if (t.normalized) {
      v->normalized_.add(t.content, i);
    } else {
      v->raw_.add(t.content, i);
    }
  }
  return v;
}

std::optional<TokenId> AddedVocabulary::find(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::by_id(TokenId id) const {
  const uint32_t* i = by_id_.find(id);
  return i ? &tokens_[*i] : nullptr;
}

size_t AddedVocabulary::longest_match(const Trie& trie, std::string_view text, size_t pos,
                                      int64_t& token) const {
  uint32_t node = 0;
  size_t best = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const uint32_t* child =
        trie.edges.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
    if (child == nullptr) break;
    node = *child;
    if (trie.terminal[node] >= 0) {
      best = i + 1 - pos;
      token = trie.terminal[node];
    }
  }
  return best;
}

bool AddedVocabulary::is_word_char_before(std::string_view text, size_t pos) const {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return word_char_->match_here(text, start).has_value();
}

bool AddedVocabulary::is_word_char_at(std::string_view text, size_t pos) const {
  return word_char_->match_here(text, pos).has_value();
}

void AddedVocabulary::split(const Trie& trie, std::string_view text,
                            std::vector<AddedSplit>& out) const {
  out.clear();
  const size_t n = text.size();
  if (!trie.root_used || n == 0) {
    out.push_back({0, n, -1});
    return;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < n) {
    if (trie.single_first_byte >= 0) {
      const void* hit = std::memchr(text.data() + pos, trie.single_first_byte, n - pos);
      if (hit == nullptr) break;
      pos = static_cast<size_t>(static_cast<const char*>(hit) - text.data());
    } else {
      while (pos < n && !trie.first_byte[static_cast<unsigned char>(text[pos])]) ++pos;
      if (pos >= n) break;
    }
    int64_t token = -1;
    const size_t len = longest_match(trie, text, pos, token);
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + len;
    pos = stop;  // the Aho-Corasick iterator resumes after the match, kept or not
    const AddedToken& t = tokens_[static_cast<size_t>(token)];
    if (t.single_word) {
      const bool start_space = start == 0 || !is_word_char_before(text, start);
      const bool stop_space = stop == n || !is_word_char_at(text, stop);
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t c = s - 1;
        while (c > 0 && (static_cast<unsigned char>(text[c]) & 0xC0) == 0x80) --c;
        size_t i = c;
        if (!unicode::is_white_space(unicode::next_char(text, i))) break;
        s = c;
      }
      start = std::max(s, start_offset);
    }
    if (t.rstrip) {
      while (stop < n) {
        size_t i = stop;
        if (!unicode::is_white_space(unicode::next_char(text, i))) break;
        stop = i;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token});
    start_offset = stop;
  }
  if (start_offset < n) out.push_back({start_offset, n, -1});
}

}  // namespace infera::tokenizer
