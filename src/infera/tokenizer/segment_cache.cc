#include "infera/tokenizer/segment_cache.h"

#include <algorithm>

namespace infera::tokenizer {
namespace {

// Bookkeeping charged per entry on top of text and ids: list node, map node, vector header.
constexpr size_t kEntryOverhead = 128;

uint64_t key_hash(std::string_view text, uint32_t flags) {
  return hash_bytes(text) ^ (static_cast<uint64_t>(flags) * 0x9E3779B97F4A7C15ULL);
}

}  // namespace

SegmentCache::SegmentCache(size_t max_bytes, size_t max_entries, size_t shards)
    : shard_count_(std::max<size_t>(1, shards)),
      shard_max_bytes_(max_bytes / shard_count_),
      shard_max_entries_(std::max<size_t>(1, max_entries / shard_count_)),
      shards_(new Shard[shard_count_]) {}

SegmentCache::~SegmentCache() = default;

bool SegmentCache::lookup(std::string_view text, uint32_t flags, std::vector<TokenId>& out) {
  const uint64_t h = key_hash(text, flags);
  Shard& s = shard_for(h);
  std::lock_guard lock(s.mu);
  const auto it = s.index.find(h);
  if (it == s.index.end() || it->second->flags != flags || it->second->text != text) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  s.lru.splice(s.lru.begin(), s.lru, it->second);
  out.insert(out.end(), it->second->ids.begin(), it->second->ids.end());
  hits_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void SegmentCache::insert(std::string_view text, uint32_t flags, std::span<const TokenId> ids) {
  const size_t charge = text.size() + ids.size() * sizeof(TokenId) + kEntryOverhead;
  if (charge > shard_max_bytes_) return;
  const uint64_t h = key_hash(text, flags);
  // Build the entry outside the lock: copying a long segment should not block other threads.
  std::list<Entry> node;
  node.push_back(Entry{h, flags, std::string(text), std::vector<TokenId>(ids.begin(), ids.end()),
                       charge});
  Shard& s = shard_for(h);
  std::lock_guard lock(s.mu);
  if (const auto it = s.index.find(h); it != s.index.end()) {
    // Same hash: an equal entry raced in, or (vanishingly rare) a different text; replace it.
    s.bytes -= it->second->charge;
    s.lru.erase(it->second);
    s.index.erase(it);
  }
  while (!s.lru.empty() &&
         (s.bytes + charge > shard_max_bytes_ || s.index.size() + 1 > shard_max_entries_)) {
    const Entry& victim = s.lru.back();
    s.bytes -= victim.charge;
    s.index.erase(victim.hash);
    s.lru.pop_back();
    evictions_.fetch_add(1, std::memory_order_relaxed);
  }
  s.lru.splice(s.lru.begin(), node);
  s.index.emplace(h, s.lru.begin());
  s.bytes += charge;
}

void SegmentCache::clear() {
  for (size_t i = 0; i < shard_count_; ++i) {
    std::lock_guard lock(shards_[i].mu);
    shards_[i].lru.clear();
    shards_[i].index.clear();
    shards_[i].bytes = 0;
  }
}

SegmentCacheStats SegmentCache::stats() const {
  SegmentCacheStats st;
  st.hits = hits_.load(std::memory_order_relaxed);
  st.misses = misses_.load(std::memory_order_relaxed);
  st.evictions = evictions_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < shard_count_; ++i) {
    std::lock_guard lock(shards_[i].mu);
    st.entries += shards_[i].index.size();
    st.bytes += shards_[i].bytes;
  }
  return st;
}

}  // namespace infera::tokenizer
