// KvIndex: the router's mirror of every worker's KV cache, built from decoded KV events.
//
// Keys are the router's own chained block hashes (block_hash.h), recomputed from the token ids
// each BlockStored carries; the engine's block hashes are opaque per-worker ids kept only to
// resolve parents and removals. A hash stored twice is reference-counted and needs two removes.
// GPU blocks answer prefix queries; lower tiers (CPU, disk) are tracked apart and reported.
// Bad events are rejected whole, counted per reason, never applied half-way.
//
// Concurrency: workers are split into groups of 64 (worker id / 64); each group has its own
// writer-preferring RwLock. Event threads hold a group's lock exclusively while applying one
// event (microseconds); a query takes every group's lock shared, in order, and drops each once
// it has scanned that group (so its cache misses overlap; a writer holds one lock at a time,
// so this cannot deadlock). A query over several groups sees each group at one instant, not
// all groups at the same instant, which is harmless because events are asynchronous anyway.
// The lock spins briefly before sleeping (rw_lock.h), since both sides hold it for microseconds.
// Every public method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "infera/kv/block_hash.h"
#include "infera/kv/predicted_blocks.h"

namespace infera::kv {

// WorkerId (predicted_blocks.h): a dense worker slot, assigned by the owner of the worker set
// (gateway, simulator, tests).

// Where a cached block lives. Unknown lower tiers map to kDisk, never to kGpu.
enum class Medium : uint8_t { kGpu = 0, kCpu = 1, kDisk = 2 };
inline constexpr size_t kNumMedia = 3;
std::string_view medium_name(Medium medium);

// A run of blocks newly cached by one worker (vLLM BlockStored). Spans are borrowed for the call.
struct StoredEvent {
  WorkerId worker = 0;
  std::optional<uint64_t> parent_engine_hash;  // none: the first block is block 0 of a request
  std::span<const uint64_t> engine_hashes;     // one per block, opaque
  std::span<const TokenId> token_ids;          // block_size per block; empty for tokenless tiers
  uint32_t block_size = 0;
  Medium medium = Medium::kGpu;
  std::string_view lora_name;  // empty: no adapter
};

// Blocks evicted by one worker (vLLM BlockRemoved).
struct RemovedEvent {
  WorkerId worker = 0;
  std::span<const uint64_t> engine_hashes;
  Medium medium = Medium::kGpu;
};

enum class ApplyResult : uint8_t {
  kApplied = 0,
  kUnknownWorker,      // the worker was never added or has been removed
  kUnknownParent,      // the parent block is not in the mirror: a resync signal
  kBlockSizeMismatch,  // the event's block size differs from the router's
  kPartialBlock,       // token count is not a multiple of the block size
  kMalformed,          // hashes and tokens disagree, no hashes, ...
};
inline constexpr size_t kNumApplyResults = 6;
std::string_view apply_result_name(ApplyResult result);

// Everything the index keeps for one worker, as plain records: what a booting router replica
// copies from a sibling (replica/snapshot.h). Records are in no particular order. Extra names
// of one router hash (aliases) are not stored: they follow from two GPU records with different
// engine hashes and the same router hash.
struct WorkerDump {
  struct GpuEntry {
    uint64_t engine = 0;
    uint64_t router = 0;
    uint32_t copies = 1;  // 1 + the extra stores of this engine hash, each needing a remove
  };
  struct LowerEntry {
    uint64_t engine = 0;
    uint64_t router = 0;  // meaningful only when `known`
    uint32_t refs = 1;    // stores of this engine hash not yet removed
    bool known = false;   // false: residency only (a tokenless store of a hash not on GPU)
  };
  std::vector<GpuEntry> gpu;
  std::array<std::vector<LowerEntry>, kNumMedia - 1> lower;  // [0] CPU, [1] disk (Medium - 1)

