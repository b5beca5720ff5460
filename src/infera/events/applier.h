// EventApplier: the narrow bridge from decoded KV events of one worker to the KV index
// (kv/index.h). It maps medium strings to tiers, keeps non-full-attention KV-cache groups out of
// the prefix mirror, and tallies what the index accepted or rejected. Tokenless lower-tier
// stores (CPU offload) go to the index as they are; it attaches them to known blocks or keeps
// residency only. One applier per worker, used by one thread at a time (the worker's event
// thread); the index it writes to is shared and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "infera/events/event.h"
#include "infera/kv/index.h"

namespace infera::events {

// "GPU" or none -> GPU; "CPU", "CPU_TIER1" -> CPU; anything else ("CPU_TIER2", "DISK", "SSD",
// "STORAGE", ...) -> a disk-like lower tier, never GPU (docs/contracts.md section 5). ASCII case is
// ignored.
kv::Medium medium_of(const std::optional<std::string>& medium);

// Whether a kv_cache_spec_kind describes full attention (none: older vLLM, one full group).
bool is_full_attention(const std::optional<std::string>& kind);

// What applying some events did, added up.
struct ApplyTally {
  uint64_t events_applied = 0;  // events the index accepted (AllBlocksCleared included)
  uint64_t blocks_stored = 0;   // blocks of accepted BlockStored events
  uint64_t blocks_removed = 0;  // blocks named by accepted BlockRemoved events
  uint64_t clears = 0;          // AllBlocksCleared applied
  std::array<uint64_t, kv::kNumApplyResults> rejected{};  // by kv::ApplyResult (never kApplied)
  uint64_t other_group_events = 0;  // sliding-window, mamba or non-main groups: not mirrored

  void add(const ApplyTally& o);
  uint64_t rejected_total() const;
};

class EventApplier {
 public:
  struct Options {
    // The KV-cache group whose blocks answer prefix queries. Unset: the first full-attention
    // group that stores blocks (hybrid models emit one BlockStored per group with the same
    // hashes; only one group may feed the mirror, or a sliding-window eviction would remove
    // blocks the full-attention group still holds).
    std::optional<int64_t> main_group;
  };

  EventApplier(kv::KvIndex& index, kv::WorkerId worker) : EventApplier(index, worker, Options{}) {}
  EventApplier(kv::KvIndex& index, kv::WorkerId worker, Options options);

  kv::WorkerId worker() const { return worker_; }

  // Applies the batch's events in order.
  void apply(const EventBatch& batch, ApplyTally& tally);
  void apply(const Event& event, ApplyTally& tally);

  // Forgets the learned main group (the engine restarted; its groups may differ).
  void reset();
  // The main group in force: configured, learned from the events, or none yet. A stream seeded
  // from a sibling's copy takes the group the sibling learned (set_main_group), so a
  // sliding-window removal that comes before the next full-attention store is still ignored.
  std::optional<int64_t> main_group() const { return main_group_; }
  void set_main_group(std::optional<int64_t> group) {
    if (!options_.main_group) main_group_ = group;
  }

 private:
  // Whether an event of `group` (none: the engine does not send groups) feeds the mirror.
  bool in_main_group(const std::optional<int64_t>& group) const;

  kv::KvIndex& index_;
  kv::WorkerId worker_;
  Options options_;
  std::optional<int64_t> main_group_;
};

}  // namespace infera::events
