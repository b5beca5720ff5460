#include "infera/replica/peer_load.h"

namespace infera::replica {

std::string_view apply_outcome_name(ApplyOutcome outcome) {
  switch (outcome) {
    case ApplyOutcome::kApplied: return "applied";
    case ApplyOutcome::kOwn: return "own";
    case ApplyOutcome::kDuplicate: return "duplicate";
    case ApplyOutcome::kUnknownWorker: return "unknown_worker";
    case ApplyOutcome::kUnknownRequest: return "unknown_request";
    case ApplyOutcome::kOverLimit: return "over_limit";
  }
  return "?";
}

PeerLoad::PeerLoad(Options options, std::string self_id, kv::ActiveLoad& load,
                   kv::PredictedBlocks* predicted, Resolve resolve, const Clock& clock)
    : options_(options),
      self_id_(std::move(self_id)),
      load_(load),
      predicted_(predicted && predicted->enabled() ? predicted : nullptr),
      resolve_(std::move(resolve)),
      clock_(clock) {}

PeerLoad::~PeerLoad() {
  std::lock_guard lock(mu_);
  for (auto& [id, peer] : peers_) release_all(peer);
}

ApplyOutcome PeerLoad::count(ApplyOutcome outcome) {
  ++outcomes_[static_cast<size_t>(outcome)];
  return outcome;
}

void PeerLoad::release_all(Peer& peer) {
  for (const auto& [request, ticket] : peer.requests) load_.release(ticket);
  peer.requests.clear();
}

ApplyOutcome PeerLoad::apply(const LoadOp& op, std::span<const uint64_t> blocks) {
  std::lock_guard lock(mu_);
  if (op.router_id == self_id_) return count(ApplyOutcome::kOwn);
  auto it = peers_.find(std::string(op.router_id));
  if (it == peers_.end()) {
    if (peers_.size() >= options_.max_peers) return count(ApplyOutcome::kOverLimit);
    it = peers_.emplace(std::string(op.router_id), Peer{}).first;
  }
  Peer& peer = it->second;
  if (peer.ops > 0 || peer.last_seq > 0) {
    if (op.seq <= peer.last_seq) return count(ApplyOutcome::kDuplicate);
    peer.lost += op.seq - peer.last_seq - 1;
  }
  peer.last_seq = op.seq;
  peer.last_heard = clock_.now();
  ++peer.ops;
  switch (op.kind) {
    case OpKind::kHello: return count(ApplyOutcome::kApplied);
    case OpKind::kBye:
      release_all(peer);
      peers_.erase(it);
      ++departures_.goodbye;
      return count(ApplyOutcome::kApplied);
    case OpKind::kAdd: {
      const std::optional<kv::WorkerId> worker = resolve_(op.worker);
      if (!worker) return count(ApplyOutcome::kUnknownWorker);
      auto [entry, inserted] = peer.requests.try_emplace(op.request);
      if (!inserted) {
        load_.release(entry->second);  // the same request added twice: the last one counts
      } else if (peer.requests.size() > options_.max_requests) {
        peer.requests.erase(entry);
        return count(ApplyOutcome::kOverLimit);
      }
      entry->second = load_.add(*worker, blocks, op.uncached);
      if (predicted_) predicted_->add(*worker, blocks, op.cached);
      return count(ApplyOutcome::kApplied);
    }
    case OpKind::kPrefillDone:
    case OpKind::kRelease: {
      auto entry = peer.requests.find(op.request);
      if (entry == peer.requests.end()) return count(ApplyOutcome::kUnknownRequest);
      if (op.kind == OpKind::kPrefillDone) {
        load_.prefill_done(entry->second);
      } else {
        load_.release(entry->second);
        peer.requests.erase(entry);
      }
      return count(ApplyOutcome::kApplied);
    }
  }
  return count(ApplyOutcome::kApplied);
}

size_t PeerLoad::expire() {
  std::lock_guard lock(mu_);
  const Nanos cutoff = clock_.now() - options_.silence;
  size_t dropped = 0;
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (it->second.last_heard < cutoff) {
      release_all(it->second);
      it = peers_.erase(it);
      ++dropped;
      ++departures_.silent;
    } else {
      ++it;
    }
  }
  return dropped;
}

bool PeerLoad::drop_peer(std::string_view router_id) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(std::string(router_id));
  if (it == peers_.end()) return false;
  release_all(it->second);
  peers_.erase(it);
  ++departures_.gone;
  return true;
}

PeerDepartures PeerLoad::departures() const {
  std::lock_guard lock(mu_);
  return departures_;
}

std::vector<PeerStats> PeerLoad::peers() const {
  std::lock_guard lock(mu_);
  std::vector<PeerStats> out;
  out.reserve(peers_.size());
  for (const auto& [id, peer] : peers_) {
    out.push_back(PeerStats{id, peer.last_seq, peer.ops, peer.lost, peer.requests.size(),
                            peer.last_heard});
  }
  return out;
}

std::array<uint64_t, kNumApplyOutcomes> PeerLoad::outcomes() const {
  std::lock_guard lock(mu_);
  return outcomes_;
}

}  // namespace infera::replica
