#include "infera/kv/active_load.h"

#include <deque>
#include <mutex>
#include <unordered_map>

#include "infera/common/check.h"
#include "infera/common/flat_map.h"

namespace infera::kv {

struct KvRequest {
  std::vector<uint64_t> hashes;
  Nanos added{0};
};

struct ActiveLoad::Worker {
  mutable std::mutex mu;
  // block hash -> in-flight requests holding it. Half full at most: routing inserts and
  // releases a whole prompt's blocks per request, and these tables are small.
  FlatU64Map<uint32_t> refs{50};
  std::unordered_map<uint64_t, KvRequest> live;  // serial -> request
  std::deque<std::pair<Nanos, uint64_t>> order;  // (added, serial), oldest first
  std::atomic<uint32_t> blocks{0};
  std::atomic<uint32_t> requests{0};

  void drop(const KvRequest& request) {
    for (const uint64_t h : request.hashes) {
      uint32_t* n = refs.find(h);
      if (n && --*n == 0) refs.erase(h);
    }
  }
  void publish() {
    blocks.store(static_cast<uint32_t>(refs.size()), std::memory_order_relaxed);
    requests.store(static_cast<uint32_t>(live.size()), std::memory_order_relaxed);
  }
  // Removes requests added before `cutoff` (older than max_age). Caller holds mu.
  size_t expire_before(Nanos cutoff) {
    size_t expired = 0;
    while (!order.empty() && order.front().first < cutoff) {
      auto it = live.find(order.front().second);
      order.pop_front();
      if (it == live.end()) continue;  // already released
      drop(it->second);
      live.erase(it);
      ++expired;
    }
    // Released requests leave stale (time, serial) pairs; trim them when the queue is mostly
    // stale so it stays proportional to the requests in flight.
    if (order.size() > 64 && order.size() > 4 * live.size()) {
      std::deque<std::pair<Nanos, uint64_t>> kept;
      for (const auto& entry : order) {
        if (live.count(entry.second)) kept.push_back(entry);
      }
      order.swap(kept);
    }
    return expired;
  }
};

ActiveLoad::ActiveLoad(Options options, const Clock& clock) : options_(options), clock_(clock) {
  workers_.reserve(options_.max_workers);
  for (uint32_t i = 0; i < options_.max_workers; ++i) workers_.push_back(std::make_unique<Worker>());
}

ActiveLoad::~ActiveLoad() = default;

ActiveLoad::Worker& ActiveLoad::worker(WorkerId id) const {
  INFERA_CHECK(id < options_.max_workers);
  return *workers_[id];
}

LoadTicket ActiveLoad::add(WorkerId id, std::span<const uint64_t> seq_hashes) {
  Worker& w = worker(id);
  const Nanos now = clock_.now();
  const uint64_t serial = next_serial_.fetch_add(1, std::memory_order_relaxed);
  KvRequest request{std::vector<uint64_t>(seq_hashes.begin(), seq_hashes.end()), now};
  std::lock_guard lock(w.mu);
  w.expire_before(now - options_.max_age);
  for (const uint64_t h : request.hashes) ++*w.refs.try_emplace(h, 0).first;
  w.live.emplace(serial, std::move(request));
  w.order.emplace_back(now, serial);
  w.publish();
  return LoadTicket{id, serial};
}

void ActiveLoad::release(LoadTicket ticket) {
  if (!ticket) return;
  Worker& w = worker(ticket.worker);
  std::lock_guard lock(w.mu);
  auto it = w.live.find(ticket.serial);
  if (it == w.live.end()) return;
  w.drop(it->second);
  w.live.erase(it);
  w.publish();
}

size_t ActiveLoad::expire() {
  const Nanos cutoff = clock_.now() - options_.max_age;
  size_t expired = 0;
  for (auto& w : workers_) {
    std::lock_guard lock(w->mu);
    if (w->live.empty()) continue;
    expired += w->expire_before(cutoff);
    w->publish();
  }
  return expired;
}

void ActiveLoad::remove_worker(WorkerId id) {
  Worker& w = worker(id);
  std::lock_guard lock(w.mu);
  w.refs.clear();
  w.live.clear();
  w.order.clear();
  w.publish();
}

uint32_t ActiveLoad::active_blocks(WorkerId id) const {
  return worker(id).blocks.load(std::memory_order_relaxed);
}

uint32_t ActiveLoad::active_requests(WorkerId id) const {
  return worker(id).requests.load(std::memory_order_relaxed);
}

uint32_t ActiveLoad::new_blocks(WorkerId id, std::span<const uint64_t> seq_hashes) const {
  Worker& w = worker(id);
  std::lock_guard lock(w.mu);
  uint32_t fresh = 0;
  for (const uint64_t h : seq_hashes) fresh += w.refs.contains(h) ? 0u : 1u;
  return fresh;
}

}  // namespace infera::kv
