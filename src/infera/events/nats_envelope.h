// The KV-event envelope on NATS (docs/contracts.md section 11): a msgpack map
// {"worker_id": str, "seq": u64, "topic": str, "batch": bin}, `batch` the engine's ZMQ payload
// unchanged and `seq` the engine's sequence. When the engine's sequence frame is vLLM's 24-byte
// form (sequence + publisher id), the envelope also carries "publisher_id": bin(16), which other
// readers may ignore. Replay: a request {"from_seq": u64[, "dp_rank": int]} on NS.kv-replay.<worker>,
// answered by envelopes and then {"end": true}. Decoding reads untrusted bytes: unknown keys are
// skipped, a missing or mistyped required field is an error, nothing throws.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "infera/common/status.h"

namespace infera::events {

struct NatsEnvelope {
  std::string_view worker_id;
  uint64_t seq = 0;
  std::string_view topic;
  std::span<const uint8_t> batch;
  bool has_publisher_id = false;
  std::array<uint8_t, 16> publisher_id{};
  bool end = false;  // a replay's end marker (no other field is required then)
  // The sequence frame the ZMQ path would have seen (8 or 24 bytes), for WorkerStream.
  std::array<uint8_t, 24> seq_frame() const;
  size_t seq_frame_size() const { return has_publisher_id ? 24 : 8; }
};

// `seq_frame`: the engine's 8- or 24-byte sequence frame.
std::string encode_envelope(std::string_view worker_id, std::span<const uint8_t> seq_frame,
                            std::string_view topic, std::span<const uint8_t> batch);
// The same into `out` (replaced; its capacity is kept: a relay reuses one buffer).
void encode_envelope_to(std::string& out, std::string_view worker_id,
                        std::span<const uint8_t> seq_frame, std::string_view topic,
                        std::span<const uint8_t> batch);
std::string encode_replay_end();
// Views into `bytes`.
Result<NatsEnvelope> decode_envelope(std::span<const uint8_t> bytes);

struct ReplayRequest {
  uint64_t from_seq = 0;
  int64_t dp_rank = 0;
};
std::string encode_replay_request(const ReplayRequest& request);
Result<ReplayRequest> decode_replay_request(std::span<const uint8_t> bytes);

}  // namespace infera::events
