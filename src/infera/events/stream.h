// WorkerStream: one worker's KV-event stream as the router consumes it, independent of sockets:
// decode each message, track sequence numbers per data-parallel rank, repair gaps through the
// engine's replay buffer, detect engine restarts, mark the mirror stale when events are lost
// beyond repair, and apply everything to the KV index in order. The ZMQ subscriber and the
// bind-mode listener feed it frames; tests feed it directly with a fake ReplaySource.
//
// Sequence rules (KV_EVENTS.md 1.4, 6):
//   - first message of a rank with seq > 0: catch up from seq 0 through replay (messages sent
//     before the subscription took effect); when the buffer no longer reaches back, keep what it
//     has (a partial join, counted; not stale: there was no earlier mirror to be wrong);
//   - seq > last + 1: a gap; replay [last + 1, seq) and apply in order, then the live batch;
//   - seq <= last, or a new publisher id in a 24-byte sequence frame: the engine restarted; drop
//     the worker's mirror (every tier) and rebuild from the stream, catching up from seq 0;
//   - the connection to the publisher dropped and came back (on_disconnected() then
//     on_reconnected(), from the subscriber's socket monitor): the engine on the other side may be
//     a new life whose sequence numbers look like a continuation, so its incarnation is
//     verified at once: replay from the last sequence seen before the drop and compare that
//     batch, byte for byte, with the one we applied. Equal: the same engine, nothing to do (gaps
//     are repaired as usual). Different, no longer buffered, or no answer (or no replay
//     endpoint): a restart as above, decided conservatively (a spurious rebuild costs a few
//     misses, a wrong mirror costs correctness); the mirror is dropped and every rank joins again
//     from its next message, catching up from seq 0 through replay;
//   - a gap (or restart catch-up) the replay cannot fill, or no replay endpoint: drop the mirror
//     and mark it stale (hits count as 0) with a WARN line; it is fresh again after the next
//     AllBlocksCleared (a clean slate) or engine restart. While stale, gaps are counted but not
//     replayed (nothing could make the mirror trusted again but a clean slate), and the live
//     stream is still applied.
// The worker's mirror is one per worker: with several DP ranks on one worker id, a restart or
// AllBlocksCleared of one rank resets the whole worker (the other ranks then catch up from their
// replay buffers). Give each rank its own worker id to keep them apart.
//
// Warm start: snapshot() copies the worker's mirror with the rank positions it reflects, and
// seed() starts another router replica's stream from such a copy (replica/snapshot.h), which
// then repairs what followed by replay from each rank's `last`, as it repairs any gap.
//
// Threading: on_message(), on_disconnected(), on_reconnected(), catch_up() and count_error()
// from one thread at a time (the socket thread); stats(), state(), snapshot() and seed() from
// any thread. A replay blocks that thread only, never readers of the index. on_message(),
// on_disconnected(), on_reconnected() and catch_up() each hold step_mu_ for all their work
// (replays included), so a snapshot falls between two of them; the lock is uncontended except
// while a snapshot or a seed runs.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "infera/common/status.h"
#include "infera/events/applier.h"
#include "infera/events/decoder.h"
#include "infera/events/stats.h"
#include "infera/kv/index.h"

namespace infera::events {

// Fetches buffered batches from an engine's replay socket (vLLM's ROUTER).
class ReplaySource {
 public:
  using Sink = std::function<void(uint64_t seq, std::span<const uint8_t> payload)>;
  virtual ~ReplaySource() = default;
  // Calls `sink` for each batch the publisher of `dp_rank` still holds from `from_seq` on, in
  // the order it sends them, until its end marker. An error when the request fails or times out.
  virtual Status replay(int64_t dp_rank, uint64_t from_seq, const Sink& sink) = 0;
};

// Where one data-parallel rank's stream stands: the last sequence applied, and the publisher id
// of its 24-byte sequence frames when it sends them.
struct RankPosition {
  int64_t dp_rank = 0;
  uint64_t last = 0;
  bool has_id = false;
  std::array<uint8_t, 16> publisher_id{};
};

// A worker's mirror and the rank positions it reflects, taken at one point of its stream.
struct StreamSnapshot {
  // Ranks seen; a rank due to join again (after another rank's restart) is left out, so a
  // stream seeded from this catches it up from seq 0 as the original will.
  std::vector<RankPosition> ranks;
  // The mirror is not to be copied (stale, stopped, interrupted by a stop, or waiting to verify
  // a reconnected publisher); `dump` is then empty.
  bool stale = false;
  // The KV-cache group the mirror follows, as the stream learned it (hybrid models; none: not
  // learned, or the engine sends no groups).
  std::optional<int64_t> main_group;
  kv::WorkerDump dump;
};

struct StreamOptions {
  kv::WorkerId worker = 0;
  std::string worker_name;  // for logs: host:port
  DecodeLimits limits;
  EventApplier::Options apply;
  uint32_t max_ranks = 64;  // data-parallel ranks tracked; messages of more are rejected
};

class WorkerStream {
 public:
  // `replay` may be null (no replay endpoint: every gap makes the mirror stale); it must outlive
  // the stream. The worker is added to the index (idempotent).
  WorkerStream(kv::KvIndex& index, StreamOptions options, ReplaySource* replay);

