#include "infera/kv/active_load.h"

#include <deque>
#include <mutex>
#include <unordered_map>

#include "infera/common/check.h"
#include "infera/common/flat_map.h"
#include "infera/common/spin_mutex.h"

namespace infera::kv {

struct KvRequest {
  std::vector<uint64_t> hashes;
  Nanos added{0};
  uint32_t uncached = 0;  // blocks its prefill computes
  bool prefill = true;    // first token not back yet
};

struct ActiveLoad::Worker {
  mutable SpinMutex mu;
  // block hash -> in-flight requests holding it. Half full at most: routing inserts and
  // releases a whole prompt's blocks per request, and these tables are small.
  FlatU64Map<uint32_t> refs{50};
  std::unordered_map<uint64_t, KvRequest> live;  // serial -> request
  std::deque<std::pair<Nanos, uint64_t>> order;  // (added, serial), oldest first
  // Phase sums, kept under mu and published with the distinct-block count.
  uint32_t prefill_blocks = 0, prefill_requests = 0, decode_blocks = 0, decode_requests = 0;
  Published* pub = nullptr;  // this worker's entry of ActiveLoad::published_

  void enter(const KvRequest& r) {
    if (r.prefill) {
      prefill_blocks += r.uncached;
      ++prefill_requests;
    } else {
      decode_blocks += static_cast<uint32_t>(r.hashes.size());
      ++decode_requests;
    }
  }
  void leave(const KvRequest& r) {
    if (r.prefill) {
      prefill_blocks -= r.uncached;
      --prefill_requests;
    } else {
      decode_blocks -= static_cast<uint32_t>(r.hashes.size());
      --decode_requests;
    }
  }
  void drop(const KvRequest& request) {
    for (const uint64_t h : request.hashes) {
      uint32_t* n = refs.find(h);
      if (n && --*n == 0) refs.erase(h);
    }
    leave(request);
  }
  void publish() {
    pub->blocks.store(static_cast<uint32_t>(refs.size()), std::memory_order_relaxed);
    pub->requests.store(static_cast<uint32_t>(live.size()), std::memory_order_relaxed);
    pub->prefill_blocks.store(prefill_blocks, std::memory_order_relaxed);
    pub->prefill_requests.store(prefill_requests, std::memory_order_relaxed);
    pub->decode_blocks.store(decode_blocks, std::memory_order_relaxed);
    pub->decode_requests.store(decode_requests, std::memory_order_relaxed);
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

ActiveLoad::ActiveLoad(Options options, const Clock& clock)
    : options_(options),
      clock_(clock),
      published_(std::make_unique<Published[]>(options_.max_workers)) {
  workers_.reserve(options_.max_workers);
  for (uint32_t i = 0; i < options_.max_workers; ++i) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->pub = &published_[i];
  }
}

ActiveLoad::~ActiveLoad() = default;

ActiveLoad::Worker& ActiveLoad::worker(WorkerId id) const {
  INFERA_CHECK(id < options_.max_workers);
  return *workers_[id];
}

LoadTicket ActiveLoad::add(WorkerId id, std::span<const uint64_t> seq_hashes,
                           uint32_t uncached_blocks) {
  Worker& w = worker(id);
  const Nanos now = clock_.now();
  const uint64_t serial = next_serial_.fetch_add(1, std::memory_order_relaxed);
  KvRequest request{std::vector<uint64_t>(seq_hashes.begin(), seq_hashes.end()), now};
  request.uncached =
      uncached_blocks == UINT32_MAX ? static_cast<uint32_t>(seq_hashes.size()) : uncached_blocks;
  std::lock_guard lock(w.mu);
  w.expire_before(now - options_.max_age);
  for (const uint64_t h : request.hashes) ++*w.refs.try_emplace(h, 0).first;
  w.enter(request);
  w.live.emplace(serial, std::move(request));
  w.order.emplace_back(now, serial);
  w.publish();
  return LoadTicket{id, serial};
}

bool ActiveLoad::prefill_done(LoadTicket ticket) {
  if (!ticket) return false;
  Worker& w = worker(ticket.worker);
  std::lock_guard lock(w.mu);
  auto it = w.live.find(ticket.serial);
  if (it == w.live.end() || !it->second.prefill) return false;
  w.leave(it->second);
  it->second.prefill = false;
  w.enter(it->second);
  w.publish();
  return true;
}

bool ActiveLoad::release(LoadTicket ticket) {
  if (!ticket) return false;
  Worker& w = worker(ticket.worker);
  std::lock_guard lock(w.mu);
  auto it = w.live.find(ticket.serial);
  if (it == w.live.end()) return false;
  w.drop(it->second);
  w.live.erase(it);
  w.publish();
  return true;
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
  w.prefill_blocks = w.prefill_requests = w.decode_blocks = w.decode_requests = 0;
  w.publish();
}

uint32_t ActiveLoad::active_blocks(WorkerId id) const {
  INFERA_CHECK(id < options_.max_workers);
  return published_[id].blocks.load(std::memory_order_relaxed);
}

uint32_t ActiveLoad::active_requests(WorkerId id) const {
  INFERA_CHECK(id < options_.max_workers);
  return published_[id].requests.load(std::memory_order_relaxed);
}

WorkerLoad ActiveLoad::load(WorkerId id) const {
  INFERA_CHECK(id < options_.max_workers);
  const Published& p = published_[id];
  WorkerLoad l;
  l.active_blocks = p.blocks.load(std::memory_order_relaxed);
  l.active_requests = p.requests.load(std::memory_order_relaxed);
  l.prefill_blocks = p.prefill_blocks.load(std::memory_order_relaxed);
  l.prefill_requests = p.prefill_requests.load(std::memory_order_relaxed);
  l.decode_blocks = p.decode_blocks.load(std::memory_order_relaxed);
  l.decode_requests = p.decode_requests.load(std::memory_order_relaxed);
  return l;
}

uint32_t ActiveLoad::new_blocks(WorkerId id, std::span<const uint64_t> seq_hashes) const {
  Worker& w = worker(id);
  std::lock_guard lock(w.mu);
  uint32_t fresh = 0;
  for (const uint64_t h : seq_hashes) fresh += w.refs.contains(h) ? 0u : 1u;
  return fresh;
}

}  // namespace infera::kv