  // Records of every tier.
  size_t size() const { return gpu.size() + lower[0].size() + lower[1].size(); }
};

struct IndexCounters {
  std::array<uint64_t, kNumApplyResults> events{};  // by ApplyResult
  uint64_t blocks_stored = 0;
  uint64_t blocks_removed = 0;
  uint64_t removals_unknown = 0;  // BlockRemoved of a hash the mirror does not hold
};

class KvIndex {
 public:
  struct Options {
    uint32_t block_size = 16;    // tokens per block; events with another size are rejected
    uint32_t max_workers = 1024;  // worker ids must be below this
    // Predicted-on-route entries to erase as GPU BlockStored events confirm them (optional;
    // must outlive the index).
    PredictedBlocks* predicted = nullptr;
  };

  explicit KvIndex(Options options);
  ~KvIndex();
  KvIndex(const KvIndex&) = delete;
  KvIndex& operator=(const KvIndex&) = delete;

  uint32_t block_size() const { return options_.block_size; }
  uint32_t max_workers() const { return options_.max_workers; }

  // Starts mirroring a worker (idempotent). Events for workers not added are rejected.
  void add_worker(WorkerId worker);
  // Forgets a worker and everything it cached (and its predicted entries).
  void remove_worker(WorkerId worker);
  // AllBlocksCleared: drops the worker's GPU blocks; lower tiers stay (as in vLLM).
  void clear_worker(WorkerId worker);
  // Drops every tier of the worker's mirror (engine restart) and its predicted entries,
  // keeping the worker.
  void reset_worker(WorkerId worker);
  // The worker's whole mirror (every tier), taken under its group's shared lock; empty when
  // the worker was not added. Queries go on meanwhile; events of that group wait.
  WorkerDump export_worker(WorkerId worker) const;
  // Replaces the worker's whole mirror (every tier) with `dump`, leaving holders, duplicates
  // and aliases exactly as the events that built it would have, and drops the worker's
  // predicted entries (as reset_worker does). The tables are built before the group's
  // exclusive lock is taken; under it, the old GPU residency is dropped and the new one
  // published. Counters and the stale flag are unchanged. An engine hash listed twice in one
  // tier adds up its copies (refs); counts of 0 count as 1. False (nothing changes) when the
  // worker was not added.
  bool import_worker(WorkerId worker, const WorkerDump& dump);
  // A stale mirror is not trusted: the worker's hits count as 0 until it is marked fresh.
  void set_stale(WorkerId worker, bool stale);
  bool is_stale(WorkerId worker) const;

  ApplyResult apply(const StoredEvent& event);
  ApplyResult apply(const RemovedEvent& event);

  // For each worker id below worker_bound(), the number of leading blocks of `seq_hashes` it
  // holds on GPU, consecutive from block 0 (a hole ends the match). `gpu_hits` is resized.
  // `lower_hits`, when given, receives per worker the blocks right after that GPU run which it
  // holds on a lower tier (the tier-aware cost credits them); `disk_hits`, when given too, how
  // many of those it holds only on disk (not on CPU).
  void find_overlaps(std::span<const uint64_t> seq_hashes, std::vector<uint32_t>& gpu_hits,
                     std::vector<uint32_t>* lower_hits = nullptr,
                     std::vector<uint32_t>* disk_hits = nullptr) const;

  // One past the highest worker id ever added: the size of find_overlaps' output.
  uint32_t worker_bound() const { return worker_bound_.load(std::memory_order_acquire); }

  // Distinct engine blocks the worker holds on `medium` (the admin cache view).
  uint64_t block_count(WorkerId worker, Medium medium = Medium::kGpu) const;
  // Heap bytes held by the index's tables.
  size_t memory_bytes() const;
  IndexCounters counters() const;

 private:
  struct Group;

  Group& group_of(WorkerId worker) const;
  void count(ApplyResult result) const;

  Options options_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::atomic<uint32_t> worker_bound_{0};

  mutable std::array<std::atomic<uint64_t>, kNumApplyResults> event_counts_{};
  mutable std::atomic<uint64_t> blocks_stored_{0};
  mutable std::atomic<uint64_t> blocks_removed_{0};
  mutable std::atomic<uint64_t> removals_unknown_{0};
};

}  // namespace infera::kv
