#include "infera/tokenizer/vocab.h"

#include "infera/common/check.h"

namespace infera::tokenizer {

// Vocabulary lookups are off the hot path (merges are resolved once at load), so the index can
// be dense.
Vocab::Vocab() : by_hash_(85) {}

void Vocab::reserve(size_t tokens, size_t bytes) {
  arena_.reserve(bytes);
  spans_.reserve(tokens);
  by_hash_.reserve(tokens);
}

bool Vocab::add(std::string_view token, TokenId id) {
  const uint64_t h = hash_bytes(token);
  INFERA_CHECK(arena_.size() + token.size() < UINT32_MAX);
  auto [slot, inserted] = by_hash_.try_emplace(h, id);
  if (!inserted) {
    if (has_id(*slot) && this->token(*slot) == token) return false;  // duplicate token
    if (collisions_.contains(std::string(token))) return false;
    collisions_.emplace(std::string(token), id);
  }
  if (id >= spans_.size()) spans_.resize(static_cast<size_t>(id) + 1);
  spans_[id] = {static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(token.size())};
  arena_.append(token);
  ++size_;
  return true;
}

std::optional<TokenId> Vocab::find_hashed(std::string_view token, uint64_t hash) const {
  const TokenId* id = by_hash_.find(hash);
  if (id == nullptr) return std::nullopt;
  if (has_id(*id) && this->token(*id) == token) return *id;
  if (collisions_.empty()) return std::nullopt;
  const auto it = collisions_.find(std::string(token));
  if (it == collisions_.end()) return std::nullopt;
  return it->second;
}

size_t Vocab::memory_bytes() const {
  return arena_.capacity() + spans_.capacity() * sizeof(Span) + by_hash_.memory_bytes();
}

}  // namespace infera::tokenizer
