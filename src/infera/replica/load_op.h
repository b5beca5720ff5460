// One load change of a router replica, as replicas share it on the bus (docs/contracts.md
// section 12): subject `NS.router.load`, a msgpack map
//   {"v": 1, "router_id": str, "seq": u64, "op": "add"|"prefill_done"|"release"|"hello"|"bye",
//    "worker": str, "request": u64, "blocks": [u64...], "uncached": u32, "cached": u32}
// "add" (a request routed to `worker`) carries its prompt's block hashes, how many of them the
// worker must compute (`uncached`) and how many it had cached (`cached`: where its
// predicted-on-route entries start); "prefill_done" and "release" need only the request (their
// worker is informative: a worker that left may have no name any more).
// "hello" is the replica's heartbeat (no worker or request): a peer silent for a while has left,
// and its entries are dropped (peer_load.h). "bye" (no worker or request either) is a replica
// stopping: its entries are dropped at once, not after the silence. `seq` counts each replica's messages from 1, so a
// receiver sees what the bus lost. Decoding reads untrusted bytes: it never throws, bounds every
// length, skips unknown keys, and rejects another version or an unknown op.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"

namespace infera::replica {

inline constexpr uint32_t kLoadOpVersion = 1;
// At most this many block hashes in one "add" (2 M tokens at 16 tokens per block).
inline constexpr uint32_t kMaxOpBlocks = 1u << 17;

enum class OpKind : uint8_t { kAdd, kPrefillDone, kRelease, kHello, kBye };
std::string_view op_name(OpKind kind);

// A decoded op. Its strings are views into the decoded bytes; an add's block hashes are copied
// into a vector the caller passes (and reuses).
struct LoadOp {
  std::string_view router_id;
  uint64_t seq = 0;
  OpKind kind = OpKind::kHello;
  std::string_view worker;
  uint64_t request = 0;
  uint32_t uncached = 0;
  uint32_t cached = 0;
};

// The fields of an op to encode (the sender's own: router id and seq are added by the writer).
struct OpFields {
  OpKind kind = OpKind::kHello;
  std::string_view worker;
  uint64_t request = 0;
  std::span<const uint64_t> blocks;  // "add" only
  uint32_t uncached = 0;
  uint32_t cached = 0;
};

// Encodes into `out` (replaced; its capacity is kept).
void encode_op(std::string& out, std::string_view router_id, uint64_t seq, const OpFields& op);
// Decodes `bytes`; `blocks` receives an "add"'s hashes (cleared otherwise).
Result<LoadOp> decode_op(std::span<const uint8_t> bytes, std::vector<uint64_t>& blocks);

}  // namespace infera::replica
