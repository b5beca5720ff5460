#include "infera/kv/predicted_blocks.h"

#include <deque>
#include <mutex>

#include "infera/common/check.h"
#include "infera/common/flat_map.h"
#include "infera/common/spin_mutex.h"

namespace infera::kv {

struct PredictedBlocks::Worker {
  mutable SpinMutex mu;
  FlatU64Map<int64_t> expiry{50};                 // router hash -> expiry (ns on the clock)
  std::deque<std::pair<int64_t, uint64_t>> fifo;  // (expiry, hash), oldest first; may be stale
  std::atomic<uint32_t>* count = nullptr;  // this worker's entry of PredictedBlocks::counts_

  // Drops entries whose expiry passed (or, with `limit`, the oldest beyond it). Caller holds mu.
  uint64_t sweep(int64_t now, size_t limit) {
    uint64_t expired = 0;
    while (!fifo.empty() && (fifo.front().first <= now || expiry.size() > limit)) {
      const auto [at, h] = fifo.front();
      fifo.pop_front();
      int64_t* e = expiry.find(h);
      if (e == nullptr || *e != at) continue;  // confirmed, or refreshed later in the queue
      expiry.erase(h);
      ++expired;
    }
    // Refreshed and confirmed entries leave stale pairs behind: rebuild when mostly stale.
    if (fifo.size() > 64 && fifo.size() > 4 * expiry.size()) {
      std::deque<std::pair<int64_t, uint64_t>> kept;
      for (const auto& p : fifo) {
        const int64_t* e = expiry.find(p.second);
        if (e && *e == p.first) kept.push_back(p);
      }
      fifo.swap(kept);
    }
    return expired;
  }
  void publish() { count->store(static_cast<uint32_t>(expiry.size()), std::memory_order_relaxed); }
};

PredictedBlocks::PredictedBlocks(Options options, const Clock& clock)
    : options_(options),
      clock_(clock),
      counts_(std::make_unique<std::atomic<uint32_t>[]>(options_.max_workers)) {
  INFERA_CHECK(options_.max_entries > 0);
  workers_.reserve(options_.max_workers);
  for (uint32_t i = 0; i < options_.max_workers; ++i) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->count = &counts_[i];
  }
}

PredictedBlocks::~PredictedBlocks() = default;

PredictedBlocks::Worker& PredictedBlocks::worker(WorkerId id) const {
  INFERA_CHECK(id < options_.max_workers);
  return *workers_[id];
}

void PredictedBlocks::add(WorkerId id, std::span<const uint64_t> seq_hashes, size_t from) {
  if (!enabled() || from >= seq_hashes.size()) return;
  Worker& w = worker(id);
  const int64_t now = clock_.now().count();
  const int64_t until = now + options_.ttl.count();
  std::lock_guard lock(w.mu);
  w.expiry.reserve_more(seq_hashes.size() - from);  // one rehash, not several
  for (size_t i = from; i < seq_hashes.size(); ++i) {
    *w.expiry.try_emplace(seq_hashes[i], until).first = until;
    w.fifo.emplace_back(until, seq_hashes[i]);
  }
  expired_.fetch_add(w.sweep(now, options_.max_entries), std::memory_order_relaxed);
  w.publish();
}

void PredictedBlocks::confirm(WorkerId id, std::span<const uint64_t> router_hashes) {
  if (id >= options_.max_workers) return;
  if (counts_[id].load(std::memory_order_relaxed) == 0) return;
  Worker& w = worker(id);
  std::lock_guard lock(w.mu);
  uint64_t confirmed = 0;
  for (const uint64_t h : router_hashes) confirmed += w.expiry.erase(h) ? 1u : 0u;
  confirmed_.fetch_add(confirmed, std::memory_order_relaxed);
  w.publish();
}

uint32_t PredictedBlocks::extend(WorkerId id, std::span<const uint64_t> seq_hashes,
                                 size_t from) const {
  if (id >= options_.max_workers) return 0;
  if (counts_[id].load(std::memory_order_relaxed) == 0) return 0;
  const Worker& w = worker(id);
  const int64_t now = clock_.now().count();
  std::lock_guard lock(w.mu);
  uint32_t n = 0;
  for (size_t i = from; i < seq_hashes.size(); ++i, ++n) {
    const int64_t* e = w.expiry.find(seq_hashes[i]);
    if (e == nullptr || *e <= now) break;
  }
  return n;
}

void PredictedBlocks::clear_worker(WorkerId id) {
  Worker& w = worker(id);
  std::lock_guard lock(w.mu);
  w.expiry.clear();
  w.fifo.clear();
  w.publish();
}

uint32_t PredictedBlocks::size(WorkerId id) const {
  INFERA_CHECK(id < options_.max_workers);
  return counts_[id].load(std::memory_order_relaxed);
}

}  // namespace infera::kv
