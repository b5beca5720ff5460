#include "infera/sim/bounds.h"

#include <algorithm>
#include <vector>

#include "infera/common/check.h"
#include "infera/common/flat_map.h"
#include "infera/engine/timing_model.h"
#include "infera/kv/block_hash.h"
#include "infera/sim/report.h"

namespace infera::sim {
namespace {

// An LRU set of block hashes: a flat map from hash to a slot of an intrusive list.
class LruBlocks {
 public:
  explicit LruBlocks(uint64_t capacity) : capacity_(capacity) {}

  bool contains(uint64_t h) const { return index_.contains(h); }

  void touch(uint64_t h) {
    if (capacity_ == 0) return;
    if (const uint32_t* slot = index_.find(h)) {
      unlink(*slot);
      push_front(*slot);
      return;
    }
    uint32_t slot;
    if (index_.size() >= capacity_) {
      slot = tail_;  // evict the least recently used
      unlink(slot);
      index_.erase(nodes_[slot].hash);
    } else {
      slot = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back({});
    }
    nodes_[slot].hash = h;
    index_.try_emplace(h, slot);
    push_front(slot);
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    uint64_t hash = 0;
    uint32_t prev = kNone, next = kNone;
  };
  void unlink(uint32_t s) {
    Node& n = nodes_[s];
    if (n.prev != kNone) nodes_[n.prev].next = n.next; else head_ = n.next;
    if (n.next != kNone) nodes_[n.next].prev = n.prev; else tail_ = n.prev;
    n.prev = n.next = kNone;
  }
  void push_front(uint32_t s) {
    nodes_[s].next = head_;
    nodes_[s].prev = kNone;
    if (head_ != kNone) nodes_[head_].prev = s;
    head_ = s;
    if (tail_ == kNone) tail_ = s;
  }

  uint64_t capacity_;
  FlatU64Map<uint32_t> index_{50};
  std::vector<Node> nodes_;
  uint32_t head_ = kNone, tail_ = kNone;
};

// Calls on_request(request, hit_blocks) in arrival order, caching each prompt's blocks after.
template <typename Cache, typename OnRequest>
void walk(const Workload& w, uint32_t block_size, Cache& cache, OnRequest&& on_request) {
  INFERA_CHECK(block_size > 0);
  std::vector<uint64_t> hashes;
  std::vector<uint32_t> tokens;
  for (const RequestSpec& r : w.requests) {
    r.prompt.tokens(tokens);
    kv::compute_seq_hashes(tokens, block_size, kv::kHashSeed, hashes);
    size_t hits = 0;
    while (hits < hashes.size() && cache.contains(hashes[hits])) ++hits;
    on_request(r, hits);
    for (const uint64_t h : hashes) cache.touch(h);
  }
}

template <typename Cache>
double hit_ratio(const Workload& w, uint32_t block_size, Cache& cache) {
  uint64_t hit_tokens = 0, prompt_tokens = 0;
  walk(w, block_size, cache, [&](const RequestSpec& r, size_t hits) {
    hit_tokens += hits * block_size;
    prompt_tokens += r.prompt.size();
  });
  return prompt_tokens ? static_cast<double>(hit_tokens) / static_cast<double>(prompt_tokens) : 0;
}

struct InfiniteBlocks {
  FlatU64Map<uint8_t> seen{50};
  bool contains(uint64_t h) const { return seen.contains(h); }
  void touch(uint64_t h) { seen.try_emplace(h, 1); }
};

}  // namespace

double infinite_cache_hit_ratio(const Workload& workload, uint32_t block_size) {
  InfiniteBlocks cache;
  return hit_ratio(workload, block_size, cache);
}

double pooled_lru_hit_ratio(const Workload& workload, uint32_t block_size, uint64_t capacity_blocks) {
  LruBlocks cache(capacity_blocks);
  return hit_ratio(workload, block_size, cache);
}

TtftQuantiles ttft_lower_bound(const Workload& workload, const engine::EngineConfig& engine) {
  const uint32_t bs = engine.block_size;
  const uint32_t budget = std::max(1u, engine.max_num_batched_tokens);
  std::vector<double> ttft_ms;
  ttft_ms.reserve(workload.requests.size());
  InfiniteBlocks cache;
  walk(workload, bs, cache, [&](const RequestSpec& r, size_t hits) {
    // As the engine does: the last prompt token is always computed, to sample the first token.
    const size_t tokens = r.prompt.size();
    const size_t cached = std::min(hits, tokens ? (tokens - 1) / bs : 0) * bs;
    size_t left = tokens - cached;
    double ms = 0;
    while (left > 0) {  // one prefill chunk per step, alone on an idle engine
      const size_t chunk = std::min<size_t>(left, budget);
      ms += engine::TimingModel::prefill_ms(static_cast<double>(chunk));
      left -= chunk;
    }
    ttft_ms.push_back(ms / engine.speedup_ratio);
  });
  return TtftQuantiles{quantile(ttft_ms, 0.5), quantile(ttft_ms, 0.9), quantile(ttft_ms, 0.99)};
}

}  // namespace infera::sim
