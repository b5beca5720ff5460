// PeerLoad: the other router replicas' in-flight requests, folded into this replica's own
// ActiveLoad (and PredictedBlocks), so every replica scores workers with the whole group's load
// (docs/contracts.md section 12, docs/scale-out.md). Each peer's "add" registers the request's
// blocks on the named worker as if this replica had routed it (phase prefill, its uncached
// blocks pending; its predicted-on-route entries too when the TTL is on); "prefill_done" and
// "release" move and drop it. A peer is known by its router id; what it registered is dropped
// when it says nothing (not even its heartbeat) for `silence`, or when drop_peer() says it left.
// ActiveLoad's own max age still bounds an entry whose release was lost.
// Sequence numbers: a gap is counted as lost ops (core NATS is at-most-once; the load converges
// as requests end and expire); an op at or below the last seen is a duplicate and ignored.
// Bounded: at most max_peers peers and max_requests per peer (beyond: counted, not applied).
// Thread-safe (one mutex; apply() runs on the bus thread, expire() from a timer, stats anywhere).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "infera/common/clock.h"
#include "infera/kv/active_load.h"
#include "infera/kv/predicted_blocks.h"
#include "infera/replica/load_op.h"

namespace infera::replica {

enum class ApplyOutcome : uint8_t {
  kApplied,
  kOwn,             // this replica's own op (the bus echoes it)
  kDuplicate,       // seq at or below the peer's last
  kUnknownWorker,   // an add for a worker this replica does not know (yet)
  kUnknownRequest,  // prefill_done/release of a request never added (or expired, or lost)
  kOverLimit,       // too many peers, or too many requests of one peer
};
inline constexpr size_t kNumApplyOutcomes = 6;
std::string_view apply_outcome_name(ApplyOutcome outcome);

struct PeerStats {
  std::string router_id;
  uint64_t last_seq = 0;
  uint64_t ops = 0;      // applied
  uint64_t lost = 0;     // seq gaps
  uint64_t requests = 0; // in flight now, as it told us
  Nanos last_heard{0};   // on the clock given
};

// Peers dropped, by why: they said goodbye ("bye"), fell silent, or the membership said they
// left.
struct PeerDepartures {
  uint64_t goodbye = 0;
  uint64_t silent = 0;
  uint64_t gone = 0;
};

class PeerLoad {
 public:
  struct Options {
    Nanos silence = std::chrono::seconds(5);
    size_t max_peers = 256;
    size_t max_requests = 1u << 20;  // per peer
  };
  // The local slot of a worker named by its id (host:port), or none when it is not in the fleet.
  using Resolve = std::function<std::optional<kv::WorkerId>(std::string_view worker)>;

  // `predicted` may be null (predicted-on-route off). Everything must outlive this.
  PeerLoad(Options options, std::string self_id, kv::ActiveLoad& load,
           kv::PredictedBlocks* predicted, Resolve resolve, const Clock& clock);
  ~PeerLoad();  // releases every peer's entries
  PeerLoad(const PeerLoad&) = delete;
  PeerLoad& operator=(const PeerLoad&) = delete;

  // Applies one decoded op (`blocks`: an add's hashes).
  ApplyOutcome apply(const LoadOp& op, std::span<const uint64_t> blocks);
  // Drops the entries of peers silent for longer than `silence`; returns how many peers.
  size_t expire();
  // A peer left (membership said so): its entries go now. False when it was not known.
  bool drop_peer(std::string_view router_id);

  std::vector<PeerStats> peers() const;
  std::array<uint64_t, kNumApplyOutcomes> outcomes() const;
  PeerDepartures departures() const;
  const std::string& self_id() const { return self_id_; }

 private:
  struct Peer {
    uint64_t last_seq = 0;
    uint64_t ops = 0;
    uint64_t lost = 0;
    Nanos last_heard{0};
    std::unordered_map<uint64_t, kv::LoadTicket> requests;
  };
  ApplyOutcome count(ApplyOutcome outcome);
  void release_all(Peer& peer);

  Options options_;
  std::string self_id_;
  kv::ActiveLoad& load_;
  kv::PredictedBlocks* predicted_;
  Resolve resolve_;
  const Clock& clock_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Peer> peers_;  // guarded by mu_
  std::array<uint64_t, kNumApplyOutcomes> outcomes_{};  // guarded by mu_
  PeerDepartures departures_;                           // guarded by mu_
};

}  // namespace infera::replica
