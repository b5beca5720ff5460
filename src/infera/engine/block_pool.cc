#include "infera/engine/block_pool.h"

#include "infera/common/check.h"

namespace infera::engine {

BlockPool::BlockPool(uint32_t num_blocks)
    : num_blocks_(num_blocks),
      ref_(num_blocks, 0),
      hash_(num_blocks, 0),
      cached_(num_blocks, 0),
      same_hash_next_(num_blocks, kNone),
      prev_(size_t{num_blocks} + 1),
      next_(size_t{num_blocks} + 1) {
  INFERA_CHECK(num_blocks >= 2 && num_blocks < kNone);
  const uint32_t sentinel = num_blocks_;
  prev_[sentinel] = next_[sentinel] = sentinel;
  // vLLM queues every block in id order and takes block 0 out as the null block.
  for (uint32_t b = 1; b < num_blocks_; ++b) push_back_free(b);
  ref_[0] = 1;  // the null block is never free
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(num_usable());
}

uint32_t BlockPool::find_cached(uint64_t hash) const {
  const uint32_t* head = cached_map_.find(hash);
  return head ? *head : kNone;
}

void BlockPool::touch(std::span<const uint32_t> blocks) {
  for (const uint32_t b : blocks) {
    if (ref_[b] == 0) unlink_free(b);
    ++ref_[b];
  }
}

void BlockPool::allocate(uint32_t n, std::vector<uint32_t>& out, std::vector<uint64_t>& evicted) {
  INFERA_CHECK(n <= num_free_);
  const uint32_t sentinel = num_blocks_;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t b = next_[sentinel];
    unlink_free(b);
    if (cached_[b]) {
      evicted.push_back(hash_[b]);
      uncache(b);
    }
    ref_[b] = 1;
    out.push_back(b);
  }
}

void BlockPool::release(std::span<const uint32_t> blocks) {
  for (size_t i = blocks.size(); i-- > 0;) {
    const uint32_t b = blocks[i];
    INFERA_CHECK(ref_[b] > 0);
    if (--ref_[b] == 0) push_back_free(b);
  }
}

void BlockPool::cache(uint32_t block, uint64_t hash) {
  INFERA_CHECK(block != 0 && ref_[block] > 0 && !cached_[block]);
  cached_[block] = 1;
  hash_[block] = hash;
  same_hash_next_[block] = kNone;
  ++num_cached_blocks_;
  auto [head, inserted] = cached_map_.try_emplace(hash, block);
  if (inserted) return;
  // Another block already caches this hash: append, so the earliest copy stays first.
  uint32_t b = *head;
  while (same_hash_next_[b] != kNone) b = same_hash_next_[b];
  same_hash_next_[b] = block;
}

bool BlockPool::reset() {
  if (num_free_ != num_usable()) return false;
  for (uint32_t b = 1; b < num_blocks_; ++b) {
    cached_[b] = 0;
    hash_[b] = 0;
    same_hash_next_[b] = kNone;
  }
  cached_map_.clear();
  num_cached_blocks_ = 0;
  return true;
}

std::vector<uint32_t> BlockPool::free_queue() const {
  std::vector<uint32_t> out;
  out.reserve(num_free_);
  for (uint32_t b = next_[num_blocks_]; b != num_blocks_; b = next_[b]) out.push_back(b);
  return out;
}

void BlockPool::push_back_free(uint32_t block) {
  const uint32_t sentinel = num_blocks_;
  const uint32_t last = prev_[sentinel];
  next_[last] = block;
  prev_[block] = last;
  next_[block] = sentinel;
  prev_[sentinel] = block;
  ++num_free_;
}

void BlockPool::unlink_free(uint32_t block) {
  next_[prev_[block]] = next_[block];
  prev_[next_[block]] = prev_[block];
  --num_free_;
}

void BlockPool::uncache(uint32_t block) {
  const uint64_t h = hash_[block];
  uint32_t* head = cached_map_.find(h);
  INFERA_CHECK(head != nullptr);
  if (*head == block) {
    if (same_hash_next_[block] == kNone) {
      cached_map_.erase(h);
    } else {
      *head = same_hash_next_[block];
    }
  } else {
    uint32_t b = *head;
    while (same_hash_next_[b] != block) {
      b = same_hash_next_[b];
      INFERA_CHECK(b != kNone);
    }
    same_hash_next_[b] = same_hash_next_[block];
  }
  cached_[block] = 0;
  hash_[block] = 0;
  same_hash_next_[block] = kNone;
  --num_cached_blocks_;
}

}  // namespace infera::engine
