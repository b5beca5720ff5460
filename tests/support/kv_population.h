// Builds the benchmark population shared by the kv and routing benchmarks: `workers` workers
// with `blocks_per_worker` resident GPU blocks each, stored as 16-block events chained by
// parent hash; workers 0..shared_workers-1 also hold one common `shared_blocks` prefix (the
// blocks of `shared_prompt`). Engine hashes are random 64-bit values, as vLLM and SGLang send
// (counters spread unrealistically well in the index's tables). Deterministic for a seed.
#pragma once

#include <cstdint>
#include <vector>

#include "infera/common/random.h"
#include "infera/kv/index.h"

namespace infera::testing {

struct KvPopulation {
  std::vector<kv::TokenId> shared_prompt;  // shared_blocks full blocks, then fresh blocks
  uint64_t entries = 0;                    // resident (worker, block) entries stored
};

// Calls `store(event)` for every event; the index is the usual sink.
template <typename StoreFn>
KvPopulation populate(uint32_t workers, uint64_t blocks_per_worker, uint32_t shared_workers,
                      uint32_t shared_blocks, uint32_t prompt_blocks, uint32_t block_size,
                      uint64_t seed, StoreFn&& store) {
  Rng rng(seed);
  KvPopulation pop;
  pop.shared_prompt.resize(static_cast<size_t>(prompt_blocks) * block_size);
  for (kv::TokenId& t : pop.shared_prompt) t = static_cast<kv::TokenId>(rng.uniform(150000));
  constexpr uint32_t kRun = 16;  // blocks per event
  std::vector<kv::TokenId> tokens(static_cast<size_t>(kRun) * block_size);
  std::vector<uint64_t> engines(kRun);
  for (uint32_t w = 0; w < workers; ++w) {
    uint64_t placed = 0;
    if (w < shared_workers) {
      // The shared prefix, as events of kRun blocks chained from block 0.
      std::optional<uint64_t> parent;
      for (uint32_t b = 0; b < shared_blocks; b += kRun) {
        const uint32_t n = std::min(kRun, shared_blocks - b);
        for (uint32_t i = 0; i < n; ++i) engines[i] = rng.next();
        kv::StoredEvent e{w, parent, std::span<const uint64_t>(engines).first(n),
                          std::span<const kv::TokenId>(pop.shared_prompt)
                              .subspan(static_cast<size_t>(b) * block_size,
                                       static_cast<size_t>(n) * block_size),
                          block_size, kv::Medium::kGpu, {}};
        store(e);
        parent = engines[n - 1];
        placed += n;
      }
    }
    // Unique chains: each event starts a new sequence of kRun random blocks.
    while (placed < blocks_per_worker) {
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kRun, blocks_per_worker - placed));
      for (kv::TokenId& t : tokens) t = static_cast<kv::TokenId>(rng.uniform(150000));
      for (uint32_t i = 0; i < n; ++i) engines[i] = rng.next();
      kv::StoredEvent e{w, std::nullopt, std::span<const uint64_t>(engines).first(n),
                        std::span<const kv::TokenId>(tokens).first(static_cast<size_t>(n) * block_size),
                        block_size, kv::Medium::kGpu, {}};
      store(e);
      placed += n;
    }
    pop.entries += placed;
  }
  return pop;
}

}  // namespace infera::testing
