// What a worker's KV-event stream has done: the counters and state the admin API, the metrics
// endpoint and the tests read (applied, rejected by reason, decode errors by kind, gaps,
// replays, restarts, staleness). Plain values, copied out of a subscriber under its lock; any
// thread may hold and read a copy.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "infera/events/applier.h"
#include "infera/events/decoder.h"

namespace infera::events {

enum class SubscriberState : uint8_t {
  kStopped = 0,  // not started, or stopped
  kLive,         // the mirror follows the engine's events
  kStale,        // events were lost beyond repair: hits count as 0 until a clean slate
};
std::string_view subscriber_state_name(SubscriberState state);  // "stopped", "live", "stale"

// ZMQ messages that never reached the decoder.
enum class MessageError : uint8_t {
  kNone = 0,
  kFrameCount,     // not the 3 frames [topic, sequence, payload]
  kSequenceFrame,  // a sequence frame of neither 8 nor 24 bytes
  kUnknownTopic,   // bind mode: a topic no worker is registered for
  kTooManyRanks,   // more data-parallel ranks than the stream tracks
};
inline constexpr size_t kNumMessageErrors = 5;
std::string_view message_error_name(MessageError error);

struct RankSequence {
  int64_t dp_rank = 0;
  uint64_t last_seq = 0;  // the last sequence number applied (live or replayed)
};

struct StreamStats {
  SubscriberState state = SubscriberState::kStopped;
  uint64_t messages = 0;  // live messages with valid framing
  uint64_t batches = 0;   // batches decoded and applied, live and replayed
  ApplyTally applied;     // events and blocks applied, rejected by reason, other groups
  uint64_t unknown_events = 0;  // events of unknown type, skipped
  std::array<uint64_t, kNumDecodeErrors> decode_errors{};    // by DecodeError
  std::array<uint64_t, kNumMessageErrors> message_errors{};  // by MessageError
  uint64_t gaps = 0;              // sequence jumps seen on the live stream
  uint64_t missed_batches = 0;    // batches those jumps skipped
  uint64_t replays = 0;           // replay requests sent
  uint64_t replayed_batches = 0;  // batches recovered through replay and applied
  uint64_t replay_failures = 0;   // replays that failed, timed out or could not fill the gap
  uint64_t restarts = 0;          // engine restarts seen (sequence went backwards, or a
                                  // reconnect to an engine life not proven the same)
  uint64_t partial_joins = 0;     // joined a running engine whose replay buffer lacked the start
  uint64_t duplicates = 0;        // live copies of batches a catch-up replay had applied (skipped)
  uint64_t stale_transitions = 0; // times the mirror became stale
  uint64_t recoveries = 0;        // times a stale mirror became fresh again
  std::vector<RankSequence> sequences;  // per data-parallel rank seen

  uint64_t decode_errors_total() const;
  uint64_t message_errors_total() const;
  // The last applied sequence of `dp_rank`; none before its first message.
  std::optional<uint64_t> last_seq(int64_t dp_rank = 0) const;
};

}  // namespace infera::events
