#include "infera/kv/index.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <utility>

#include "infera/common/bits.h"
#include "infera/common/check.h"
#include "infera/common/flat_map.h"
#include "infera/common/group_map.h"
#include "infera/common/rw_lock.h"

namespace infera::kv {
namespace {

constexpr uint32_t kGroupSize = 64;
// How many levels ahead a query's walk asks for the holder slots of the groups still walking:
// far enough that a level's misses have arrived by the time it is walked (docs/benchmarks.md).
constexpr size_t kWalkAhead = 4;

// A lower-tier (CPU, disk) copy of a block. Tokenless offload events name only engine hashes;
// when the hash is one the worker holds on GPU we learn its router hash, otherwise the block is
// kept as residency only (counted, never matched).
struct LowerEntry {
  uint64_t router = 0;
  uint32_t refs = 0;
  bool known = false;
};

struct LowerTier {
  FlatU64Map<LowerEntry> by_engine;
  FlatU64Map<uint32_t> by_router;  // router hash -> number of engine entries naming it

  size_t memory_bytes() const { return by_engine.memory_bytes() + by_router.memory_bytes(); }
};

struct WorkerState {
  // GPU: engine hash -> router hash. Exactly one entry per distinct engine hash. Every cached
  // block costs one insert and one erase here, so this is the walk-free Swiss table; the
  // group's holders table, which queries read far more than events write, stays Robin Hood
  // (docs/benchmarks.md).
  GroupU64Map<uint64_t> gpu;
  // Extra copies of an engine hash stored more than once (vLLM does not deduplicate). Rare.
  FlatU64Map<uint32_t> gpu_dups;
  // Router hashes named by more than one engine hash on this worker (e.g. a cache salt changes
  // the engine hash but not the tokens), counting the extra names. Rare.
  FlatU64Map<uint32_t> gpu_aliases;
  std::array<LowerTier, kNumMedia - 1> lower;  // kCpu, kDisk

