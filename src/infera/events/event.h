// The KV-event vocabulary shared by the decoder (events module), the simulated engine's
// publisher (engine module) and the tests: vLLM's KVEventBatch and its three event types, as
// plain owned structs. Wire details (msgpack map vs array, hash encodings) end at the decoder;
// everything past it sees only these types. Plain values; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace infera::events {

// vLLM BlockStored: blocks newly cached by one request in one KV-cache group.
struct BlockStored {
  std::vector<uint64_t> block_hashes;         // engine hashes, normalised to u64
  std::optional<uint64_t> parent_block_hash;  // none: the first block is block 0 of the request
  std::vector<uint32_t> token_ids;            // block_size per block; empty for tokenless tiers
  uint32_t block_size = 0;
  std::optional<int64_t> lora_id;    // deprecated upstream, carried for completeness
  std::optional<std::string> medium;  // "GPU", "CPU", ...; none means GPU (older vLLM)
  std::optional<std::string> lora_name;
  std::optional<int64_t> group_idx;  // KV-cache group; none means group 0
  std::optional<std::string> kv_cache_spec_kind;  // "full_attention", "sliding_window", ...
  std::optional<int64_t> kv_cache_spec_sliding_window;
  uint32_t extra_keys_count = 0;  // entries of extra_keys (they are engine-hash inputs only)
  // Fields newer vLLM adds (PR #51243 and later), each omitted from the wire when unset.
  std::optional<std::string> locality;  // "LOCAL" / "REMOTE"
  std::optional<std::string> ownership;
  std::optional<std::string> session_id;
  // extra_keys verbatim (one msgpack array) when any entry is not nil, so an encoder can write
  // it back byte for byte; empty when extra_keys is absent or all nil (extra_keys_count says).
  std::string extra_keys_msgpack;

  bool operator==(const BlockStored&) const = default;
};

// vLLM BlockRemoved: blocks evicted.
struct BlockRemoved {
  std::vector<uint64_t> block_hashes;
  std::optional<std::string> medium;
  std::optional<int64_t> group_idx;
  std::optional<std::string> locality;  // newer vLLM, omitted when unset
  std::optional<std::string> ownership;

  bool operator==(const BlockRemoved&) const = default;
};

// vLLM AllBlocksCleared: the GPU prefix cache was reset.
struct AllBlocksCleared {
  bool operator==(const AllBlocksCleared&) const = default;
};

using Event = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

// One scheduler step's events (vLLM KVEventBatch).
struct EventBatch {
  double ts = 0;  // publisher wall-clock seconds
  std::vector<Event> events;
  std::optional<int64_t> dp_rank;

  bool operator==(const EventBatch&) const = default;
};

}  // namespace infera::events
