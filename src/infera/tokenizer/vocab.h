// Vocab: token string <-> id for a tokenizer's vocabulary, stored flat (one byte arena, one
// span per id, an open-addressing index of string hashes) so that a 150k-token vocabulary
// loads in milliseconds and costs a few MB. Internal to src/infera/tokenizer/. Filled once at
// load, then immutable: any thread may read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "infera/common/flat_map.h"

namespace infera::tokenizer {

using TokenId = uint32_t;

// XXH3-64 of the bytes, inlined: most hashed strings here are words of a few bytes, where a
// call into the shared library costs as much as the hash.
inline uint64_t hash_bytes(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

class Vocab {
 public:
  Vocab();
  void reserve(size_t tokens, size_t bytes);
  // Adds `token` with `id`. A token seen before keeps its first id (returns false). An id seen
  // before (a malformed vocabulary) now names the newer token; the older string is forgotten.
  bool add(std::string_view token, TokenId id);

  std::optional<TokenId> find(std::string_view token) const {
    return find_hashed(token, hash_bytes(token));
  }
  std::optional<TokenId> find_hashed(std::string_view token, uint64_t hash) const;
  void prefetch(uint64_t hash) const { by_hash_.prefetch(hash); }
  bool has_id(TokenId id) const { return id < spans_.size() && spans_[id].len != kNoToken; }
  // The token for `id`; has_id(id) must hold.
  std::string_view token(TokenId id) const {
    return std::string_view(arena_).substr(spans_[id].offset, spans_[id].len);
  }
  size_t size() const { return size_; }
  // One past the largest id.
  size_t id_limit() const { return spans_.size(); }
  size_t memory_bytes() const;

 private:
  static constexpr uint32_t kNoToken = UINT32_MAX;
  struct Span {
    uint32_t offset = 0;
    uint32_t len = kNoToken;
  };
  std::string arena_;
  std::vector<Span> spans_;
  FlatU64Map<TokenId> by_hash_;
  // Tokens whose 64-bit hash collides with an earlier, different token (never seen in
  // practice; kept so lookups stay exact).
  std::unordered_map<std::string, TokenId> collisions_;
  size_t size_ = 0;
};

}  // namespace infera::tokenizer