  void clear_all() {
    gpu.clear();
    gpu_dups.clear();
    gpu_aliases.clear();
    for (LowerTier& tier : lower) {
      tier.by_engine.clear();
      tier.by_router.clear();
    }
  }
  bool has_lower() const {
    for (const LowerTier& tier : lower) {
      if (!tier.by_router.empty()) return true;
    }
    return false;
  }
  size_t memory_bytes() const {
    size_t bytes = gpu.memory_bytes() + gpu_dups.memory_bytes() + gpu_aliases.memory_bytes();
    for (const LowerTier& tier : lower) bytes += tier.memory_bytes();
    return bytes;
  }
};

uint64_t bit_of(WorkerId worker) { return uint64_t{1} << (worker % kGroupSize); }

// The lower tier of `medium` (kCpu, kDisk).
LowerTier& tier_of(WorkerState& w, Medium medium) {
  return w.lower[static_cast<size_t>(medium) - 1];
}
const LowerTier& tier_of(const WorkerState& w, Medium medium) {
  return w.lower[static_cast<size_t>(medium) - 1];
}

// Where a stored run's hash chain starts: after the parent's router hash, or at block 0.
struct ChainStart {
  bool has_parent = false;
  uint64_t prev = 0;
};

// Validation of a BlockStored that needs no state, so that it runs before any lock.
ApplyResult check_stored(const StoredEvent& event, uint32_t block_size) {
  const size_t num_blocks = event.engine_hashes.size();
  const bool tokenless = event.token_ids.empty();
  if (num_blocks == 0 || (tokenless && event.medium == Medium::kGpu)) {
    // Only lower tiers may announce blocks without tokens (CPU offload); they are residency.
    return ApplyResult::kMalformed;
  }
  if (!tokenless) {
    if (event.block_size != block_size) return ApplyResult::kBlockSizeMismatch;
    if (event.token_ids.size() % block_size != 0) return ApplyResult::kPartialBlock;
    if (event.token_ids.size() / block_size != num_blocks) return ApplyResult::kMalformed;
  }
  return ApplyResult::kApplied;
}

// A tokenless lower-tier store: residency, with the router hash when the worker holds the
// engine hash on GPU.
void store_tokenless(WorkerState& w, const StoredEvent& event) {
  LowerTier& tier = tier_of(w, event.medium);
  for (const uint64_t engine : event.engine_hashes) {
    auto [entry, inserted] = tier.by_engine.try_emplace(engine);
    if (!inserted) {
      ++entry->refs;
      continue;
    }
    entry->refs = 1;
    if (const uint64_t* router = w.gpu.find(engine)) {
      entry->router = *router;
      entry->known = true;
      ++*tier.by_router.try_emplace(*router, 0).first;
    }
  }
}

// The parent's router hash: on GPU first, then on the event's own tier. None when the event
// names a parent the mirror does not hold.
std::optional<ChainStart> resolve_parent(const WorkerState& w, const StoredEvent& event) {
  if (!event.parent_engine_hash) return ChainStart{};
  const uint64_t parent = *event.parent_engine_hash;
  if (const uint64_t* router = w.gpu.find(parent)) return ChainStart{true, *router};
  if (event.medium != Medium::kGpu) {
    const LowerEntry* entry = tier_of(w, event.medium).by_engine.find(parent);
    if (entry && entry->known) return ChainStart{true, entry->router};
  }
  return std::nullopt;
}

// A lower-tier store with tokens: `local` holds the blocks' local hashes.
void store_lower(LowerTier& tier, std::span<const uint64_t> engine_hashes, const uint64_t* local,
                 ChainStart chain, uint64_t seed) {
  for (size_t i = 0; i < engine_hashes.size(); ++i) {
    const uint64_t router =
        chain.has_parent ? chain_block_hash(chain.prev, local[i], seed) : local[i];
    chain = ChainStart{true, router};
    auto [entry, inserted] = tier.by_engine.try_emplace(engine_hashes[i]);
    if (!inserted) {
      ++entry->refs;
      continue;
    }
    *entry = LowerEntry{router, 1, true};
    ++*tier.by_router.try_emplace(router, 0).first;
  }
}

// A count from a dump plus more of it, saturating: a dump may come from untrusted bytes.
uint32_t add_count(uint32_t a, uint32_t b) {
  return a > UINT32_MAX - b ? UINT32_MAX : a + b;
}

// An imported worker's GPU tables, all but its aliases, which need the group's holders (and lock).
void build_gpu(WorkerState& w, std::span<const WorkerDump::GpuEntry> entries) {
  for (const WorkerDump::GpuEntry& e : entries) {
    const uint32_t copies = std::max<uint32_t>(e.copies, 1);
    const bool inserted = w.gpu.try_emplace(e.engine, e.router).second;
    // Removes still owed beyond the first: the record's extra copies, or all of them when the
    // engine hash was listed already (its first router hash stays).
    const uint32_t extra = inserted ? copies - 1 : copies;
    if (extra == 0) continue;
    uint32_t& dups = *w.gpu_dups.try_emplace(e.engine, 0).first;
    dups = add_count(dups, extra);
  }
}

// An imported worker's lower tier, as the stores that built it would have left it.
void build_lower(LowerTier& tier, std::span<const WorkerDump::LowerEntry> entries) {
  tier.by_engine.reserve(entries.size());
  for (const WorkerDump::LowerEntry& e : entries) {
    const uint32_t refs = std::max<uint32_t>(e.refs, 1);
    auto [entry, inserted] = tier.by_engine.try_emplace(e.engine);
    if (!inserted) {
      entry->refs = add_count(entry->refs, refs);
      continue;
    }
    *entry = LowerEntry{e.known ? e.router : 0, refs, e.known};
    if (e.known) ++*tier.by_router.try_emplace(e.router, 0).first;
  }
}

}  // namespace

struct KvIndex::Group {
  mutable RwLock lock;
  uint64_t present = 0;  // workers added
  uint64_t stale = 0;    // workers whose hits are not trusted
  uint64_t lower = 0;    // workers holding anything on a lower tier (queries skip the others)
  // Router hash -> bitmask of workers in this group holding it on GPU.
  FlatU64Map<uint64_t> holders;
  std::array<WorkerState, kGroupSize> workers;

