// ActiveLoad: what is in flight on each worker, as the router registered it. Per worker, the
// distinct blocks of all requests in flight on it (a prefix shared by several in-flight requests
// counts once): `active_blocks(w)` of the cost function (docs/contracts.md section 6). Block
// hashes are chained (kv/block_hash.h), so a block stands for its whole prefix and two requests
// share exactly their longest common prefix: a worker keeps its requests sorted by block
// sequence and counts each one's blocks beyond the most it shares with a neighbour there.
// (Hashes that are not chained are counted as if they were: {1, 2} and {2} hold 3 blocks.) Each
// request also has a phase, for the prefill-aware load model (routing/load_model.h): it is in
// prefill from routing until its first token comes back (prefill_done), carrying the prompt blocks
// the worker must still compute (its uncached blocks at routing time), then in decode, carrying its
// prompt blocks as KV held. A request is added when it is routed and released on completion, error
// or cancel; a request older than max_age (default 5 minutes, read from the injected Clock)
// expires, so a lost release cannot inflate a worker's load forever.
//
// Concurrency: one mutex per worker, held for one add/release (no I/O under it); the counts
// read by routing are atomics, so scoring takes no lock. Any thread.
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "infera/common/bits.h"
#include "infera/common/check.h"
#include "infera/common/clock.h"
#include "infera/kv/index.h"

namespace infera::kv {

// Names one registered request; a default-constructed ticket names none.
struct LoadTicket {
  WorkerId worker = 0;
  uint64_t serial = 0;  // 0: none
  explicit operator bool() const { return serial != 0; }
};

// One worker's in-flight load, by phase (each field read atomically, not all at one instant).
struct WorkerLoad {
  uint32_t active_blocks = 0;     // distinct blocks of every in-flight request
  uint32_t active_requests = 0;   // requests in flight
  uint32_t prefill_blocks = 0;    // blocks still to compute: uncached blocks of requests in prefill
  uint32_t prefill_requests = 0;  // requests whose first token has not come back
  uint32_t decode_blocks = 0;     // prompt blocks of requests past their first token (KV held)
  uint32_t decode_requests = 0;   // requests past their first token
};

class ActiveLoad {
 public:
  struct Options {
    Nanos max_age = std::chrono::minutes(5);
    uint32_t max_workers = 1024;
  };

  ActiveLoad(Options options, const Clock& clock);
  ~ActiveLoad();
  ActiveLoad(const ActiveLoad&) = delete;
  ActiveLoad& operator=(const ActiveLoad&) = delete;

  // Registers a routed request's blocks on `worker`, in prefill with `uncached_blocks` still to
  // compute (default: every block of `seq_hashes`); also expires that worker's old requests.
  LoadTicket add(WorkerId worker, std::span<const uint64_t> seq_hashes,
                 uint32_t uncached_blocks = UINT32_MAX);
  // The request's first token came back: its prefill is done, it decodes from now on. Only the
  // first call counts; after release or expiry it does nothing. True when it counted.
  bool prefill_done(LoadTicket ticket);
  // Releases a request's blocks. Releasing twice, or after expiry, does nothing. True when it
  // released.
  bool release(LoadTicket ticket);
  // Expires requests older than max_age on every worker; returns how many expired.
  size_t expire();
  // Drops everything registered on a worker (it left the fleet).
  void remove_worker(WorkerId worker);

  uint32_t active_blocks(WorkerId worker) const;
  uint32_t active_requests(WorkerId worker) const;
  WorkerLoad load(WorkerId worker) const {
    INFERA_CHECK(worker < options_.max_workers);
    const Published& p = published_[worker];
    WorkerLoad l;
    l.active_blocks = p.blocks.load(std::memory_order_relaxed);
    l.active_requests = p.requests.load(std::memory_order_relaxed);
    l.prefill_blocks = p.prefill_blocks.load(std::memory_order_relaxed);
    l.prefill_requests = p.prefill_requests.load(std::memory_order_relaxed);
    l.decode_blocks = p.decode_blocks.load(std::memory_order_relaxed);
    l.decode_requests = p.decode_requests.load(std::memory_order_relaxed);
    return l;
  }
  // Hints the cache that load(worker) will be read soon (a decision over many workers asks
  // a few ahead).
  void prefetch(WorkerId worker) const {
    if (worker < options_.max_workers)
      prefetch_line(reinterpret_cast<uintptr_t>(&published_[worker]));
  }
  // Of `seq_hashes`, how many are not yet active on `worker` (the blocks a request would add).
  uint32_t new_blocks(WorkerId worker, std::span<const uint64_t> seq_hashes) const;

 private:
  struct Worker;
  // What routing reads of a worker, published after each change: one flat array over all
  // workers, so that scoring a thousand candidates reads 32 contiguous bytes each instead of a
  // line of every worker's own table (docs/benchmarks.md, "Router replicas in virtual time").
  struct alignas(32) Published {
    std::atomic<uint32_t> blocks{0}, requests{0};
    std::atomic<uint32_t> prefill_blocks{0}, prefill_requests{0};
    std::atomic<uint32_t> decode_blocks{0}, decode_requests{0};
  };
  Worker& worker(WorkerId id) const;

  Options options_;
  const Clock& clock_;
  std::unique_ptr<Published[]> published_;  // max_workers entries, by worker id
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint64_t> next_serial_{1};
};

}  // namespace infera::kv
