// RouterGroup: the router side of `infera sim`, one router or several replicas of it, as several
// `infera server` behind one Service. Each replica has what a server has: its own KvIndex (fed
// every engine's KV events: each replica mirrors every worker), PredictedBlocks, ActiveLoad,
// EngineSignals and Router. With sync on, each replica's load changes leave it as the server's
// own ops (routing::LoadListener -> replica::encode_op) on a virtual-time bus that hands each op,
// `sync_latency` later, to every other replica, which decodes it and folds it in with
// replica::PeerLoad: the code `infera server` runs on NATS (docs/contracts.md section 12). No
// heartbeats are sent and PeerLoad::expire() is never called: no replica leaves in the sim.
// One replica: the single router of before, nothing sent. Owned by one simulation; one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "infera/common/clock.h"
#include "infera/common/status.h"
#include "infera/engine/metrics.h"
#include "infera/events/applier.h"
#include "infera/kv/active_load.h"
#include "infera/routing/router.h"

namespace infera::sim {

struct RouterGroupOptions {
  uint32_t workers = 8;      // worker ids 0..workers-1, named worker_name(id) on the bus
  uint32_t block_size = 16;  // tokens per block
  uint32_t routers = 1;      // replicas; replica r is seeded with router.seed + r
  bool sync = true;          // share load changes (routers > 1)
  Nanos sync_latency{0};     // virtual time from a change to its arrival at the other replicas
  Nanos active_ttl{std::chrono::seconds(300)};  // ActiveLoad max age
  routing::RouterOptions router;                // the policy and its load model
};

// What the bus carried: ops sent, and ops the receivers' PeerLoad applied or did not (an
// unknown worker or request, a duplicate: none is expected in the sim).
struct SyncStats {
  uint64_t sent = 0;
  uint64_t applied = 0;
  uint64_t not_applied = 0;
};

// How the sim names worker `id` in load ops (a server names them host:port).
std::string worker_name(uint32_t id);

class RouterGroup {
 public:
  static Result<std::unique_ptr<RouterGroup>> create(RouterGroupOptions options,
                                                     const Clock& clock);
  ~RouterGroup();
  RouterGroup(const RouterGroup&) = delete;
  RouterGroup& operator=(const RouterGroup&) = delete;

  uint32_t size() const { return static_cast<uint32_t>(replicas_.size()); }
  routing::Router& router(uint32_t replica);

  // One engine's KV events, applied to every replica's index.
  void apply_events(uint32_t worker, const events::EventBatch& batch, events::ApplyTally& tally);
  // One engine's own load reading, recorded by every replica beside its own counts.
  void record_engine_metrics(uint32_t worker, const engine::EngineMetrics& metrics);

  // When the earliest op on the bus is due; none when the bus is empty.
  std::optional<Nanos> next_delivery() const;
  // Hands every op due by now to the other replicas, in the order sent.
  void deliver_due();

  // Replica 0's KvIndex::memory_bytes() (every replica mirrors the same fleet).
  size_t index_memory_bytes() const;
  SyncStats sync_stats() const { return stats_; }

 private:
  struct Replica;
  class Link;
  struct Message {
    Nanos at{0};
    uint32_t from = 0;
    std::string bytes;  // an encoded load op
  };

  RouterGroup(RouterGroupOptions options, const Clock& clock);
  Status build();
  void post(uint32_t from, std::string bytes);

  RouterGroupOptions options_;
  const Clock& clock_;
  std::vector<std::string> names_;  // worker_name of each worker
  std::deque<Message> bus_;       // in the order sent; the latency is constant, so also by due time
  std::vector<uint64_t> blocks_;  // decode scratch
  SyncStats stats_;
  std::vector<std::unique_ptr<Replica>> replicas_;  // last: destroyed first
};

}  // namespace infera::sim
