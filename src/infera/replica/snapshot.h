// The KV-index snapshot a booting router replica copies from a ready sibling (issue 24, warm
// start): each worker's mirror with the KV-event positions it reflects (events::StreamSnapshot),
// so that the new replica's WorkerStream, seeded with it, repairs what followed by replay.
// Wire form: msgpack (events/msgpack.h), a map {"version", "router_id", "block_size",
// "workers": [{"name", "stale", "ranks": [{"dp_rank", "last", "publisher_id"?}], "main_group"?,
// "gpu", "cpu", "disk"}]} whose tiers are bins of packed little-endian records (20 bytes per GPU block, 21 per
// lower-tier block: about 20 MB for a million blocks). decode_snapshot() reads untrusted bytes:
// it never throws, bounds every size before allocating and skips unknown keys.
// Plain functions over values: any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "infera/common/status.h"
#include "infera/events/stream.h"

namespace infera::replica {

inline constexpr uint32_t kSnapshotVersion = 1;

struct WorkerSnapshot {
  std::string name;  // the worker as discovery names it (host:port)
  events::StreamSnapshot stream;
};

struct IndexSnapshot {
  uint32_t version = kSnapshotVersion;
  std::string router_id;     // the replica that took it
  uint32_t block_size = 16;  // tokens per block of its index; a receiver with another refuses it
  std::vector<WorkerSnapshot> workers;
};

// Bounds on what decode_snapshot() accepts; the input's own size is the caller's (a body limit).
struct SnapshotLimits {
  uint32_t max_workers = 4096;
  uint64_t max_blocks_per_worker = uint64_t{1} << 24;  // records of its three tiers together
  uint64_t max_total_blocks = uint64_t{1} << 26;       // over all workers (~1.6 GB decoded)
  uint32_t max_ranks = 64;                             // per worker (StreamOptions::max_ranks)
  uint32_t max_name_bytes = 1024;                      // a worker's name, the router id
};

std::string encode_snapshot(const IndexSnapshot& snapshot);

// Errors: kInvalidArgument for a version other than kSnapshotVersion (or none), kDataLoss for
// malformed or truncated bytes, kResourceExhausted past a limit; the message says which.
Result<IndexSnapshot> decode_snapshot(std::span<const uint8_t> bytes, SnapshotLimits limits = {});

}  // namespace infera::replica
