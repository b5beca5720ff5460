#include "infera/events/stream.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "infera/common/log.h"
#include "infera/events/msgpack.h"

namespace infera::events {

namespace {

// Catch-up replays remembered per rank, at most (a replay buffer is far smaller).
constexpr size_t kMaxCaughtUp = 1u << 16;

// A payload's fingerprint: XXH3, the project's byte hash, and its length.
uint64_t digest(std::span<const uint8_t> payload) {
  return XXH3_64bits(payload.data(), payload.size()) ^ (uint64_t{payload.size()} << 48);
}

}  // namespace

bool WorkerStream::is_caught_up_copy(const Rank& rank, uint64_t seq,
                                     std::span<const uint8_t> payload) const {
  auto it = rank.caught_up.find(seq);
  return it != rank.caught_up.end() && it->second == digest(payload);
}


std::string_view subscriber_state_name(SubscriberState state) {
  switch (state) {
    case SubscriberState::kStopped: return "stopped";
    case SubscriberState::kLive: return "live";
    case SubscriberState::kStale: return "stale";
  }
  return "?";
}

std::string_view message_error_name(MessageError error) {
  switch (error) {
    case MessageError::kNone: return "none";
    case MessageError::kFrameCount: return "frame_count";
    case MessageError::kSequenceFrame: return "sequence_frame";
    case MessageError::kUnknownTopic: return "unknown_topic";
    case MessageError::kTooManyRanks: return "too_many_ranks";
  }
  return "?";
}

uint64_t StreamStats::decode_errors_total() const {
  uint64_t n = 0;
  for (const uint64_t e : decode_errors) n += e;
  return n;
}

uint64_t StreamStats::message_errors_total() const {
  uint64_t n = 0;
  for (const uint64_t e : message_errors) n += e;
  return n;
}

std::optional<uint64_t> StreamStats::last_seq(int64_t dp_rank) const {
  for (const RankSequence& s : sequences) {
    if (s.dp_rank == dp_rank) return s.last_seq;
  }
  return std::nullopt;
}

WorkerStream::WorkerStream(kv::KvIndex& index, StreamOptions options, ReplaySource* replay)
    : index_(index),
      options_(std::move(options)),
      replay_(replay),
      applier_(index, options_.worker, options_.apply) {
  index_.add_worker(options_.worker);
  stats_.state = SubscriberState::kLive;
}

void WorkerStream::on_message(std::span<const uint8_t> seq_frame, std::span<const uint8_t> payload) {
  std::lock_guard step_lock(step_mu_);
  received_ = true;
  if (seq_frame.size() != 8 && seq_frame.size() != 24) {
    count_error(MessageError::kSequenceFrame);
    return;
  }
  const uint64_t seq = load_be(seq_frame.data(), 8);
  const DecodeResult decoded = decode_batch(payload, scratch_, options_.limits, &spares_);
  // An undecodable payload still consumed its sequence number: charge it to the rank of the
  // previous batch (one rank per publisher socket in practice) so it does not look like a gap.
  const int64_t rank_id = decoded.ok() ? scratch_.dp_rank.value_or(0) : last_rank_;
  Rank* rank = rank_state(rank_id);
  if (rank == nullptr) {
    count_error(MessageError::kTooManyRanks);
    return;
  }
  if (decoded.ok()) last_rank_ = rank_id;

  // A 24-byte sequence frame carries a publisher id after the sequence (vLLM's snapshot
  // extension): a new id is a new engine life even if the sequence did not go backwards.
  const bool has_id = seq_frame.size() == 24;
  const bool new_publisher =
      has_id && rank->has_id && std::memcmp(rank->publisher_id.data(), seq_frame.data() + 8, 16) != 0;
  if (!rank->seen) {
    if (seq > 0) {
      // Batches before this one were published before our subscription took effect (or before
      // the router started): take them from the replay buffer.
      const FillResult f = fill(*rank, 0, seq);
      if (f.cancelled) return;
      if (!f.complete) {
        {
          std::lock_guard lock(mu_);
          ++stats_.partial_joins;
        }
        INFERA_LOG(kInfo, "events")
            .msg("joined a running KV-event stream; its replay buffer no longer holds the start")
            .kv("worker", options_.worker_name)
            .kv("dp_rank", rank_id)
            .kv("seq", seq)
            .kv("replayed", f.applied);
      }
    }
  } else if (!new_publisher && seq <= rank->last && is_caught_up_copy(*rank, seq, payload)) {
    // The relay's own copy of a batch the catch-up replay applied already (it buffered its
    // publishes while the bus was away and delivered them after we re-subscribed).
    std::lock_guard lock(mu_);
    ++stats_.duplicates;
    return;
  } else if (new_publisher || seq <= rank->last) {
    restart(*rank, seq);
  } else if (seq > rank->last + 1) {
    const uint64_t expected = rank->last + 1;
    {
      std::lock_guard lock(mu_);
      ++stats_.gaps;
      stats_.missed_batches += seq - expected;
    }
    if (state() == SubscriberState::kStale) {
      // Already stale: the mirror is untrusted until a clean slate, so repairing this gap buys
      // nothing, and under overload replays would only slow the subscriber further.
    } else if (const FillResult f = fill(*rank, expected, seq); f.cancelled) {
      return;  // stopping: leave the mirror as it is
    } else if (f.complete) {
      INFERA_LOG(kDebug, "events")
          .msg("KV-event gap repaired through replay")
          .kv("worker", options_.worker_name)
          .kv("dp_rank", rank_id)
          .kv("from", expected)
          .kv("to", seq - 1);
    } else {
      go_stale("gap not repaired by replay", rank_id, expected, seq);
    }
  }
  rank->seen = true;
  rank->last = seq;
  rank->caught_up.clear();  // live past the catch-up: an older sequence is a restart again
  // Kept as the proof of this engine's incarnation should the connection drop (capacity reused).
  rank->last_payload.assign(reinterpret_cast<const char*>(payload.data()), payload.size());
  if (has_id) {
    rank->has_id = true;
    std::memcpy(rank->publisher_id.data(), seq_frame.data() + 8, 16);
  }

  // The common path takes the stats lock once per message.
  ApplyTally tally;
  const bool recovered = decoded.ok() && apply_batch(scratch_, tally);
  if (!decoded.ok()) count_decode_error(decoded, seq);
  std::lock_guard lock(mu_);
  ++stats_.messages;
  if (decoded.ok()) {
    ++stats_.batches;
    stats_.applied.add(tally);
    stats_.unknown_events += decoded.unknown_events;
    if (recovered) ++stats_.recoveries;
  }
  auto it = std::find_if(stats_.sequences.begin(), stats_.sequences.end(),
                         [&](const RankSequence& r) { return r.dp_rank == rank_id; });
  if (it == stats_.sequences.end()) {
    stats_.sequences.push_back(RankSequence{rank_id, seq});
  } else {
    it->last_seq = seq;
  }
}

void WorkerStream::count_error(MessageError error) {
  std::lock_guard lock(mu_);
  if (stats_.message_errors[static_cast<size_t>(error)]++ == 0) {
    INFERA_LOG(kWarn, "events")
        .msg("malformed KV-event message skipped (first of its kind; later ones are counted)")
        .kv("worker", options_.worker_name)
        .kv("error", message_error_name(error));
  }
}

void WorkerStream::on_disconnected(int64_t dp_rank) {
  std::lock_guard step_lock(step_mu_);
  for (Rank& r : ranks_) {
    // Keep the first proof: messages of the old connection still queued may move `last` on.
    if (r.dp_rank != dp_rank || !r.seen || r.verify) continue;
    r.verify = true;
    r.verify_seq = r.last;
    r.verify_payload = r.last_payload;
  }
}

void WorkerStream::on_reconnected(int64_t dp_rank) {
  std::lock_guard step_lock(step_mu_);
  Rank* rank = nullptr;
  for (Rank& r : ranks_) {
    if (r.dp_rank == dp_rank && r.verify) rank = &r;
  }
  if (rank == nullptr) return;  // nothing mirrored from it, or a restart already rebuilt it
  rank->verify = false;
  const char* reason = nullptr;
  switch (check_incarnation(*rank)) {
    case Incarnation::kSame:
      INFERA_LOG(kDebug, "events")
          .msg("KV-event publisher reconnected: same engine life")
          .kv("worker", options_.worker_name)
          .kv("dp_rank", dp_rank)
          .kv("seq", rank->verify_seq);
      return;
    case Incarnation::kCancelled: return;  // stopping: leave the mirror as it is
    case Incarnation::kDifferent: reason = "reconnected to a new engine life"; break;
    case Incarnation::kUnknown: reason = "reconnected; engine life unverifiable"; break;
  }
  reset_for_restart(*rank, reason, rank->verify_seq);
  // Every rank (this one too) joins again from its next message, catching up from seq 0.
  rank->seen = false;
  rank->has_id = false;
}

WorkerStream::Incarnation WorkerStream::check_incarnation(Rank& rank) {
  if (replay_ == nullptr) return Incarnation::kUnknown;  // conservative: cannot tell
  {
    std::lock_guard lock(mu_);
    ++stats_.replays;
  }
  bool found = false;
  bool equal = false;
  // vLLM answers with every buffered batch from verify_seq on; only that one matters.
  const auto check = [&](uint64_t seq, std::span<const uint8_t> payload) {
    if (seq != rank.verify_seq || found) return;
    found = true;
    equal = payload.size() == rank.verify_payload.size() &&
            std::memcmp(payload.data(), rank.verify_payload.data(), payload.size()) == 0;
  };
  const Status status = replay_->replay(rank.dp_rank, rank.verify_seq, check);
  if (status.code() == StatusCode::kCancelled) return Incarnation::kCancelled;
  if (!status.ok()) {
    std::lock_guard lock(mu_);
    ++stats_.replay_failures;
    return Incarnation::kUnknown;
  }
  // Not buffered: a new life that has not got that far, or one so far ahead that the same
  // life would be beyond repair anyway.
  if (!found) return Incarnation::kUnknown;
  return equal ? Incarnation::kSame : Incarnation::kDifferent;
}

void WorkerStream::catch_up() {
  std::lock_guard step_lock(step_mu_);
  if (state() == SubscriberState::kStale) return;  // nothing but a clean slate helps
  for (Rank& r : ranks_) {
    if (!r.seen) continue;
    const uint64_t from = r.last + 1;
    r.caught_up.clear();
    FillResult f = fill(r, from, UINT64_MAX, /*keep_last=*/true, &r.caught_up);
    if (f.cancelled) return;
    if (f.applied > 0) {
      r.last = f.next - 1;
      r.last_payload = std::move(f.last_payload);
      std::lock_guard lock(mu_);
      for (RankSequence& seq : stats_.sequences) {
        if (seq.dp_rank == r.dp_rank) seq.last_seq = r.last;
      }
    }
    // complete is never true with an open end; a hole or a failed request is what counts.
    if (f.applied > 0 && f.next - from != f.applied) {
      go_stale("catch-up replay incomplete", r.dp_rank, from, f.next);
    }
  }
}

void WorkerStream::set_stopped() { set_state(SubscriberState::kStopped); }

StreamSnapshot WorkerStream::snapshot() const {
  std::lock_guard step_lock(step_mu_);
  StreamSnapshot out;
  bool verifying = false;
  for (const Rank& r : ranks_) {
    verifying = verifying || r.verify;
    if (r.seen) out.ranks.push_back(RankPosition{r.dp_rank, r.last, r.has_id, r.publisher_id});
  }
  // A copy of an unverified incarnation could not tell a new engine life whose sequence looks
  // like a continuation (see on_reconnected()): not copied, like a stale mirror.
  out.stale = state() != SubscriberState::kLive || interrupted_ || verifying ||
              index_.is_stale(options_.worker);
  if (!out.stale) out.dump = index_.export_worker(options_.worker);
  out.main_group = applier_.main_group();
  return out;
}

bool WorkerStream::seed(const StreamSnapshot& snapshot) {
  std::lock_guard step_lock(step_mu_);
  if (received_ || snapshot.stale || snapshot.ranks.size() > options_.max_ranks) return false;
  for (size_t i = 0; i < snapshot.ranks.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (snapshot.ranks[i].dp_rank == snapshot.ranks[j].dp_rank) return false;
    }
  }
  if (!index_.import_worker(options_.worker, snapshot.dump)) return false;
  applier_.reset();
  applier_.set_main_group(snapshot.main_group);
  ranks_.clear();
  for (const RankPosition& p : snapshot.ranks) {
    Rank r{p.dp_rank};
    r.seen = true;
    r.last = p.last;
    r.has_id = p.has_id;
    r.publisher_id = p.publisher_id;
    ranks_.push_back(std::move(r));
  }
  last_rank_ = snapshot.ranks.empty() ? 0 : snapshot.ranks.front().dp_rank;
  {
    std::lock_guard lock(mu_);
    stats_.sequences.clear();
    for (const RankPosition& p : snapshot.ranks) stats_.sequences.push_back({p.dp_rank, p.last});
  }
  INFERA_LOG(kInfo, "events")
      .msg("KV mirror seeded from a sibling's snapshot")
      .kv("worker", options_.worker_name)
      .kv("blocks", snapshot.dump.size())
      .kv("ranks", snapshot.ranks.size());
  return true;
}

