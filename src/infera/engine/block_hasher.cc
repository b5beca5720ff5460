#include "infera/engine/block_hasher.h"

#include <xxhash.h>

#include <bit>

namespace infera::engine {

// Token ids are hashed as their in-memory u32 representation (little endian).
static_assert(std::endian::native == std::endian::little,
              "engine block hashing assumes a little-endian host");

EngineBlockHasher::EngineBlockHasher(std::string_view hash_seed)
    : none_hash_(XXH3_64bits_withSeed(hash_seed.data(), hash_seed.size(), 0)) {}

uint64_t EngineBlockHasher::hash_block(uint64_t parent,
                                       std::span<const TokenId> block_tokens) const {
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), parent);
}

uint64_t EngineBlockHasher::root(std::string_view lora_name) const {
  return lora_name.empty() ? none_hash_
                           : XXH3_64bits_withSeed(lora_name.data(), lora_name.size(), none_hash_);
}

void EngineBlockHasher::extend(std::span<const TokenId> tokens, uint32_t block_size,
                               std::vector<uint64_t>& hashes, uint64_t root) const {
  const size_t full = tokens.size() / block_size;
  uint64_t parent = hashes.empty() ? root : hashes.back();
  for (size_t b = hashes.size(); b < full; ++b) {
    parent = hash_block(parent, tokens.subspan(b * block_size, block_size));
    hashes.push_back(parent);
  }
}

}  // namespace infera::engine
