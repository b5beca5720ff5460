#include "infera/routing/approx_prefix.h"

#include <algorithm>
#include <vector>

#include "infera/routing/selection.h"

namespace infera::routing {

size_t ApproxPrefixPolicy::choose(const ScoreRequest& request, std::span<Candidate> candidates,
                                  Rng& rng) {
  uint32_t min_load = UINT32_MAX;
  uint32_t max_load = 0;
  for (const Candidate& c : candidates) {
    min_load = std::min(min_load, c.active_requests);
    max_load = std::max(max_load, c.active_requests);
  }
  auto least_loaded = [&] {
    std::vector<double> load(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) load[i] = candidates[i].active_requests;
    return pick_lowest(load, 0.0, rng);
  };

  // Matched blocks per candidate from the router-side history (chained hashes: a prefix).
  uint64_t best_tick = 0;
  size_t best = 0;
  uint32_t best_match = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    auto it = history_.find(c.worker);
    uint32_t matched = 0;
    uint64_t tick = 0;
    if (it != history_.end()) {
      for (const uint64_t h : request.seq_hashes) {
        const uint64_t* used = it->second.last_use.find(h);
        if (!used) break;
        tick = *used;
        ++matched;
      }
    }
    c.cache_hits = matched;  // the policy's own belief, shown in the explain table
    c.cost = -static_cast<double>(matched);
    if (matched > best_match || (matched == best_match && matched > 0 && tick > best_tick)) {
      best = i;
      best_match = matched;
      best_tick = tick;
    }
  }

  const bool imbalanced =
      max_load - min_load > options_.balance_abs_threshold &&
      static_cast<double>(max_load) > options_.balance_rel_threshold * static_cast<double>(min_load);
  size_t chosen;
  const double rate = request.request_blocks == 0
                          ? 0.0
                          : static_cast<double>(best_match) / request.request_blocks;
  if (imbalanced || rate <= options_.cache_threshold) {
    chosen = least_loaded();
  } else {
    chosen = best;
  }
  remember(candidates[chosen].worker, request.seq_hashes);
  return chosen;
}

void ApproxPrefixPolicy::remember(kv::WorkerId worker, std::span<const uint64_t> hashes) {
  History& h = history_[worker];
  ++tick_;
  for (const uint64_t x : hashes) *h.last_use.try_emplace(x, 0).first = tick_;
  if (h.last_use.size() <= options_.max_blocks_per_worker) return;
  // Evict the least recently used blocks down to 90 % of the bound (SGLang evicts oldest leaves
  // of its tree in the background; block granularity keeps the same order).
  std::vector<std::pair<uint64_t, uint64_t>> by_age;
  by_age.reserve(h.last_use.size());
  h.last_use.for_each([&](uint64_t key, uint64_t tick) { by_age.emplace_back(tick, key); });
  const size_t drop = by_age.size() - options_.max_blocks_per_worker * 9 / 10;
  std::nth_element(by_age.begin(), by_age.begin() + static_cast<std::ptrdiff_t>(drop), by_age.end());
  for (size_t i = 0; i < drop; ++i) h.last_use.erase(by_age[i].second);
}

}  // namespace infera::routing
