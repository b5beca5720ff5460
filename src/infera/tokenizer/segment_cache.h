// SegmentCache: a bounded LRU from a segment of text (the run between two added tokens, which
// the tokenizer encodes independently of its neighbours) to its token ids, so that a multi-turn
// conversation re-tokenized after a new turn only pays for the new text. Budgeted in bytes
// (text + ids + bookkeeping) and entries; split into shards with their own mutex and LRU list.
// Thread-safe: any thread may look up and insert concurrently.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "infera/common/spin_mutex.h"
#include "infera/tokenizer/vocab.h"

namespace infera::tokenizer {

struct SegmentCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  size_t entries = 0;
  size_t bytes = 0;  // charged bytes currently held
};

class SegmentCache {
 public:
  // Totals over all shards; an entry larger than one shard's share is not cached. More shards
  // mean less lock contention between threads; tests use one for an exact LRU order.
  SegmentCache(size_t max_bytes, size_t max_entries, size_t shards = 8);
  ~SegmentCache();
  SegmentCache(const SegmentCache&) = delete;
  SegmentCache& operator=(const SegmentCache&) = delete;

  // On a hit appends the ids cached for (text, flags) to `out`, marks the entry most recently
  // used and returns true. `flags` distinguishes encodings of equal text (e.g. at offset 0).
  bool lookup(std::string_view text, uint32_t flags, std::vector<TokenId>& out);
  void insert(std::string_view text, uint32_t flags, std::span<const TokenId> ids);
  void clear();
  SegmentCacheStats stats() const;

 private:
  struct Entry {
    uint64_t hash;
    uint32_t flags;
    std::string text;
    std::vector<TokenId> ids;
    size_t charge;
  };
  struct Shard {
    SpinMutex mu;
    std::list<Entry> lru;  // front = most recently used
    std::unordered_map<uint64_t, std::list<Entry>::iterator> index;
    size_t bytes = 0;
  };
  Shard& shard_for(uint64_t hash) { return shards_[hash % shard_count_]; }

  const size_t shard_count_;
  const size_t shard_max_bytes_;
  const size_t shard_max_entries_;
  std::unique_ptr<Shard[]> shards_;
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> evictions_{0};
};

}  // namespace infera::tokenizer
