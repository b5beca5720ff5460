#include "infera/engine/output_model.h"

#include <xxhash.h>

#include <algorithm>

#include "infera/common/bits.h"
#include "infera/common/check.h"
#include "infera/common/random.h"

namespace infera::engine {

OutputModel::OutputModel(OutputModelOptions options) : options_(options) {
  INFERA_CHECK(options_.vocab_size >= 2);
  INFERA_CHECK(options_.natural_min >= 1 && options_.natural_min <= options_.natural_max);
}

uint64_t OutputModel::prompt_key(std::span<const TokenId> prompt) const {
  return XXH3_64bits_withSeed(prompt.data(), prompt.size_bytes(), options_.seed);
}

TokenId OutputModel::token_at(uint64_t key, uint32_t index) const {
  uint64_t state = key ^ (uint64_t{index} * 0xD1B54A32D192ED03ULL);
  const uint64_t r = splitmix64(state);
  // Uniform over the vocab_size - 1 regular tokens, skipping EOS when it lies inside the range.
  auto token = static_cast<TokenId>(mul_hi64(r, options_.vocab_size - 1));
  if (options_.eos_token_id < options_.vocab_size && token >= options_.eos_token_id) ++token;
  return token;
}

uint32_t OutputModel::natural_eos_index(uint64_t key) const {
  uint64_t state = key ^ 0x6A09E667F3BCC909ULL;
  const uint64_t span = uint64_t{options_.natural_max} - options_.natural_min + 1;
  return options_.natural_min - 1 + static_cast<uint32_t>(mul_hi64(splitmix64(state), span));
}

uint32_t OutputModel::eos_index(uint64_t key, uint32_t min_tokens, bool ignore_eos) const {
  if (ignore_eos) return UINT32_MAX;
  return std::max(natural_eos_index(key), min_tokens);
}

}  // namespace infera::engine