StreamStats WorkerStream::stats() const {
  std::lock_guard lock(mu_);
  StreamStats out = stats_;
  out.state = state();
  return out;
}

WorkerStream::Rank* WorkerStream::rank_state(int64_t dp_rank) {
  for (Rank& r : ranks_) {
    if (r.dp_rank == dp_rank) return &r;
  }
  if (ranks_.size() >= options_.max_ranks) return nullptr;
  ranks_.push_back(Rank{dp_rank});
  return &ranks_.back();
}

WorkerStream::FillResult WorkerStream::fill(Rank& rank, uint64_t from, uint64_t until,
                                           bool keep_last,
                                           std::unordered_map<uint64_t, uint64_t>* digests) {
  FillResult result;
  if (replay_ == nullptr) {
    std::lock_guard lock(mu_);
    ++stats_.replay_failures;
    return result;
  }
  {
    std::lock_guard lock(mu_);
    ++stats_.replays;
  }
  uint64_t next = from;
  bool hole = false;
  const Status status = replay_->replay(rank.dp_rank, from, [&](uint64_t seq, std::span<const uint8_t> payload) {
    // Batches before `next` are applied already; those from `until` on arrive live.
    if (seq < next || seq >= until) return;
    if (seq > next) hole = true;  // the bounded buffer no longer holds [next, seq)
    const DecodeResult d = decode_batch(payload, replay_scratch_, options_.limits, &spares_);
    if (d.ok()) {
      ApplyTally tally;
      const bool recovered = apply_batch(replay_scratch_, tally);
      std::lock_guard lock(mu_);
      ++stats_.batches;
      stats_.applied.add(tally);
      stats_.unknown_events += d.unknown_events;
      if (recovered) ++stats_.recoveries;
    } else {
      count_decode_error(d, seq);
    }
    ++result.applied;
    next = seq + 1;
    if (digests != nullptr && digests->size() < kMaxCaughtUp) digests->emplace(seq, digest(payload));
    if (keep_last) result.last_payload.assign(reinterpret_cast<const char*>(payload.data()), payload.size());
  });
  result.next = next;
  result.complete = status.ok() && !hole && next == until;
  result.cancelled = status.code() == StatusCode::kCancelled;
  if (result.cancelled) interrupted_ = true;  // callers leave the positions where they were
  {
    std::lock_guard lock(mu_);
    stats_.replayed_batches += result.applied;
    if (!result.complete && !result.cancelled) ++stats_.replay_failures;
  }
  if (!status.ok() && !result.cancelled) {
    INFERA_LOG(kWarn, "events")
        .msg("KV-event replay failed")
        .kv("worker", options_.worker_name)
        .kv("dp_rank", rank.dp_rank)
        .kv("from", from)
        .kv("error", status.to_string());
  }
  return result;
}

