#include "infera/engine/engine_config.h"

#include <cmath>
#include <string>

namespace infera::engine {

Status validate(const EngineConfig& c) {
  if (c.block_size == 0 || c.block_size > 4096) {
    return invalid_argument("block_size must be in [1, 4096], got " + std::to_string(c.block_size));
  }
  if (c.num_gpu_blocks < 2) {
    return invalid_argument("num_gpu_blocks must be at least 2 (one is the reserved null block)");
  }
  if (c.num_gpu_blocks >= (uint32_t{1} << 30)) {
    return invalid_argument("num_gpu_blocks is too large");
  }
  if (uint64_t{c.num_gpu_blocks - 1} * c.block_size > (uint64_t{1} << 31)) {
    return invalid_argument("num_gpu_blocks * block_size must not exceed 2^31 tokens");
  }
  if (c.max_num_seqs == 0) return invalid_argument("max_num_seqs must be positive");
  if (c.max_num_batched_tokens == 0) {
    return invalid_argument("max_num_batched_tokens must be positive");
  }
  if (!(c.speedup_ratio > 0) || !std::isfinite(c.speedup_ratio)) {
    return invalid_argument("speedup_ratio must be a positive number");
  }
  if (c.kv_block_bytes == 0) return invalid_argument("kv_block_bytes must be positive");
  if (!(c.kv_transfer_bandwidth_gb_s > 0) || !std::isfinite(c.kv_transfer_bandwidth_gb_s)) {
    return invalid_argument("kv_transfer_bandwidth_gb_s must be a positive number");
  }
  if (c.vocab_size < 2) return invalid_argument("vocab_size must be at least 2");
  if (c.natural_output_min == 0 || c.natural_output_min > c.natural_output_max) {
    return invalid_argument("need 1 <= natural_output_min <= natural_output_max");
  }
  return ok_status();
}

uint32_t effective_max_model_len(const EngineConfig& c) {
  const uint32_t capacity = (c.num_gpu_blocks - 1) * c.block_size;
  if (c.max_model_len == 0 || c.max_model_len > capacity) return capacity;
  return c.max_model_len;
}

}  // namespace infera::engine
