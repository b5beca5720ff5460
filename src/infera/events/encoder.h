// KV-event payload encoder: EventBatch -> the msgpack bytes an engine publishes, byte for byte
// what msgspec writes for vLLM's and SGLang's structs (omit_defaults: trailing defaults trimmed
// in arrays, unset optional keys left out of maps; smallest int encodings, float64 ts). The
// simulated engine publishes through it; tests use it to make wire input. Hashes are written in
// the int form (vLLM: unsigned, SGLang: signed int64 bit pattern). Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>

#include "infera/common/status.h"
#include "infera/events/event.h"

namespace infera::events {

enum class WireFormat : uint8_t {
  kVllmMap,        // current vLLM (PR #42892 on): batch array, events as tagged maps
  kVllmArray,      // the last positional vLLM schema (up to kv_cache_spec_*), tagged arrays
  kVllmArrayV010,  // vLLM v0.9.2-v0.11: BlockStored ends at medium, BlockRemoved [hashes, medium]
  kVllmArrayV09,   // vLLM v0.9.0: batch [ts, events], no medium, no dp rank
  kSglangArray,    // SGLang positional: signed int64 hashes, medium a trailing default
};
std::string_view wire_format_name(WireFormat format);  // "vllm-map", "vllm-array", ...
Result<WireFormat> parse_wire_format(std::string_view name);

// Appends the payload of `batch` to `out`. Fields a format cannot carry are left out (e.g. the
// array formats have no locality; v0.9 has no dp rank).
void encode_batch(const EventBatch& batch, WireFormat format, std::string& out);
std::string encode_batch(const EventBatch& batch, WireFormat format = WireFormat::kVllmMap);

}  // namespace infera::events
