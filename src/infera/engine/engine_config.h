// EngineConfig: the knobs of the simulated engine's core model (vLLM's scheduler and cache
// options plus the mock's own timing and output knobs), with vLLM's defaults. A plain value:
// built from flags by the launcher, validated once, then trusted by EngineCore.
#pragma once

#include <cstdint>
#include <string>

#include "infera/common/status.h"

namespace infera::engine {

struct EngineConfig {
  // Paged KV cache (vLLM --block-size, --num-gpu-blocks-override). As in vLLM, block 0 is the
  // reserved null block, so num_gpu_blocks - 1 blocks hold tokens.
  uint32_t block_size = 16;         // tokens per block
  uint32_t num_gpu_blocks = 16384;  // blocks, including the null block

  // Scheduler (vLLM --max-num-seqs, --max-num-batched-tokens; chunked prefill is always on).
  uint32_t max_num_seqs = 256;
  uint32_t max_num_batched_tokens = 8192;  // tokens per step
  // Prompt + max_tokens limit per request; 0 means "what the cache holds":
  // (num_gpu_blocks - 1) * block_size. Larger values are capped at that too, so that every
  // admitted request can run alone.
  uint32_t max_model_len = 0;

  bool enable_prefix_caching = true;
  // Collect vLLM KV events (BlockStored / BlockRemoved / AllBlocksCleared) per step.
  bool enable_kv_events = false;
  // The engine-side block hash seed, like PYTHONHASHSEED for vLLM: the same string gives the
  // same block hashes across restarts.
  std::string hash_seed = "0";

  // Timing: step durations from the polynomial model are divided by this (--speedup-ratio).
  double speedup_ratio = 1.0;

  // Disaggregation: a decode engine pulls a remote prefill's KV blocks over a link. A pull of
  // n blocks takes n * kv_block_bytes / (kv_transfer_bandwidth_gb_s * 1e9) seconds, divided by
  // speedup_ratio like every modelled time. Defaults: one 16-token block of a Llama-3-8B-like
  // model in fp16 (2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes x 16 tokens = 2 MiB)
  // over a 200 Gb/s RDMA NIC (25 GB/s).
  uint64_t kv_block_bytes = uint64_t{2} << 20;
  double kv_transfer_bandwidth_gb_s = 25.0;  // 10^9 bytes per second

  // Deterministic output: tokens are a function of (output_seed, prompt, position).
  uint64_t output_seed = 0;
  uint32_t vocab_size = 32000;  // generated tokens are in [0, vocab_size), never eos_token_id
  uint32_t eos_token_id = 2;
  // Without ignore_eos a request stops with EOS after a prompt-determined number of tokens,
  // uniform in [natural_output_min, natural_output_max] (min_tokens and max_tokens still rule).
  uint32_t natural_output_min = 16;
  uint32_t natural_output_max = 512;
};

// Checks ranges and consistency; the message names the offending field.
Status validate(const EngineConfig& config);

// The effective prompt + max_tokens limit (see EngineConfig::max_model_len).
uint32_t effective_max_model_len(const EngineConfig& config);

}  // namespace infera::engine