bool WorkerStream::apply_batch(const EventBatch& batch, ApplyTally& tally) {
  applier_.apply(batch, tally);
  if (tally.clears == 0 || state() != SubscriberState::kStale) return false;
  // AllBlocksCleared: the engine's GPU cache is empty, and so is our mirror: a clean slate.
  index_.set_stale(options_.worker, false);
  set_state(SubscriberState::kLive);
  INFERA_LOG(kInfo, "events")
      .msg("KV mirror fresh again after AllBlocksCleared")
      .kv("worker", options_.worker_name);
  return true;
}

void WorkerStream::count_decode_error(const DecodeResult& result, uint64_t seq) {
  std::lock_guard lock(mu_);
  if (stats_.decode_errors[static_cast<size_t>(result.error)]++ == 0) {
    INFERA_LOG(kWarn, "events")
        .msg("undecodable KV-event payload skipped (first of its kind; later ones are counted)")
        .kv("worker", options_.worker_name)
        .kv("error", decode_error_name(result.error))
        .kv("offset", result.error_offset)
        .kv("seq", seq);
  }
}

void WorkerStream::restart(Rank& rank, uint64_t seq) {
  reset_for_restart(rank, "sequence went backwards or new publisher", seq);
  rank.has_id = false;
  if (seq > 0) {
    // The new engine's first batches went out before we reconnected.
    const FillResult f = fill(rank, 0, seq);
    if (!f.complete && !f.cancelled) {
      go_stale("restart catch-up not repaired by replay", rank.dp_rank, 0, seq);
    }
  }
}

