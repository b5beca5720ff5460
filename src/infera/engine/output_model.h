// OutputModel: the simulated engine's deterministic "sampler". Output tokens are a pure function
// of (seed, prompt tokens, position), so the same prompt always yields the same completion (tests
// compare outputs; repeated and multi-turn prompts hit the prefix cache on generated blocks, as
// they would on a real engine at temperature 0). Each prompt also has a natural length: the
// output index at which the model would emit EOS.
// Immutable after construction; any thread.
#pragma once

#include <cstdint>
#include <span>

#include "infera/engine/block_hasher.h"

namespace infera::engine {

struct OutputModelOptions {
  uint64_t seed = 0;
  uint32_t vocab_size = 32000;  // regular tokens are in [0, vocab_size) minus eos_token_id
  uint32_t eos_token_id = 2;
  uint32_t natural_min = 16;  // natural output length range, tokens including the EOS
  uint32_t natural_max = 512;
};

class OutputModel {
 public:
  explicit OutputModel(OutputModelOptions options);

  // Identifies a prompt for the functions below.
  uint64_t prompt_key(std::span<const TokenId> prompt) const;

  // The regular (non-EOS) token the model emits at output position `index`.
  TokenId token_at(uint64_t key, uint32_t index) const;

  // The output position at which the model emits EOS when nothing prevents it, in
  // [natural_min - 1, natural_max - 1].
  uint32_t natural_eos_index(uint64_t key) const;

  // The position of EOS for a request: never (UINT32_MAX) with ignore_eos; otherwise the natural
  // position, but not before min_tokens (vLLM masks stop tokens while fewer than min_tokens
  // tokens have been generated, so EOS can first appear at index min_tokens).
  uint32_t eos_index(uint64_t key, uint32_t min_tokens, bool ignore_eos) const;

  TokenId eos_token_id() const { return options_.eos_token_id; }

 private:
  OutputModelOptions options_;
};

}  // namespace infera::engine
