// BlockPool: the simulated engine's paged KV cache, after vLLM v1's BlockPool
// (vllm/v1/core/block_pool.py). Blocks are reference-counted; a block whose count drops to 0
// joins the tail of the free queue and keeps its cached hash, so a later request can still hit
// it; a free block is evicted from the prefix cache only when it is reused for a new allocation,
// taken from the head of the queue (least recently freed first). Block 0 is vLLM's reserved null
// block and never holds tokens. The same hash may be cached by several blocks (vLLM does not
// deduplicate), each stored and evicted on its own.
// Flat arrays and an intrusive doubly-linked free list: no allocation per block operation.
// Not thread-safe: owned by one EngineCore.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "infera/common/flat_map.h"

namespace infera::engine {

class BlockPool {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  explicit BlockPool(uint32_t num_blocks);

  uint32_t num_blocks() const { return num_blocks_; }      // including the null block
  uint32_t num_usable() const { return num_blocks_ - 1; }  // blocks that can hold tokens
  uint32_t num_free() const { return num_free_; }          // in the free queue, cached or not
  // vLLM's KV-cache usage: the fraction of usable blocks held by requests (0..1).
  double usage() const;

  // A block caching `hash` (the earliest cached copy), or kNone.
  uint32_t find_cached(uint64_t hash) const;

  // Takes a reference on each block (prefix-cache hits); a free block leaves the free queue.
  void touch(std::span<const uint32_t> blocks);
  // Takes `n` blocks from the head of the free queue, with one reference each, appending them
  // to `out`. A taken block that still carried a cached hash is evicted from the prefix cache
  // and its hash appended to `evicted` (vLLM _maybe_evict_cached_block). Needs n <= num_free().
  void allocate(uint32_t n, std::vector<uint32_t>& out, std::vector<uint64_t>& evicted);
  // Drops one reference on each of a request's blocks, walking them from last to first (vLLM
  // KVCacheManager.free), so the request's tail blocks reach the free queue, and are evicted,
  // before its head blocks.
  void release(std::span<const uint32_t> blocks);
  // Registers a full block under `hash` (one block of vLLM cache_full_blocks). The block must be
  // held and not cached yet.
  void cache(uint32_t block, uint64_t hash);

  // vLLM reset_prefix_cache: forgets every cached hash. Refused (false, nothing changes) while
  // any block is held by a request.
  bool reset();

  uint32_t ref_count(uint32_t block) const { return ref_[block]; }
  bool is_cached(uint32_t block) const { return cached_[block] != 0; }
  uint64_t block_hash(uint32_t block) const { return hash_[block]; }
  size_t num_cached_blocks() const { return num_cached_blocks_; }  // copies counted
  size_t num_cached_hashes() const { return cached_map_.size(); }  // distinct hashes
  // The free queue from head (next to be reused) to tail; for tests and diagnostics.
  std::vector<uint32_t> free_queue() const;

 private:
  void push_back_free(uint32_t block);
  void unlink_free(uint32_t block);
  void uncache(uint32_t block);

  uint32_t num_blocks_;
  uint32_t num_free_ = 0;
  size_t num_cached_blocks_ = 0;
  std::vector<uint32_t> ref_;
  std::vector<uint64_t> hash_;
  std::vector<uint8_t> cached_;
  std::vector<uint32_t> same_hash_next_;  // next block caching the same hash, kNone at the end
  // Free queue: circular list through prev_/next_ with a sentinel at index num_blocks_.
  std::vector<uint32_t> prev_;
  std::vector<uint32_t> next_;
  FlatU64Map<uint32_t> cached_map_;  // hash -> first block caching it
};

}  // namespace infera::engine