  // Handles one live message: the 8- or 24-byte sequence frame and the msgpack payload.
  void on_message(std::span<const uint8_t> seq_frame, std::span<const uint8_t> payload);
  // Counts a message that was rejected before reaching on_message().
  void count_error(MessageError error);
  // The subscriber's connection to `dp_rank`'s publisher dropped: remembers the last batch seen
  // from it (its sequence and payload) as the proof of the engine's incarnation.
  void on_disconnected(int64_t dp_rank);
  // The connection came back: verifies that the same engine is on the other side (see the
  // sequence rules); a restart when it is not or when that cannot be decided. May replay
  // (bounded by the replay timeout).
  void on_reconnected(int64_t dp_rank);
  // Asks the replay buffer for whatever followed the last batch of each rank seen, and applies
  // it: after a transport outage in which live messages may have been lost without a later one
  // to show the gap (NATS reconnects). A buffer that no longer holds the next batch makes the
  // mirror stale, as a gap would. From the stream's thread.
  void catch_up();
  // Marks the stream stopped (stats keep their values).
  void set_stopped();

  // The worker's mirror and rank positions between two of the socket thread's calls. Any
  // thread; waits for the call in progress (a replay included) and holds the socket thread
  // back while the index is exported (milliseconds for 100 k blocks).
  StreamSnapshot snapshot() const;
  // Starts from a sibling's snapshot instead of an empty mirror: imports its dump (replacing
  // the worker's mirror) and takes each rank as seen up to `last` with its publisher id, so a
  // rank's next live message with seq > last + 1 replays [last + 1, seq), seq == last + 1
  // applies directly, and seq <= last or another publisher id is a restart. Only before the
  // first message; false, changing nothing, after it, for a stale snapshot, or for more ranks
  // than max_ranks or a rank listed twice. Any thread.
  bool seed(const StreamSnapshot& snapshot);

  StreamStats stats() const;
  SubscriberState state() const { return state_.load(std::memory_order_acquire); }
  const StreamOptions& options() const { return options_; }

 private:
  struct Rank {
    int64_t dp_rank = 0;
    bool seen = false;
    uint64_t last = 0;
    bool has_id = false;
    std::array<uint8_t, 16> publisher_id{};
    std::string last_payload;      // the live payload of `last`
    // The batches the last catch-up replay applied (seq -> digest of the payload), until a live
    // batch goes past them: after a NATS reconnect the relay may still deliver its own buffered
    // copies of those, which are duplicates, not an engine restart. Bounded (kMaxCaughtUp).
    std::unordered_map<uint64_t, uint64_t> caught_up;
    bool verify = false;           // disconnected since `verify_seq`: incarnation unknown
    uint64_t verify_seq = 0;
    std::string verify_payload;    // the payload of verify_seq as we applied it
  };
  struct FillResult {
    bool complete = false;
    bool cancelled = false;  // the subscriber is stopping: neither stale nor fresh
    uint64_t applied = 0;
    uint64_t next = 0;  // the sequence after the last one applied
    std::string last_payload;  // its payload (kept only when asked)
  };

  Rank* rank_state(int64_t dp_rank);
  // Whether a live batch at or below `rank`'s last is the same batch the last catch-up applied.
  bool is_caught_up_copy(const Rank& rank, uint64_t seq, std::span<const uint8_t> payload) const;
  // Replays [from, until) of `rank` and applies what arrives in order.
  FillResult fill(Rank& rank, uint64_t from, uint64_t until, bool keep_last = false,
                  std::unordered_map<uint64_t, uint64_t>* digests = nullptr);
  // Applies a decoded batch; true when it ended a stale period (the caller counts it).
  bool apply_batch(const EventBatch& batch, ApplyTally& tally);
  void count_decode_error(const DecodeResult& result, uint64_t seq);
  void restart(Rank& rank, uint64_t seq);
  // What every restart does: drop the worker's mirror, count it, log it, and make the other
  // ranks catch up again. `rank` (the one that restarted) is left for the caller.
  void reset_for_restart(Rank& rank, const char* reason, uint64_t seq);
  enum class Incarnation : uint8_t { kSame, kDifferent, kUnknown, kCancelled };
  // Whether `rank`'s publisher still holds verify_seq with the payload we applied.
  Incarnation check_incarnation(Rank& rank);
  void go_stale(const char* reason, int64_t dp_rank, uint64_t expected, uint64_t got);
  void set_state(SubscriberState state);

  kv::KvIndex& index_;
  StreamOptions options_;
  ReplaySource* replay_;

  // Held by each socket-thread call but count_error(), by snapshot() and by seed(); guards the
  // members below down to state_. Taken before mu_ and the index's locks.
  mutable std::mutex step_mu_;
  EventApplier applier_;
  std::vector<Rank> ranks_;
  int64_t last_rank_ = 0;  // rank of the last decoded batch: where undecodable messages count
  EventBatch scratch_;      // live decode target, reused
  EventBatch replay_scratch_;
  DecodeScratch spares_;    // event buffers between batches
  bool received_ = false;   // a live message arrived: too late to seed
  bool interrupted_ = false;  // a replay was cancelled half-way: positions may lag the mirror
  std::atomic<SubscriberState> state_{SubscriberState::kLive};

  mutable std::mutex mu_;
  StreamStats stats_;  // guarded by mu_
};

}  // namespace infera::events
