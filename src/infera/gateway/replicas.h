// Router replicas inside `infera server` (docs/scale-out.md, docs/contracts.md section 12): this
// replica's id, the load it shares with its siblings and folds in from them (replica::LoadBus
// and replica::PeerLoad, over the process's NATS connection), how it finds them
// (replica::Membership), and the warm start: the KV index copied from a ready sibling before
// the fleet's event streams start, /readyz failing until then. Internal to the gateway module.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "infera/common/status.h"
#include "infera/events/stream.h"
#include "infera/replica/load_bus.h"
#include "infera/replica/membership.h"
#include "infera/replica/peer_load.h"

namespace infera::config {
struct ServerConfig;
}
namespace infera::http {
class Routes;
}
namespace infera::metrics {
class Registry;
}

namespace infera::gateway {

struct GatewayContext;

// What the warm start did, for /v1/admin/routers and the log.
struct WarmReport {
  std::string source;  // the sibling's URL, or "" (none was ready: rebuilt from replay)
  size_t workers = 0;  // worker mirrors in the snapshot
  size_t seeded = 0;   // of them, seeded into a stream of this replica's fleet
  uint64_t blocks = 0;
  double took_s = 0;
  std::string note;  // why no sibling's copy was used
};

struct ReplicaState {
  // This replica's id on the bus: host name, process id and a random suffix (a restarted
  // replica is a new peer; its old entries expire with its silence).
  std::string router_id;
  std::unique_ptr<replica::PeerLoad> peers;  // the siblings' load, folded into ours
  std::unique_ptr<replica::LoadBus> bus;     // null: no NATS connection, nothing shared
  // The siblings: --peer, etcd's infera/routers/, or the k8s pods labelled as routers. Null:
  // none to look for (static discovery without --peer).
  std::unique_ptr<replica::Membership> membership;
  std::atomic<uint64_t> snapshots_served{0};

  // Warm start: false until the sibling's copy is in (or there is none to wait for).
  std::atomic<bool> warm{false};
  mutable std::mutex mu;
  WarmReport report;  // guarded by mu
  // The sibling's stream snapshots by worker id, waiting for their workers to join the fleet;
  // taken by take_seed() when the worker's stream is made. Guarded by mu.
  std::unordered_map<std::string, events::StreamSnapshot> seeds;
  std::chrono::steady_clock::time_point seeds_until{};

  // The snapshot of `worker` (by id) to seed its stream with, once.
  std::optional<events::StreamSnapshot> take_seed(const std::string& worker);
};

// A fresh router id (hostname-pid-random).
std::string make_router_id();
// After the NATS connection is up and the fleet exists: shares this replica's load changes and
// folds in the siblings' (nothing to do without a bus).
Status start_load_sharing(const config::ServerConfig& config, GatewayContext& g);
// Finds the siblings (replica::make_membership: --peer, else etcd's or k8s' router records;
// none with static discovery and no --peer) and starts following them: a sibling that leaves
// the membership has its load dropped at once. `port`: the bound listener's, for this replica's
// advertised URL. A backend that cannot be reached yet is logged, not fatal (it keeps trying).
Status start_membership(const config::ServerConfig& config, GatewayContext& g, uint16_t port);
// The warm start, on the gateway's loop: find a ready sibling (the membership's peers, ready
// ones first; its first listing awaited for at most 2 s), copy its index snapshot
// (/v1/admin/kv-snapshot, 10 s per sibling, 1 GiB at most), keep each worker's part for its
// stream (ReplicaState::take_seed, via Fleet::Options::seed), mark the replica warm, then call
// `then` (which starts discovery, so every stream is made after the copy is in). With no
// sibling ready, or no membership, it is warm at once and streams rebuild from the workers'
// replay buffers as before.
void start_warm_start(GatewayContext& g, std::function<void()> then);
// The replica's series at scrape time (docs/metrics.md): peers, load ops, warmth.
void add_replica_metrics(const GatewayContext& g, metrics::Registry& out);
// /v1/admin/routers and /v1/admin/kv-snapshot (behind --admin-token like the admin API).
void add_replica_routes(GatewayContext& g, http::Routes& routes);

}  // namespace infera::gateway
