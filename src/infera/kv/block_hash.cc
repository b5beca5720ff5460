#include "infera/kv/block_hash.h"

// The whole of XXH3 inlined here (libxxhash's header mode): the fixed sizes below (64-byte
// blocks, 16-byte chain inputs) then compile to straight-line code instead of a call through
// the shared library's length dispatch.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <bit>
#include <cstring>

namespace infera::kv {

// Token ids are hashed as their in-memory u32 representation, which is the contract's little
// endian on every machine we build for.
static_assert(std::endian::native == std::endian::little,
              "block hashing assumes a little-endian host (u32 LE token ids)");

uint64_t lora_seed(std::string_view lora_name) {
  if (lora_name.empty()) return kHashSeed;
  // Wraps modulo 2^64, as the contract says.
  return kHashSeed + XXH3_64bits_withSeed(lora_name.data(), lora_name.size(), 0);
}

uint64_t media_digest(std::string_view media) {
  const uint64_t digest = XXH3_64bits_withSeed(media.data(), media.size(), 0);
  return digest == 0 ? 1 : digest;
}

uint64_t media_seed(uint64_t seed, uint64_t digest) {
  if (digest == 0) return seed;
  const uint64_t words[2] = {seed, digest};
  return XXH3_64bits_withSeed(words, sizeof(words), kHashSeed);
}

uint64_t local_block_hash(std::span<const TokenId> block_tokens, uint64_t seed) {
  // 16 tokens (64 bytes) is the block size every engine defaults to: a constant length.
  if (block_tokens.size() == 16) return XXH3_64bits_withSeed(block_tokens.data(), 64, seed);
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), seed);
}

uint64_t chain_block_hash(uint64_t parent_seq, uint64_t local, uint64_t seed) {
  unsigned char buf[16];
  std::memcpy(buf, &parent_seq, 8);
  std::memcpy(buf + 8, &local, 8);
  return XXH3_64bits_withSeed(buf, sizeof(buf), seed);
}

void compute_seq_hashes(std::span<const TokenId> tokens, uint32_t block_size, uint64_t seed,
                        std::vector<uint64_t>& seq_out, std::vector<uint64_t>* local_out,
                        bool has_parent, uint64_t parent_seq) {
  seq_out.clear();
  if (local_out) local_out->clear();
  const size_t n = full_blocks(tokens.size(), block_size);
  seq_out.resize(n);
  if (local_out) local_out->resize(n);
  uint64_t prev = parent_seq;
  bool chained = has_parent;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t local = local_block_hash(tokens.subspan(i * block_size, block_size), seed);
    const uint64_t seq = chained ? chain_block_hash(prev, local, seed) : local;
    seq_out[i] = seq;
    if (local_out) (*local_out)[i] = local;
    prev = seq;
    chained = true;
  }
}

std::vector<uint64_t> seq_hashes(std::span<const TokenId> tokens, uint32_t block_size,
                                 std::string_view lora_name) {
  std::vector<uint64_t> out;
  compute_seq_hashes(tokens, block_size, lora_seed(lora_name), out);
  return out;
}

}  // namespace infera::kv