void WorkerStream::reset_for_restart(Rank& rank, const char* reason, uint64_t seq) {
  INFERA_LOG(kInfo, "events")
      .msg("engine restart detected: rebuilding mirror")
      .kv("worker", options_.worker_name)
      .kv("reason", reason)
      .kv("dp_rank", rank.dp_rank)
      .kv("last_seq", rank.last)
      .kv("seq", seq);
  index_.reset_worker(options_.worker);
  index_.set_stale(options_.worker, false);
  applier_.reset();
  const bool was_stale = state() == SubscriberState::kStale;
  set_state(SubscriberState::kLive);
  {
    std::lock_guard lock(mu_);
    ++stats_.restarts;
    if (was_stale) ++stats_.recoveries;
  }
  // The reset dropped every rank's blocks: the others rebuild from their replay buffers.
  for (Rank& other : ranks_) {
    if (&other != &rank) other.seen = false;
    other.verify = false;  // the mirror is rebuilt: nothing of the old life is left to verify
  }
}

void WorkerStream::go_stale(const char* reason, int64_t dp_rank, uint64_t expected, uint64_t got) {
  index_.reset_worker(options_.worker);
  index_.set_stale(options_.worker, true);
  const bool was_stale = state() == SubscriberState::kStale;
  set_state(SubscriberState::kStale);
  {
    std::lock_guard lock(mu_);
    if (!was_stale) ++stats_.stale_transitions;
  }
  INFERA_LOG(kWarn, "events")
      .msg("KV mirror stale: events lost beyond repair; hits count as 0 until a clean slate")
      .kv("worker", options_.worker_name)
      .kv("reason", reason)
      .kv("dp_rank", dp_rank)
      .kv("expected_seq", expected)
      .kv("got_seq", got);
}

void WorkerStream::set_state(SubscriberState state) {
  state_.store(state, std::memory_order_release);
}

}  // namespace infera::events
