// Router block hashing: the one implementation in infera (docs/contracts.md section 4, bit-exact
// with NVIDIA Dynamo). Tokens are split into full blocks of `block_size` (a trailing partial block is
// ignored); local[i] = XXH3-64(seed) over the block's token ids as u32 little-endian;
// seq[0] = local[0]; seq[i] = XXH3-64(seed) over u64 LE seq[i-1] then u64 LE local[i].
// The seed is 1337, or 1337 + XXH3-64(lora name, seed 0) for a LoRA adapter.
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace infera::kv {

using TokenId = uint32_t;

inline constexpr uint64_t kHashSeed = 1337;

// The hashing seed for a LoRA adapter name; kHashSeed when the name is empty.
uint64_t lora_seed(std::string_view lora_name);

// Requests whose prompt carries media (images, audio: tokenizer::media_parts gives their bytes)
// hash their blocks with a seed mixed with the media's digest, so that only requests with the
// same media share block hashes. The engine's KV events hash tokens only, so these blocks are
// never confirmed: such requests get predicted-on-route credit among themselves and no
// confirmed hit, never a false one. media_digest: XXH3-64 of the bytes, never 0 (0: no media).
uint64_t media_digest(std::string_view media);
// `seed` mixed with a digest; `seed` itself for 0.
uint64_t media_seed(uint64_t seed, uint64_t digest);

// XXH3-64 of one block's token ids (u32 LE each).
uint64_t local_block_hash(std::span<const TokenId> block_tokens, uint64_t seed);

// The chained hash of a block whose parent block has sequence hash `parent_seq`.
uint64_t chain_block_hash(uint64_t parent_seq, uint64_t local, uint64_t seed);

// Number of full blocks in `num_tokens` tokens.
inline size_t full_blocks(size_t num_tokens, uint32_t block_size) {
  return block_size == 0 ? 0 : num_tokens / block_size;
}

// Sequence hashes of every full block of `tokens`, chained from the start of the sequence
// (or from `parent_seq` when `has_parent`), appended to `seq_out` (which is cleared first).
// `local_out`, when given, receives the local hashes too.
void compute_seq_hashes(std::span<const TokenId> tokens, uint32_t block_size, uint64_t seed,
                        std::vector<uint64_t>& seq_out, std::vector<uint64_t>* local_out = nullptr,
                        bool has_parent = false, uint64_t parent_seq = 0);

// Convenience for callers that want a fresh vector.
std::vector<uint64_t> seq_hashes(std::span<const TokenId> tokens, uint32_t block_size,
                                 std::string_view lora_name = {});

}  // namespace infera::kv