  // Records whether the worker in `slot` holds anything on a lower tier, after a change there.
  void note_lower(uint32_t slot) {
    const uint64_t bit = uint64_t{1} << slot;
    lower = workers[slot].has_lower() ? lower | bit : lower & ~bit;
  }

  // Removes `worker`'s GPU residency of `router` unless another engine hash still names it.
  void drop_gpu_name(WorkerState& w, uint64_t router, uint64_t bit) {
    if (uint32_t* alias = w.gpu_aliases.find(router)) {
      if (--*alias == 0) w.gpu_aliases.erase(router);
      return;
    }
    uint64_t* bits = holders.find(router);
    if (!bits) return;
    *bits &= ~bit;
    if (*bits == 0) holders.erase_found(bits);
  }

  // A GPU store: chains `local` (the blocks' local hashes) into router hashes in place and
  // records each block.
  void store_gpu(WorkerState& w, uint64_t bit, std::span<const uint64_t> engine_hashes,
                 uint64_t* local, ChainStart chain, uint64_t seed) {
    const size_t num_blocks = engine_hashes.size();
    // The tables are far larger than the caches at fleet scale and a miss costs 100-250 ns,
    // so the lines the inserts start on are asked for before any insert runs and the misses
    // of the whole event overlap. Chaining the router hashes fills the wait for the first.
    for (const uint64_t engine : engine_hashes) w.gpu.prefetch_for_write(engine);
    for (size_t i = 0; i < num_blocks; ++i) {
      local[i] = chain.has_parent ? chain_block_hash(chain.prev, local[i], seed) : local[i];
      chain = ChainStart{true, local[i]};
      holders.prefetch_for_write(local[i]);
    }
    for (size_t i = 0; i < num_blocks; ++i) {
      const uint64_t router = local[i];
      const uint64_t engine = engine_hashes[i];
      auto [mapped, inserted] = w.gpu.try_emplace(engine, router);
      if (!inserted) {
        // The same engine block stored again: one more copy to remove before it is gone.
        ++*w.gpu_dups.try_emplace(engine, 0).first;
        continue;
      }
      uint64_t& bits = *holders.try_emplace(router, 0).first;
      if (bits & bit) {
        ++*w.gpu_aliases.try_emplace(router, 0).first;
      } else {
        bits |= bit;
      }
    }
  }

