// Test support for the events module (compiled into its tests only): ToyEngine, a seeded model
// of an engine's prefix cache that emits vLLM-shaped event batches and knows its true content,
// and helpers that compare a KvIndex mirror with it and wait on conditions with a deadline.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "infera/common/random.h"
#include "infera/events/event.h"
#include "infera/kv/block_hash.h"
#include "infera/kv/index.h"

namespace infera::events::testing {

// Polls `cond` until it holds or `timeout` passes: a wait on a condition, not a sleep.
template <typename Cond>
bool wait_until(Cond&& cond, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// A radix-shaped prefix cache: blocks chain on parents, eviction takes leaves only, so every
// cached block's ancestors are cached too and each leaf names one cached token path.
class ToyEngine {
 public:
  static constexpr uint32_t kBlockSize = 16;

  explicit ToyEngine(uint64_t seed, size_t capacity = 64) : rng_(seed), capacity_(capacity) {}

  // One scheduler step: a few stores (new roots or extensions of leaves) and evictions.
  EventBatch step() {
    EventBatch b;
    b.ts = static_cast<double>(++steps_);
    const uint64_t stores = 1 + rng_.uniform(2);
    for (uint64_t i = 0; i < stores; ++i) store(b);
    while (blocks_.size() > capacity_) evict(b);
    return b;
  }
  // /reset_prefix_cache.
  EventBatch clear() {
    blocks_.clear();
    EventBatch b;
    b.ts = static_cast<double>(++steps_);
    b.events.push_back(AllBlocksCleared{});
    return b;
  }

  size_t size() const { return blocks_.size(); }
  // The token path of every leaf.
  std::vector<std::vector<uint32_t>> leaf_paths() const {
    std::vector<std::vector<uint32_t>> out;
    for (const auto& [hash, b] : blocks_) {
      if (b.children > 0) continue;
      std::vector<const Block*> chain;
      for (const Block* p = &b; p != nullptr;) {
        chain.push_back(p);
        p = p->parent ? &blocks_.at(*p->parent) : nullptr;
      }
      std::vector<uint32_t> tokens;
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        tokens.insert(tokens.end(), (*it)->tokens.begin(), (*it)->tokens.end());
      }
      out.push_back(std::move(tokens));
    }
    return out;
  }

 private:
  struct Block {
    std::optional<uint64_t> parent;
    std::vector<uint32_t> tokens;
    uint32_t children = 0;
  };

  void store(EventBatch& b) {
    BlockStored s;
    s.block_size = kBlockSize;
    s.medium = "GPU";
    std::optional<uint64_t> parent;
    if (!blocks_.empty() && rng_.uniform(3) != 0) {
      // Extend a random cached block (a shared prefix grows a branch).
      auto it = blocks_.begin();
      std::advance(it, static_cast<long>(rng_.uniform(blocks_.size())));
      parent = it->first;
    }
    s.parent_block_hash = parent;
    const uint64_t n = 1 + rng_.uniform(4);
    std::optional<uint64_t> prev = parent;
    for (uint64_t i = 0; i < n; ++i) {
      Block blk;
      blk.parent = prev;
      for (uint32_t t = 0; t < kBlockSize; ++t) blk.tokens.push_back(static_cast<uint32_t>(rng_.uniform(150000)));
      // The engine's own hash: any function of parent and content, unlike the router's.
      uint64_t h = prev.value_or(0x5eed) ^ (blk.tokens[0] * 0x9E3779B97F4A7C15ULL);
      h = splitmix64(h);
      if (prev) ++blocks_.at(*prev).children;
      s.block_hashes.push_back(h);
      s.token_ids.insert(s.token_ids.end(), blk.tokens.begin(), blk.tokens.end());
      blocks_.emplace(h, std::move(blk));
      prev = h;
    }
    b.events.push_back(std::move(s));
  }

  void evict(EventBatch& b) {
    std::vector<uint64_t> leaves;
    for (const auto& [h, blk] : blocks_) {
      if (blk.children == 0) leaves.push_back(h);
    }
    const uint64_t victim = leaves[rng_.uniform(leaves.size())];
    if (const auto parent = blocks_.at(victim).parent) --blocks_.at(*parent).children;
    blocks_.erase(victim);
    BlockRemoved r;
    r.block_hashes = {victim};
    r.medium = "GPU";
    b.events.push_back(std::move(r));  // vLLM: one BlockRemoved per evicted hash
  }

  Rng rng_;
  size_t capacity_;
  uint64_t steps_ = 0;
  std::map<uint64_t, Block> blocks_;
};

// The mirror of `worker` holds exactly the engine's blocks: the same count, and every cached
// path is matched in full.
inline ::testing::AssertionResult mirror_equals(const kv::KvIndex& index, kv::WorkerId worker,
                                                size_t engine_blocks,
                                                const std::vector<std::vector<uint32_t>>& paths,
                                                uint32_t block_size = ToyEngine::kBlockSize) {
  const uint64_t count = index.block_count(worker);
  if (count != engine_blocks) {
    return ::testing::AssertionFailure()
           << "mirror holds " << count << " blocks, engine " << engine_blocks;
  }
  std::vector<uint32_t> hits;
  for (const auto& path : paths) {
    index.find_overlaps(kv::seq_hashes(path, block_size), hits);
    const size_t want = path.size() / block_size;
    if (worker >= hits.size() || hits[worker] != want) {
      return ::testing::AssertionFailure()
             << "a cached path of " << want << " blocks matches "
             << (worker < hits.size() ? hits[worker] : 0) << " in the mirror";
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult mirror_equals(const kv::KvIndex& index, kv::WorkerId worker,
                                                const ToyEngine& engine) {
  return mirror_equals(index, worker, engine.size(), engine.leaf_paths());
}

}  // namespace infera::events::testing
