// KV-event payload decoder: the msgpack payload of one ZMQ message -> EventBatch (event.h), for
// every encoding real engines emit (shared/wire/KV_EVENTS.md sections 1-3 and 6): the batch as
// an array [ts, events, dp_rank?, ...] or a map {ts, events, data_parallel_rank}; each event a
// tagged map (current vLLM) or a tagged array (older vLLM, SGLang), sniffed per event; unknown
// keys, trailing elements and unknown event types ignored; hashes as ints of any width or bytes,
// normalised to u64. Untrusted input: never throws, never reads out of bounds, never allocates
// beyond what the payload can hold; malformed input is an error value of a countable kind.
// Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "infera/common/status.h"
#include "infera/events/event.h"

namespace infera::events {

enum class DecodeError : uint8_t {
  kNone = 0,
  kTruncated,      // the payload ends inside a value (or a declared length exceeds it)
  kInvalidByte,    // a byte msgpack never uses (0xc1)
  kWrongType,      // a field of the wrong msgpack type (a string where a list belongs, ...)
  kTooLarge,       // a payload, list or string above the configured limits
  kTooDeep,        // nesting deeper than the limit
  kBadValue,       // the right type but an impossible value (token id >= 2^32, ...)
  kMissingField,   // the batch has no events list, an event has no tag or no block_hashes
  kTrailingBytes,  // bytes after the batch
};
inline constexpr size_t kNumDecodeErrors = 9;  // including kNone, so counters index directly
std::string_view decode_error_name(DecodeError error);

struct DecodeLimits {
  size_t max_payload_bytes = size_t{64} << 20;
  uint32_t max_events = 1u << 16;   // per batch
  uint32_t max_blocks = 1u << 16;   // block hashes per event
  uint32_t max_tokens = 1u << 22;   // token ids per event
  uint32_t max_string = 1u << 20;   // bytes of one string, or elements of one skipped list
  uint32_t max_depth = 16;          // nesting inside fields the decoder skips (extra_keys, ...)
};

struct DecodeResult {
  DecodeError error = DecodeError::kNone;
  uint32_t unknown_events = 0;  // events of an unknown type, skipped
  size_t error_offset = 0;      // payload offset where decoding stopped, for logs
  bool ok() const { return error == DecodeError::kNone; }
};

// Storage a long-lived caller keeps between decodes (one per thread): events of a type that is
// not needed in one batch wait here with their buffers for the next.
struct DecodeScratch {
  std::vector<BlockStored> stored;
  std::vector<BlockRemoved> removed;
};

// Decodes `payload` into `out`, reusing its storage: events keep their vectors' capacity from
// batch to batch (through `scratch`, when given, also across changes of type), so a steady
// stream decodes without allocating. On error `out` holds partial data and must not be used.
DecodeResult decode_batch(std::span<const uint8_t> payload, EventBatch& out,
                          const DecodeLimits& limits = {}, DecodeScratch* scratch = nullptr);

// Convenience: a fresh batch, or kInvalidArgument naming the error kind and offset.
Result<EventBatch> decode_batch(std::span<const uint8_t> payload, const DecodeLimits& limits = {});

// A hash sent as bytes (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) as vLLM's int form:
// the last 8 bytes read big-endian (all of them, zero-extended, when shorter).
uint64_t hash_from_bytes(std::span<const uint8_t> bytes);

}  // namespace infera::events