  void clear_gpu(WorkerState& w, uint64_t bit) {
    w.gpu.for_each([&](uint64_t, uint64_t router) {
      uint64_t* bits = holders.find(router);
      if (bits) *bits &= ~bit;
    });
    // Erase emptied entries in a second pass: for_each must not mutate the table it walks.
    w.gpu.for_each([&](uint64_t, uint64_t router) {
      const uint64_t* bits = holders.find(router);
      if (bits && *bits == 0) holders.erase(router);
    });
    w.gpu.clear();
    w.gpu_dups.clear();
    w.gpu_aliases.clear();
  }
};

std::string_view medium_name(Medium medium) {
  switch (medium) {
    case Medium::kGpu: return "GPU";
    case Medium::kCpu: return "CPU";
    case Medium::kDisk: return "DISK";
  }
  return "?";
}

std::string_view apply_result_name(ApplyResult result) {
  switch (result) {
    case ApplyResult::kApplied: return "applied";
    case ApplyResult::kUnknownWorker: return "unknown_worker";
    case ApplyResult::kUnknownParent: return "unknown_parent";
    case ApplyResult::kBlockSizeMismatch: return "block_size_mismatch";
    case ApplyResult::kPartialBlock: return "partial_block";
    case ApplyResult::kMalformed: return "malformed";
  }
  return "?";
}

KvIndex::KvIndex(Options options) : options_(options) {
  INFERA_CHECK(options_.block_size > 0);
  INFERA_CHECK(options_.max_workers > 0);
  const uint32_t groups = (options_.max_workers + kGroupSize - 1) / kGroupSize;
  groups_.reserve(groups);
  for (uint32_t i = 0; i < groups; ++i) groups_.push_back(std::make_unique<Group>());
}

KvIndex::~KvIndex() = default;

KvIndex::Group& KvIndex::group_of(WorkerId worker) const {
  INFERA_CHECK(worker < options_.max_workers);
  return *groups_[worker / kGroupSize];
}

void KvIndex::count(ApplyResult result) const {
  event_counts_[static_cast<size_t>(result)].fetch_add(1, std::memory_order_relaxed);
}

void KvIndex::add_worker(WorkerId worker) {
  Group& g = group_of(worker);
  {
    std::unique_lock lock(g.lock);
    g.present |= bit_of(worker);
  }
  uint32_t bound = worker_bound_.load(std::memory_order_relaxed);
  while (bound <= worker && !worker_bound_.compare_exchange_weak(bound, worker + 1)) {
  }
}

void KvIndex::remove_worker(WorkerId worker) {
  Group& g = group_of(worker);
  std::unique_lock lock(g.lock);
  const uint64_t bit = bit_of(worker);
  WorkerState& w = g.workers[worker % kGroupSize];
  g.clear_gpu(w, bit);
  w.clear_all();
  g.lower &= ~bit;
  g.present &= ~bit;
  g.stale &= ~bit;
  lock.unlock();
  if (options_.predicted) options_.predicted->clear_worker(worker);
}

void KvIndex::clear_worker(WorkerId worker) {
  Group& g = group_of(worker);
  std::unique_lock lock(g.lock);
  g.clear_gpu(g.workers[worker % kGroupSize], bit_of(worker));
}

void KvIndex::reset_worker(WorkerId worker) {
  Group& g = group_of(worker);
  std::unique_lock lock(g.lock);
  WorkerState& w = g.workers[worker % kGroupSize];
  g.clear_gpu(w, bit_of(worker));
  w.clear_all();
  g.lower &= ~bit_of(worker);
  lock.unlock();
  if (options_.predicted) options_.predicted->clear_worker(worker);
}

WorkerDump KvIndex::export_worker(WorkerId worker) const {
  WorkerDump dump;
  if (worker >= options_.max_workers) return dump;
  const Group& g = group_of(worker);
  std::shared_lock lock(g.lock);
  if ((g.present & bit_of(worker)) == 0) return dump;
  const WorkerState& w = g.workers[worker % kGroupSize];
  dump.gpu.reserve(w.gpu.size());
  const bool has_dups = !w.gpu_dups.empty();  // rare: skip the lookups when there are none
  w.gpu.for_each([&](uint64_t engine, uint64_t router) {
    const uint32_t* dups = has_dups ? w.gpu_dups.find(engine) : nullptr;
    dump.gpu.push_back({engine, router, dups ? add_count(*dups, 1) : 1});
  });
  for (size_t t = 0; t < w.lower.size(); ++t) {
    std::vector<WorkerDump::LowerEntry>& out = dump.lower[t];
    out.reserve(w.lower[t].by_engine.size());
    w.lower[t].by_engine.for_each([&](uint64_t engine, const LowerEntry& e) {
      out.push_back({engine, e.router, e.refs, e.known});
    });
  }
  return dump;
}

bool KvIndex::import_worker(WorkerId worker, const WorkerDump& dump) {
  if (worker >= options_.max_workers) return false;
  WorkerState fresh;
  build_gpu(fresh, dump.gpu);
  for (size_t t = 0; t < fresh.lower.size(); ++t) build_lower(fresh.lower[t], dump.lower[t]);

  Group& g = group_of(worker);
  const uint64_t bit = bit_of(worker);
  std::unique_lock lock(g.lock);
  if ((g.present & bit) == 0) return false;
  WorkerState& w = g.workers[worker % kGroupSize];
  g.clear_gpu(w, bit);
  std::swap(w, fresh);  // the old lower tiers are freed after the lock, with `fresh`
  g.note_lower(worker % kGroupSize);
  // As store_gpu does: the first name of a router hash sets the worker's bit (clear_gpu left
  // none set), later names are aliases.
  w.gpu.for_each([&](uint64_t, uint64_t router) {
    uint64_t& bits = *g.holders.try_emplace(router, 0).first;
    if (bits & bit) {
      ++*w.gpu_aliases.try_emplace(router, 0).first;
    } else {
      bits |= bit;
    }
  });
  lock.unlock();
  if (options_.predicted) options_.predicted->clear_worker(worker);
  return true;
}

void KvIndex::set_stale(WorkerId worker, bool stale) {
  Group& g = group_of(worker);
  std::unique_lock lock(g.lock);
  if (stale) {
    g.stale |= bit_of(worker);
  } else {
    g.stale &= ~bit_of(worker);
  }
}

bool KvIndex::is_stale(WorkerId worker) const {
  const Group& g = group_of(worker);
  std::shared_lock lock(g.lock);
  return (g.stale & bit_of(worker)) != 0;
}

ApplyResult KvIndex::apply(const StoredEvent& event) {
  if (event.worker >= options_.max_workers) {
    count(ApplyResult::kUnknownWorker);
    return ApplyResult::kUnknownWorker;
  }
  const ApplyResult verdict = check_stored(event, options_.block_size);
  if (verdict != ApplyResult::kApplied) {
    count(verdict);
    return verdict;
  }
  const size_t num_blocks = event.engine_hashes.size();
  const bool tokenless = event.token_ids.empty();

  // Local hashes depend only on the tokens: compute them outside the lock. A small buffer on
  // the stack covers typical events (vLLM stores one step's new blocks at a time).
  constexpr size_t kInline = 64;
  uint64_t inline_local[kInline];
  std::vector<uint64_t> heap_local;
  uint64_t* local = inline_local;
  const uint64_t seed = lora_seed(event.lora_name);
  if (!tokenless) {
    if (num_blocks > kInline) {
      heap_local.resize(num_blocks);
      local = heap_local.data();
    }
    for (size_t i = 0; i < num_blocks; ++i) {
      local[i] = local_block_hash(
          event.token_ids.subspan(i * options_.block_size, options_.block_size), seed);
    }
  }

  Group& g = group_of(event.worker);
  const uint64_t bit = bit_of(event.worker);
  std::unique_lock lock(g.lock);
  if ((g.present & bit) == 0) {
    count(ApplyResult::kUnknownWorker);
    return ApplyResult::kUnknownWorker;
  }
  WorkerState& w = g.workers[event.worker % kGroupSize];
  if (tokenless) {
    store_tokenless(w, event);
    g.note_lower(event.worker % kGroupSize);
  } else {
    const std::optional<ChainStart> chain = resolve_parent(w, event);
    if (!chain) {
      count(ApplyResult::kUnknownParent);
      return ApplyResult::kUnknownParent;
    }
    if (event.medium == Medium::kGpu) {
      g.store_gpu(w, bit, event.engine_hashes, local, *chain, seed);
      lock.unlock();
      // What was predicted on route is now confirmed (a no-op unless the worker has entries).
      if (options_.predicted) {
        options_.predicted->confirm(event.worker, std::span<const uint64_t>(local, num_blocks));
      }
    } else {
      store_lower(tier_of(w, event.medium), event.engine_hashes, local, *chain, seed);
      g.note_lower(event.worker % kGroupSize);
    }
  }
  blocks_stored_.fetch_add(num_blocks, std::memory_order_relaxed);
  count(ApplyResult::kApplied);
  return ApplyResult::kApplied;
}

ApplyResult KvIndex::apply(const RemovedEvent& event) {
  if (event.worker >= options_.max_workers) {
    count(ApplyResult::kUnknownWorker);
    return ApplyResult::kUnknownWorker;
  }
  Group& g = group_of(event.worker);
  const uint64_t bit = bit_of(event.worker);
  uint64_t removed = 0;
  uint64_t unknown = 0;
  {
    std::unique_lock lock(g.lock);
    if ((g.present & bit) == 0) {
      count(ApplyResult::kUnknownWorker);
      return ApplyResult::kUnknownWorker;
    }
    WorkerState& w = g.workers[event.worker % kGroupSize];
    if (event.medium == Medium::kGpu) {
      // Three passes so the cache misses of a batch overlap: ask for the engine slots; take
      // each engine hash out of its table and ask for its router hash's holder slot; then
      // drop the worker from those holders.
      for (const uint64_t engine : event.engine_hashes) w.gpu.prefetch_for_write(engine);
      constexpr size_t kBatch = 32;
      uint64_t routers[kBatch];
      bool held[kBatch];
      for (size_t start = 0; start < event.engine_hashes.size(); start += kBatch) {
        const auto chunk = event.engine_hashes.subspan(
            start, std::min(kBatch, event.engine_hashes.size() - start));
        for (size_t i = 0; i < chunk.size(); ++i) {
          const uint64_t engine = chunk[i];
          held[i] = false;
          // A copy in gpu_dups implies the engine hash is in gpu: drop one copy first. Else
          // take tells whether it was held (an event may name a hash twice: the second is
          // unknown by then).
          if (uint32_t* dups = w.gpu_dups.find(engine)) {
            ++removed;
            if (--*dups == 0) w.gpu_dups.erase_found(dups);
          } else if (w.gpu.take(engine, routers[i])) {
            ++removed;
            held[i] = true;
            g.holders.prefetch_for_write(routers[i]);
          } else {
            ++unknown;
          }
        }
        for (size_t i = 0; i < chunk.size(); ++i) {
          if (held[i]) g.drop_gpu_name(w, routers[i], bit);
        }
      }
    } else {
      LowerTier& tier = w.lower[static_cast<size_t>(event.medium) - 1];
      for (const uint64_t engine : event.engine_hashes) {
        LowerEntry* entry = tier.by_engine.find(engine);
        if (!entry) {
          ++unknown;
          continue;
        }
        ++removed;
        if (--entry->refs > 0) continue;
        if (entry->known) {
          uint32_t* n = tier.by_router.find(entry->router);
          if (n && --*n == 0) tier.by_router.erase(entry->router);
        }
        tier.by_engine.erase(engine);
      }
      g.note_lower(event.worker % kGroupSize);
    }
  }
  blocks_removed_.fetch_add(removed, std::memory_order_relaxed);
  removals_unknown_.fetch_add(unknown, std::memory_order_relaxed);
  count(ApplyResult::kApplied);
  return ApplyResult::kApplied;
}

void KvIndex::find_overlaps(std::span<const uint64_t> seq_hashes, std::vector<uint32_t>& gpu_hits,
                            std::vector<uint32_t>* lower_hits,
                            std::vector<uint32_t>* disk_hits) const {
  const uint32_t bound = worker_bound();
  gpu_hits.assign(bound, 0);
  if (lower_hits) lower_hits->assign(bound, 0);
  if (lower_hits && disk_hits) disk_hits->assign(bound, 0);
  const size_t n = seq_hashes.size();
  if (n == 0) return;
  const uint32_t num_groups = (bound + kGroupSize - 1) / kGroupSize;
  // A cold query waits on each group's lock, table header and holder slots: at 1,000 workers,
  // 16 groups, each a walk as deep as its longest match (a shared system prompt: hundreds of
  // blocks in every group). Asked for one after another, the misses queue; so every group's
  // lock is taken first (writers take one group's lock at a time: no deadlock), then the
  // groups are walked level by level, each level's slots asked for a level ahead, and the
  // misses of all groups overlap (docs/benchmarks.md, 1,000 workers).
  for (uint32_t gi = 0; gi < num_groups; ++gi) {
    const auto at = reinterpret_cast<uintptr_t>(groups_[gi].get());
    prefetch_line(at);
    prefetch_line(at + 64);
  }
  struct Walk {
    const Group* g;
    uint32_t base;    // worker id of the group's slot 0
    uint64_t active;  // workers still matching
  };
  thread_local std::vector<Walk> walks;
  walks.clear();
  walks.reserve(num_groups);  // nothing below allocates while the locks are held
  for (uint32_t gi = 0; gi < num_groups; ++gi) {
    const Group& g = *groups_[gi];
    g.lock.lock_shared();
    const uint64_t active = g.present & ~g.stale;
    if (active == 0) continue;
    for (size_t i = 0; i < std::min<size_t>(kWalkAhead, n); ++i) g.holders.prefetch(seq_hashes[i]);
    walks.push_back({&g, gi * kGroupSize, active});
  }
  // Each level is one hash lookup and a mask intersection per group still walking; a worker
  // dropping out records how far it got, a group with nobody left leaves the walk.
  size_t live = walks.size();
  for (size_t i = 0; i < n && live != 0; ++i) {
    if (i + kWalkAhead < n) {
      for (size_t k = 0; k < live; ++k) walks[k].g->holders.prefetch(seq_hashes[i + kWalkAhead]);
    }
    for (size_t k = 0; k < live;) {
      Walk& walk = walks[k];
      const uint64_t* bits = walk.g->holders.find(seq_hashes[i]);
      const uint64_t held = bits ? *bits : 0;
      for (uint64_t lost = walk.active & ~held; lost != 0; lost &= lost - 1) {
        gpu_hits[walk.base + static_cast<uint32_t>(__builtin_ctzll(lost))] =
            static_cast<uint32_t>(i);
      }
      walk.active &= held;
      if (walk.active == 0) {
        std::swap(walk, walks[--live]);  // done: out of the live prefix, order is irrelevant
      } else {
        ++k;
      }
    }
  }
  for (size_t k = 0; k < live; ++k) {
    for (uint64_t rest = walks[k].active; rest != 0; rest &= rest - 1) {
      gpu_hits[walks[k].base + static_cast<uint32_t>(__builtin_ctzll(rest))] =
          static_cast<uint32_t>(n);
    }
  }
  for (uint32_t gi = 0; gi < num_groups; ++gi) {
    const Group& g = *groups_[gi];
    const uint32_t base = gi * kGroupSize;
    std::shared_lock lock(g.lock, std::adopt_lock);
    if (!lower_hits) continue;
    for (uint64_t each = g.present & ~g.stale & g.lower; each != 0; each &= each - 1) {
      const uint32_t slot = static_cast<uint32_t>(__builtin_ctzll(each));
      const WorkerState& w = g.workers[slot];
      uint32_t extra = 0, disk_only = 0;
      for (size_t b = gpu_hits[base + slot]; b < n; ++b, ++extra) {
        // w.lower[0] is the CPU tier, w.lower[1] disk (Medium - 1).
        if (w.lower[0].by_router.contains(seq_hashes[b])) continue;
        if (!w.lower[1].by_router.contains(seq_hashes[b])) break;
        ++disk_only;
      }
      (*lower_hits)[base + slot] = extra;
      if (disk_hits) (*disk_hits)[base + slot] = disk_only;
    }
  }
}

uint64_t KvIndex::block_count(WorkerId worker, Medium medium) const {
  if (worker >= options_.max_workers) return 0;
  const Group& g = group_of(worker);
  std::shared_lock lock(g.lock);
  const WorkerState& w = g.workers[worker % kGroupSize];
  if (medium == Medium::kGpu) return w.gpu.size();
  return w.lower[static_cast<size_t>(medium) - 1].by_engine.size();
}

size_t KvIndex::memory_bytes() const {
  size_t bytes = 0;
  for (const auto& g : groups_) {
    std::shared_lock lock(g->lock);
    bytes += g->holders.memory_bytes();
    for (const WorkerState& w : g->workers) bytes += w.memory_bytes();
  }
  return bytes;
}

IndexCounters KvIndex::counters() const {
  IndexCounters out;
  for (size_t i = 0; i < kNumApplyResults; ++i) {
    out.events[i] = event_counts_[i].load(std::memory_order_relaxed);
  }
  out.blocks_stored = blocks_stored_.load(std::memory_order_relaxed);
  out.blocks_removed = blocks_removed_.load(std::memory_order_relaxed);
  out.removals_unknown = removals_unknown_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace infera::kv
