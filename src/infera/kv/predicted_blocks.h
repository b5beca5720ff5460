// PredictedBlocks: predicted-on-route cache entries. When a request is routed, the blocks its
// prefill will compute on the chosen worker count as cached there for a short TTL, until that
// worker's BlockStored confirms them (KvIndex erases them as it applies the event) or the TTL
// passes. So a burst of siblings with the same new prefix (best-of-N, agent fan-out, a new
// system prompt) lands together instead of spreading before the first event arrives (NVIDIA
// Dynamo's --router-predicted-ttl-secs, llm-d's speculative indexing). Keys are router block
// hashes; a predicted block counts only right after a worker's confirmed run (extend()).
//
// Bounded: at most max_entries per worker (the oldest give way). Concurrency: one mutex per
// worker, held for one add, confirm or extend (no I/O under it); an atomic count lets callers
// skip workers with nothing predicted without locking. Any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "infera/common/clock.h"

namespace infera::kv {

using WorkerId = uint32_t;

class PredictedBlocks {
 public:
  struct Options {
    Nanos ttl{0};  // 0: off (add does nothing)
    uint32_t max_workers = 1024;
    uint32_t max_entries = 1u << 20;  // per worker
  };

  PredictedBlocks(Options options, const Clock& clock);
  ~PredictedBlocks();
  PredictedBlocks(const PredictedBlocks&) = delete;
  PredictedBlocks& operator=(const PredictedBlocks&) = delete;

  bool enabled() const { return options_.ttl.count() > 0; }
  Nanos ttl() const { return options_.ttl; }

  // Blocks [from, end) of `seq_hashes` are being computed by `worker` (a request was routed
  // there with `from` blocks already cached): predicted until now + ttl (refreshed if present).
  void add(WorkerId worker, std::span<const uint64_t> seq_hashes, size_t from);
  // The worker cached these router hashes (BlockStored): no longer predicted.
  void confirm(WorkerId worker, std::span<const uint64_t> router_hashes);
  // The number of consecutive blocks of `seq_hashes` from position `from` (the end of the
  // worker's confirmed run) that are predicted, unexpired, on `worker`.
  uint32_t extend(WorkerId worker, std::span<const uint64_t> seq_hashes, size_t from) const;
  // Forgets a worker's entries (it left, or its mirror was reset).
  void clear_worker(WorkerId worker);

  // Unexpired or not yet swept entries of a worker (metrics, tests).
  uint32_t size(WorkerId worker) const;
  // Entries that expired unconfirmed, over all workers (a mispredicted route, or events off).
  uint64_t expired_total() const { return expired_.load(std::memory_order_relaxed); }
  uint64_t confirmed_total() const { return confirmed_.load(std::memory_order_relaxed); }

 private:
  struct Worker;
  Worker& worker(WorkerId id) const;

  Options options_;
  const Clock& clock_;
  // Each worker's entry count, in one flat array: a query skips the workers with none by reading
  // 4 contiguous bytes each, not a line of every worker's table.
  std::unique_ptr<std::atomic<uint32_t>[]> counts_;
  std::vector<std::unique_ptr<Worker>> workers_;
  mutable std::atomic<uint64_t> expired_{0};
  std::atomic<uint64_t> confirmed_{0};
};

}  // namespace infera::kv
