#include "infera/kv/active_load.h"

#include <algorithm>
#include <compare>
#include <deque>
#include <mutex>
#include <set>
#include <unordered_map>

#include "infera/common/check.h"
#include "infera/common/spin_mutex.h"

namespace infera::kv {

struct KvRequest;

// Orders requests by their block sequences, lexicographically (ties by serial). Router block
// hashes are chained, so a block stands for its whole prefix: two requests share exactly their
// longest common prefix, and of all live requests the one sharing the most with a request is
// one of its two neighbours in this order.
struct BySequence {
  using is_transparent = void;
  bool operator()(const KvRequest* a, const KvRequest* b) const;
  bool operator()(const KvRequest* a, std::span<const uint64_t> b) const;
  bool operator()(std::span<const uint64_t> a, const KvRequest* b) const;
};
using Sorted = std::set<const KvRequest*, BySequence>;

struct KvRequest {
  std::vector<uint64_t> hashes;
  Nanos added{0};
  uint64_t serial = 0;
  uint32_t uncached = 0;  // blocks its prefill computes
  bool prefill = true;    // first token not back yet
  Sorted::iterator at;    // its place in Worker::sorted
};

bool BySequence::operator()(const KvRequest* a, const KvRequest* b) const {
  const auto order = std::lexicographical_compare_three_way(a->hashes.begin(), a->hashes.end(),
                                                            b->hashes.begin(), b->hashes.end());
  return order != 0 ? order < 0 : a->serial < b->serial;
}
// A probe sequence sorts before every request with the same blocks (serials start at 1).
bool BySequence::operator()(const KvRequest* a, std::span<const uint64_t> b) const {
  return std::lexicographical_compare(a->hashes.begin(), a->hashes.end(), b.begin(), b.end());
}
bool BySequence::operator()(std::span<const uint64_t> a, const KvRequest* b) const {
  return !std::lexicographical_compare(b->hashes.begin(), b->hashes.end(), a.begin(), a.end());
}

// Leading blocks two sequences share.
uint32_t common_prefix(std::span<const uint64_t> a, std::span<const uint64_t> b) {
  const size_t n = std::min(a.size(), b.size());
  return static_cast<uint32_t>(
      std::mismatch(a.begin(), a.begin() + static_cast<ptrdiff_t>(n), b.begin()).first - a.begin());
}

// The most leading blocks `blocks` shares with a request of `sorted` other than the one at
// `self` (end(): none is excluded), given `at`, where `blocks` sorts: the neighbours of `at`.
uint32_t shared_with_neighbours(const Sorted& sorted, Sorted::const_iterator at,
                                Sorted::const_iterator self, std::span<const uint64_t> blocks) {
  uint32_t shared = 0;
  auto after = at;
  if (after != sorted.end() && after == self) ++after;
  if (after != sorted.end()) shared = common_prefix(blocks, (*after)->hashes);
  auto before = at;
  if (before != sorted.begin()) {
    --before;
    if (before == self && before != sorted.begin()) --before;
    if (before != self) shared = std::max(shared, common_prefix(blocks, (*before)->hashes));
  }
  return shared;
}

struct ActiveLoad::Worker {
  mutable SpinMutex mu;
  std::unordered_map<uint64_t, KvRequest> live;  // serial -> request
  // The live requests by block sequence, and the distinct blocks they hold: each request adds
  // its blocks beyond the longest prefix it shares with another (an O(log requests) walk, where
  // a table of every block's holders cost a hash insert and erase per block).
  Sorted sorted;
  uint32_t distinct = 0;
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
  void insert(KvRequest& request) {
    request.at = sorted.insert(&request).first;
    const uint32_t shared =
        shared_with_neighbours(sorted, std::next(request.at), request.at, request.hashes);
    distinct += static_cast<uint32_t>(request.hashes.size()) - shared;
  }
  void drop(const KvRequest& request) {
    const uint32_t shared =
        shared_with_neighbours(sorted, std::next(request.at), request.at, request.hashes);
    distinct -= static_cast<uint32_t>(request.hashes.size()) - shared;
    sorted.erase(request.at);
    leave(request);
  }
  void publish() {
    pub->blocks.store(distinct, std::memory_order_relaxed);
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
  KvRequest request{std::vector<uint64_t>(seq_hashes.begin(), seq_hashes.end()), now, serial};
  request.uncached =
      uncached_blocks == UINT32_MAX ? static_cast<uint32_t>(seq_hashes.size()) : uncached_blocks;
  std::lock_guard lock(w.mu);
  w.expire_before(now - options_.max_age);
  KvRequest& live = w.live.emplace(serial, std::move(request)).first->second;
  w.insert(live);
  w.enter(live);
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
  w.sorted.clear();
  w.distinct = 0;
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

uint32_t ActiveLoad::new_blocks(WorkerId id, std::span<const uint64_t> seq_hashes) const {
  Worker& w = worker(id);
  std::lock_guard lock(w.mu);
  const auto at = w.sorted.lower_bound(seq_hashes);
  return static_cast<uint32_t>(seq_hashes.size()) -
         shared_with_neighbours(w.sorted, at, w.sorted.end(), seq_hashes);
}

}  // namespace infera::kv
