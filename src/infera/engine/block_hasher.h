// EngineBlockHasher: the simulated engine's own prefix-cache block hash, the ids it publishes in
// KV events. Like vLLM's (hash(parent or NONE_HASH, block tokens), NONE_HASH derived from
// PYTHONHASHSEED), it is chained over full blocks and seedable, and it deliberately differs from
// the router's hash (kv/block_hash.h), as a real engine's does: the router must map engine ids
// to its own hashes through the token ids in BlockStored.
//   NONE_HASH = XXH3-64(utf8(hash_seed), seed 0)
//   h[i]      = XXH3-64(seed = h[i-1], or the root for block 0) over block i's tokens, u32 LE
//   root      = NONE_HASH; for a LoRA adapter N, XXH3-64(utf8(N), seed NONE_HASH) (vLLM puts the
//               adapter's name in every block's extra keys, so its blocks are its own)
// Immutable after construction; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace infera::engine {

using TokenId = uint32_t;

class EngineBlockHasher {
 public:
  explicit EngineBlockHasher(std::string_view hash_seed);

  uint64_t none_hash() const { return none_hash_; }
  // The parent of block 0: none_hash(), or for a LoRA adapter one of its own.
  uint64_t root(std::string_view lora_name) const;

  // The hash of one block whose parent block has hash `parent` (none_hash() for block 0).
  uint64_t hash_block(uint64_t parent, std::span<const TokenId> block_tokens) const;

  // Extends `hashes` (the hashes of the first hashes.size() full blocks of `tokens`) to every
  // full block of `tokens`, block 0 chained to `root`. A trailing partial block is not hashed.
  void extend(std::span<const TokenId> tokens, uint32_t block_size,
              std::vector<uint64_t>& hashes) const {
    extend(tokens, block_size, hashes, none_hash_);
  }
  void extend(std::span<const TokenId> tokens, uint32_t block_size, std::vector<uint64_t>& hashes,
              uint64_t root) const;

 private:
  uint64_t none_hash_;
};

}  // namespace infera::engine
