#include "infera/events/stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <thread>

#include "infera/events/encoder.h"
#include "infera/events/msgpack.h"
#include "infera/kv/block_hash.h"

namespace infera::events {
namespace {

constexpr uint32_t kStreamBs = 4;
constexpr kv::WorkerId kWorker = 5;

std::string be64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return s;
}

// A toy engine: each step stores one new block (chained on the previous one of its prompt),
// buffers the encoded batch like vLLM's replay deque, and knows its true cache content.
class FakeEngine : public ReplaySource {
 public:
  explicit FakeEngine(int64_t dp_rank = 0, size_t buffer = 1000) : dp_rank_(dp_rank), buffer_(buffer) {}

  // Encodes the next batch; returns {seq, payload}.
  std::pair<uint64_t, std::string> step_store() {
    const uint64_t block = next_block_++;
    BlockStored s;
    s.block_hashes = {1000 + block};
    if (block > 0) s.parent_block_hash = 1000 + block - 1;
    for (uint32_t i = 0; i < kStreamBs; ++i) s.token_ids.push_back(static_cast<uint32_t>(block * kStreamBs + i));
    s.block_size = kStreamBs;
    s.medium = "GPU";
    return publish({s});
  }
  std::pair<uint64_t, std::string> step_clear() {
    next_block_ = 0;
    return publish({AllBlocksCleared{}});
  }
  std::pair<uint64_t, std::string> publish(std::vector<Event> events) {
    EventBatch b;
    b.ts = 1.0;
    b.dp_rank = dp_rank_;
    b.events = std::move(events);
    const uint64_t seq = seq_++;
    std::string payload = encode_batch(b);
    buffered_.emplace_back(seq, payload);
    if (buffered_.size() > buffer_) buffered_.pop_front();
    return {seq, payload};
  }
  // The engine's cached prompt: every block stored since the last clear.
  std::vector<uint32_t> cached_tokens() const {
    std::vector<uint32_t> t;
    for (uint32_t i = 0; i < next_block_ * kStreamBs; ++i) t.push_back(i);
    return t;
  }
  uint64_t cached_blocks() const { return next_block_; }

  Status replay(int64_t dp_rank, uint64_t from_seq, const Sink& sink) override {
    ++replay_calls;
    EXPECT_EQ(dp_rank, dp_rank_);
    if (fail_replays) return deadline_exceeded("replay timed out");
    for (const auto& [seq, payload] : buffered_) {
      if (seq >= from_seq) sink(seq, byte_span(payload));
    }
    return ok_status();
  }

  int replay_calls = 0;
  bool fail_replays = false;

 private:
  int64_t dp_rank_;
  size_t buffer_;
  uint64_t seq_ = 0;
  uint64_t next_block_ = 0;
  std::deque<std::pair<uint64_t, std::string>> buffered_;
};

class WorkerStreamTest : public ::testing::Test {
 protected:
  WorkerStreamTest() : index_(kv::KvIndex::Options{kStreamBs, 64}) {}

  std::unique_ptr<WorkerStream> make(ReplaySource* replay) {
    StreamOptions o;
    o.worker = kWorker;
    o.worker_name = "127.0.0.1:30000";
    return std::make_unique<WorkerStream>(index_, o, replay);
  }

  static void deliver(WorkerStream& s, const std::pair<uint64_t, std::string>& msg) {
    const std::string seq = be64(msg.first);
    s.on_message(byte_span(seq), byte_span(msg.second));
  }

  uint32_t hits(const std::vector<uint32_t>& tokens) {
    std::vector<uint32_t> out;
    index_.find_overlaps(kv::seq_hashes(tokens, kStreamBs), out);
    return out.at(kWorker);
  }

  // The mirror equals the engine's cache, block for block.
  void expect_mirror_equals(const FakeEngine& engine) {
    EXPECT_EQ(index_.block_count(kWorker), engine.cached_blocks());
    EXPECT_EQ(hits(engine.cached_tokens()), engine.cached_blocks());
  }

  kv::KvIndex index_;
};

TEST_F(WorkerStreamTest, InOrderMessagesApply) {
  FakeEngine engine;
  auto s = make(&engine);
  for (int i = 0; i < 5; ++i) deliver(*s, engine.step_store());
  expect_mirror_equals(engine);
  const StreamStats st = s->stats();
  EXPECT_EQ(st.messages, 5u);
  EXPECT_EQ(st.batches, 5u);
  EXPECT_EQ(st.applied.blocks_stored, 5u);
  EXPECT_EQ(st.last_seq(0), 4u);
  EXPECT_EQ(st.gaps, 0u);
  EXPECT_EQ(engine.replay_calls, 0);
  EXPECT_EQ(st.state, SubscriberState::kLive);
}

TEST_F(WorkerStreamTest, GapIsRepairedThroughReplayInOrder) {
  FakeEngine engine;
  auto s = make(&engine);
  deliver(*s, engine.step_store());
  engine.step_store();  // lost
  engine.step_store();  // lost
  deliver(*s, engine.step_store());
  expect_mirror_equals(engine);  // block 3's parent chain needed blocks 1 and 2 first
  const StreamStats st = s->stats();
  EXPECT_EQ(st.gaps, 1u);
  EXPECT_EQ(st.missed_batches, 2u);
  EXPECT_EQ(st.replays, 1u);
  EXPECT_EQ(st.replayed_batches, 2u);
  EXPECT_EQ(st.applied.rejected_total(), 0u);
  EXPECT_EQ(st.state, SubscriberState::kLive);
}

TEST_F(WorkerStreamTest, UnrepairableGapMakesTheMirrorStaleUntilACleanSlate) {
  FakeEngine engine(0, /*buffer=*/2);
  auto s = make(&engine);
  deliver(*s, engine.step_store());
  for (int i = 0; i < 5; ++i) engine.step_store();  // lost, and beyond the 2-batch buffer
  deliver(*s, engine.step_store());
  EXPECT_EQ(s->state(), SubscriberState::kStale);
  EXPECT_TRUE(index_.is_stale(kWorker));
  EXPECT_EQ(hits(engine.cached_tokens()), 0u);
  StreamStats st = s->stats();
  EXPECT_EQ(st.stale_transitions, 1u);
  EXPECT_EQ(st.replay_failures, 1u);

  deliver(*s, engine.step_store());  // still stale: its parent is unknown
  EXPECT_EQ(s->state(), SubscriberState::kStale);
  engine.step_store();               // another loss while stale: counted, not replayed
  const int replays_before = engine.replay_calls;
  deliver(*s, engine.step_store());
  EXPECT_EQ(engine.replay_calls, replays_before);
  EXPECT_EQ(s->stats().gaps, 2u);
  deliver(*s, engine.step_clear());  // /reset_prefix_cache: AllBlocksCleared
  EXPECT_EQ(s->state(), SubscriberState::kLive);
  EXPECT_FALSE(index_.is_stale(kWorker));
  for (int i = 0; i < 3; ++i) deliver(*s, engine.step_store());
  expect_mirror_equals(engine);
  st = s->stats();
  EXPECT_EQ(st.recoveries, 1u);
}

TEST_F(WorkerStreamTest, WithoutAReplaySourceEveryGapIsStale) {
  FakeEngine engine;
  auto s = make(nullptr);
  deliver(*s, engine.step_store());
  engine.step_store();
  deliver(*s, engine.step_store());
  EXPECT_EQ(s->state(), SubscriberState::kStale);
  EXPECT_EQ(s->stats().replay_failures, 1u);
}

TEST_F(WorkerStreamTest, FailedReplayMakesTheMirrorStale) {
  FakeEngine engine;
  auto s = make(&engine);
  deliver(*s, engine.step_store());
  engine.step_store();
  engine.fail_replays = true;
  deliver(*s, engine.step_store());
  EXPECT_EQ(s->state(), SubscriberState::kStale);
  // The mirror was dropped; the live batch chains on a block it no longer has: rejected.
  EXPECT_EQ(index_.block_count(kWorker), 0u);
  EXPECT_EQ(s->stats().applied.rejected[static_cast<size_t>(kv::ApplyResult::kUnknownParent)], 1u);
}

TEST_F(WorkerStreamTest, SequenceGoingBackwardsIsARestart) {
  FakeEngine engine;
  auto s = make(&engine);
  for (int i = 0; i < 4; ++i) deliver(*s, engine.step_store());
  FakeEngine restarted;  // a new engine life: empty cache, sequence from 0
  deliver(*s, restarted.step_store());
  deliver(*s, restarted.step_store());
  expect_mirror_equals(restarted);
  const StreamStats st = s->stats();
  EXPECT_EQ(st.restarts, 1u);
  EXPECT_EQ(st.state, SubscriberState::kLive);
}

TEST_F(WorkerStreamTest, RestartCatchesUpFromZeroWhenTheFirstBatchesWereMissed) {
  // One stream across two engine lives: replays go to whichever engine is current.
  struct Switch : ReplaySource {
    ReplaySource* current = nullptr;
    Status replay(int64_t r, uint64_t from, const Sink& sink) override {
      return current->replay(r, from, sink);
    }
  } sw;
  FakeEngine first;
  sw.current = &first;
  auto s = make(&sw);
  for (int i = 0; i < 6; ++i) deliver(*s, first.step_store());
  FakeEngine second;
  second.step_store();  // published before the subscriber reconnected
  second.step_store();
  sw.current = &second;
  deliver(*s, second.step_store());  // seq 2 <= 5: a restart, then replay of seq 0..1
  expect_mirror_equals(second);
  const StreamStats st = s->stats();
  EXPECT_EQ(st.restarts, 1u);
  EXPECT_EQ(st.replayed_batches, 2u);
  EXPECT_EQ(st.state, SubscriberState::kLive);
}

TEST_F(WorkerStreamTest, LiveCopiesOfWhatACatchUpAppliedAreDuplicatesNotARestart) {
  // A NATS reconnect: the router catches up 5..7 by replay, then the relay delivers its own
  // buffered copies of 5..7. They are skipped; 8 goes on live. A real restart later is still one.
  FakeEngine engine;
  auto s = make(&engine);
  for (int i = 0; i < 5; ++i) deliver(*s, engine.step_store());  // 0..4
  std::vector<std::pair<uint64_t, std::string>> buffered;
  for (int i = 0; i < 3; ++i) buffered.push_back(engine.step_store());  // 5..7, not delivered
  s->catch_up();
  expect_mirror_equals(engine);
  for (const auto& m : buffered) deliver(*s, m);
  expect_mirror_equals(engine);
  StreamStats st = s->stats();
  EXPECT_EQ(st.duplicates, 3u);
  EXPECT_EQ(st.restarts, 0u);
  deliver(*s, engine.step_store());  // 8
  expect_mirror_equals(engine);
  EXPECT_EQ(s->stats().restarts, 0u);
  // Past the catch-up, an older sequence is a restart again, even one it had replayed.
  deliver(*s, buffered[0]);
  EXPECT_EQ(s->stats().restarts, 1u);
  EXPECT_EQ(s->stats().duplicates, 3u);
}

TEST_F(WorkerStreamTest, NewPublisherIdInA24ByteFrameIsARestart) {
  struct Switch : ReplaySource {
    ReplaySource* current = nullptr;
    Status replay(int64_t r, uint64_t from, const Sink& sink) override {
      return current->replay(r, from, sink);
    }
  } sw;
  FakeEngine engine;
  sw.current = &engine;
  auto s = make(&sw);
  auto send24 = [&](const std::pair<uint64_t, std::string>& msg, char id) {
    std::string frame = be64(msg.first) + std::string(16, id);
    s->on_message(byte_span(frame), byte_span(msg.second));
  };
  send24(engine.step_store(), 'a');
  send24(engine.step_store(), 'a');
  EXPECT_EQ(s->stats().restarts, 0u);
  // The sequence continues (2 == last + 1) but the publisher id changed: a new engine life.
  FakeEngine other;
  other.step_store();
  other.step_store();
  sw.current = &other;
  send24(other.step_store(), 'b');
  EXPECT_EQ(s->stats().restarts, 1u);
  expect_mirror_equals(other);  // the old life's blocks are gone, the new one's caught up
}

// One stream across two engine lives: replays go to whichever engine is current.
struct SwitchReplay : ReplaySource {
  ReplaySource* current = nullptr;
  Status replay(int64_t r, uint64_t from, const Sink& sink) override {
    return current->replay(r, from, sink);
  }
};

TEST_F(WorkerStreamTest, ReconnectToANewLifeWhoseSequenceLooksLikeAContinuationIsARestart) {
  SwitchReplay sw;
  FakeEngine first;
  sw.current = &first;
  auto s = make(&sw);
  for (int i = 0; i < 6; ++i) deliver(*s, first.step_store());  // seq 0..5
  s->on_disconnected(0);
  // A fast restart: the new life published seq 0..6 before the subscriber reconnected.
  FakeEngine second;
  second.step_clear();
  for (int i = 0; i < 6; ++i) second.step_store();
  sw.current = &second;
  s->on_reconnected(0);  // its seq 5 is not the batch we applied as seq 5
  EXPECT_EQ(s->stats().restarts, 1u);
  EXPECT_EQ(index_.block_count(kWorker), 0u);  // the old life's blocks are gone at once
  deliver(*s, second.step_store());  // seq 7 == last + 2: joins again from seq 0, no gap
  expect_mirror_equals(second);
  const StreamStats st = s->stats();
  EXPECT_EQ(st.restarts, 1u);
  EXPECT_EQ(st.gaps, 0u);
  EXPECT_EQ(st.state, SubscriberState::kLive);
}

TEST_F(WorkerStreamTest, ReconnectToTheSameLifeKeepsTheMirrorAndRepairsTheGap) {
  FakeEngine engine;
  auto s = make(&engine);
  for (int i = 0; i < 4; ++i) deliver(*s, engine.step_store());
  s->on_disconnected(0);
  engine.step_store();  // lost while disconnected
  s->on_reconnected(0);
  EXPECT_EQ(s->stats().restarts, 0u);
  deliver(*s, engine.step_store());
  expect_mirror_equals(engine);
  const StreamStats st = s->stats();
  EXPECT_EQ(st.restarts, 0u);
  EXPECT_EQ(st.gaps, 1u);
  EXPECT_EQ(st.replay_failures, 0u);
  EXPECT_EQ(engine.replay_calls, 2);  // the check, then the gap
}

TEST_F(WorkerStreamTest, ReconnectThatCannotBeVerifiedIsAConservativeRestart) {
  FakeEngine engine;
  auto s = make(&engine);
  for (int i = 0; i < 3; ++i) deliver(*s, engine.step_store());
  engine.fail_replays = true;  // no answer: the engine's life cannot be told
  s->on_disconnected(0);
  s->on_reconnected(0);
  EXPECT_EQ(s->stats().restarts, 1u);
  EXPECT_EQ(index_.block_count(kWorker), 0u);
  // A second reconnect without a new disconnect changes nothing.
  s->on_reconnected(0);
  EXPECT_EQ(s->stats().restarts, 1u);
}

TEST_F(WorkerStreamTest, ReconnectWithoutAReplayEndpointIsAConservativeRestart) {
  FakeEngine engine;
  auto s = make(nullptr);
  for (int i = 0; i < 3; ++i) deliver(*s, engine.step_store());
  s->on_disconnected(0);
  s->on_reconnected(0);
  EXPECT_EQ(s->stats().restarts, 1u);
  EXPECT_EQ(index_.block_count(kWorker), 0u);
  // The rebuild starts from the next message; a clean slate makes the mirror whole again.
  deliver(*s, engine.step_clear());
  deliver(*s, engine.step_store());
  expect_mirror_equals(engine);
  EXPECT_EQ(s->stats().state, SubscriberState::kLive);
}

TEST_F(WorkerStreamTest, FirstMessageAfterZeroCatchesUpFromTheBuffer) {
  FakeEngine engine;
  for (int i = 0; i < 3; ++i) engine.step_store();  // sent before the subscription took effect
  auto s = make(&engine);
  deliver(*s, engine.step_store());
  expect_mirror_equals(engine);
  EXPECT_EQ(s->stats().replayed_batches, 3u);
  EXPECT_EQ(s->stats().partial_joins, 0u);
  EXPECT_EQ(s->state(), SubscriberState::kLive);
}

TEST_F(WorkerStreamTest, JoiningALongRunningEngineIsPartialNotStale) {
  FakeEngine engine(0, /*buffer=*/2);
  for (int i = 0; i < 10; ++i) engine.step_store();
  auto s = make(&engine);
  deliver(*s, engine.step_store());
  EXPECT_EQ(s->state(), SubscriberState::kLive);
  EXPECT_EQ(s->stats().partial_joins, 1u);
}

TEST_F(WorkerStreamTest, MalformedMessagesAreCountedAndDoNotBreakTheSequence) {
  FakeEngine engine;
  auto s = make(&engine);
  deliver(*s, engine.step_store());
  const std::string short_seq = "\x01\x02";
  s->on_message(byte_span(short_seq), byte_span(std::string("x")));
  // An undecodable payload with the next sequence number: counted, and it consumes seq 1.
  engine.step_store();
  const std::string seq1 = be64(1);
  s->on_message(byte_span(seq1), byte_span(std::string("\x92\xc1\x90", 3)));
  deliver(*s, engine.step_store());  // seq 2: no gap
  StreamStats st = s->stats();
  EXPECT_EQ(st.message_errors[static_cast<size_t>(MessageError::kSequenceFrame)], 1u);
  EXPECT_EQ(st.decode_errors[static_cast<size_t>(DecodeError::kInvalidByte)], 1u);
  EXPECT_EQ(st.gaps, 0u);
  // Block 2's parent (block 1) was in the undecodable batch: the index rejects it as a resync
  // signal, counted by reason.
  EXPECT_EQ(st.applied.rejected[static_cast<size_t>(kv::ApplyResult::kUnknownParent)], 1u);
}

TEST_F(WorkerStreamTest, DataParallelRanksHaveTheirOwnSequences) {
  FakeEngine rank0(0);
  FakeEngine rank1(1);
  auto s = make(&rank0);
  deliver(*s, rank0.step_store());
  deliver(*s, rank1.publish({AllBlocksCleared{}}));  // rank 1 seq 0
  deliver(*s, rank0.step_store());                   // rank 0 seq 1: no gap, no restart
  deliver(*s, rank1.publish({AllBlocksCleared{}}));  // rank 1 seq 1
  const StreamStats st = s->stats();
  EXPECT_EQ(st.gaps, 0u);
  EXPECT_EQ(st.restarts, 0u);
  EXPECT_EQ(st.last_seq(0), 1u);
  EXPECT_EQ(st.last_seq(1), 1u);
}

TEST_F(WorkerStreamTest, TooManyRanksAreRejected) {
  StreamOptions o;
  o.worker = kWorker;
  o.max_ranks = 2;
  WorkerStream s(index_, o, nullptr);
  for (int64_t r = 0; r < 3; ++r) {
    FakeEngine e(r);
    deliver(s, e.publish({AllBlocksCleared{}}));
  }
  EXPECT_EQ(s.stats().message_errors[static_cast<size_t>(MessageError::kTooManyRanks)], 1u);
}

// --- snapshot() / seed(): a booting router replica starts from a sibling's mirror ---

class SeededStreamTest : public WorkerStreamTest {
 protected:
  SeededStreamTest() : fresh_(kv::KvIndex::Options{kStreamBs, 64}) {}

  std::unique_ptr<WorkerStream> make_fresh(ReplaySource* replay) {
    StreamOptions o;
    o.worker = kWorker;
    o.worker_name = "127.0.0.1:30000";
    return std::make_unique<WorkerStream>(fresh_, o, replay);
  }

  // Both indexes hold the same blocks for the worker and answer `tokens` alike.
  ::testing::AssertionResult same_mirror(const std::vector<uint32_t>& tokens) {
    std::vector<uint32_t> a, b;
    index_.find_overlaps(kv::seq_hashes(tokens, kStreamBs), a);
    fresh_.find_overlaps(kv::seq_hashes(tokens, kStreamBs), b);
    const uint64_t ca = index_.block_count(kWorker), cb = fresh_.block_count(kWorker);
    if (a.at(kWorker) == b.at(kWorker) && ca == cb) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "hits " << a.at(kWorker) << " vs " << b.at(kWorker)
                                         << ", blocks " << ca << " vs " << cb;
  }

  kv::KvIndex fresh_;  // the booting replica's index
};

TEST_F(SeededStreamTest, SeededStreamRepairsTheGapByReplayFromTheSnapshotsLastSequence) {
  FakeEngine engine(0, /*buffer=*/3);  // after seq 12 it holds 10..12 only
  auto s = make(&engine);
  for (int i = 0; i < 10; ++i) deliver(*s, engine.step_store());  // seq 0..9
  const StreamSnapshot snap = s->snapshot();
  ASSERT_FALSE(snap.stale);
  ASSERT_EQ(snap.ranks.size(), 1u);
  EXPECT_EQ(snap.ranks[0].last, 9u);
  EXPECT_EQ(snap.dump.gpu.size(), 10u);
  // 10..11: the new replica misses them.
  for (int i = 0; i < 2; ++i) deliver(*s, engine.step_store());
  const auto live = engine.step_store();  // 12
  deliver(*s, live);

  auto seeded = make_fresh(&engine);
  ASSERT_TRUE(seeded->seed(snap));
  deliver(*seeded, live);
  EXPECT_TRUE(same_mirror(engine.cached_tokens()));
  EXPECT_EQ(fresh_.block_count(kWorker), 13u);
  const StreamStats st = seeded->stats();
  EXPECT_EQ(st.gaps, 1u);
  EXPECT_EQ(st.replayed_batches, 2u);  // 10..11, not from seq 0
  EXPECT_EQ(st.restarts, 0u);
  EXPECT_EQ(st.last_seq(0), 12u);
  EXPECT_EQ(st.state, SubscriberState::kLive);
}

TEST_F(SeededStreamTest, NextSequenceAfterSeedingAppliesWithoutReplay) {
  FakeEngine engine;
  auto s = make(&engine);
  for (int i = 0; i < 4; ++i) deliver(*s, engine.step_store());
  auto seeded = make_fresh(&engine);
  ASSERT_TRUE(seeded->seed(s->snapshot()));
  EXPECT_EQ(seeded->stats().last_seq(0), 3u);
  const auto next = engine.step_store();
  deliver(*s, next);
  deliver(*seeded, next);
  EXPECT_TRUE(same_mirror(engine.cached_tokens()));
  EXPECT_EQ(fresh_.block_count(kWorker), 5u);
  EXPECT_EQ(engine.replay_calls, 0);
  EXPECT_EQ(seeded->stats().gaps, 0u);
}

TEST_F(SeededStreamTest, TheLearnedMainGroupTravelsWithTheSnapshot) {
  // A hybrid model: group 0 full attention (the mirror's), group 1 a sliding window that drops
  // its copy early. The seeded stream knows group 0 from the copy, so the window's removal that
  // arrives first leaves the mirror alone, as it does on the sibling.
  FakeEngine engine;
  auto s = make(&engine);
  BlockStored full;
  full.block_hashes = {7000};
  for (uint32_t i = 0; i < kStreamBs; ++i) full.token_ids.push_back(900 + i);
  full.block_size = kStreamBs;
  full.medium = "GPU";
  full.group_idx = 0;
  full.kv_cache_spec_kind = "full_attention";
  deliver(*s, engine.publish({full}));
  const StreamSnapshot snap = s->snapshot();
  EXPECT_EQ(snap.main_group, std::optional<int64_t>(0));
  auto seeded = make_fresh(&engine);
  ASSERT_TRUE(seeded->seed(snap));
  BlockRemoved window;
  window.block_hashes = {7000};
  window.medium = "GPU";
  window.group_idx = 1;
  const auto removal = engine.publish({window});
  deliver(*s, removal);
  deliver(*seeded, removal);
  EXPECT_EQ(fresh_.block_count(kWorker), 1u);
  EXPECT_TRUE(same_mirror(full.token_ids));
}

TEST_F(SeededStreamTest, SequenceAtOrBelowTheSnapshotsLastIsARestart) {
  FakeEngine first;
  auto s = make(&first);
  for (int i = 0; i < 8; ++i) deliver(*s, first.step_store());  // seq 0..7
  const StreamSnapshot snap = s->snapshot();
  FakeEngine second;  // the engine restarted before the new replica subscribed
  for (int i = 0; i < 3; ++i) second.step_store();
  auto seeded = make_fresh(&second);
  ASSERT_TRUE(seeded->seed(snap));
  ASSERT_EQ(fresh_.block_count(kWorker), 8u);
  deliver(*seeded, second.step_store());  // seq 3 <= 7: the old life's blocks go
  EXPECT_EQ(seeded->stats().restarts, 1u);
  EXPECT_EQ(fresh_.block_count(kWorker), second.cached_blocks());
  std::vector<uint32_t> out;
  fresh_.find_overlaps(kv::seq_hashes(second.cached_tokens(), kStreamBs), out);
  EXPECT_EQ(out.at(kWorker), 4u);  // seq 0..2 caught up by replay, 3 live
}

TEST_F(SeededStreamTest, AnotherPublisherIdAfterSeedingIsARestart) {
  SwitchReplay sw;
  FakeEngine engine;
  sw.current = &engine;
  auto s = make(&sw);
  auto send24 = [](WorkerStream& to, const std::pair<uint64_t, std::string>& msg, char id) {
    const std::string frame = be64(msg.first) + std::string(16, id);
    to.on_message(byte_span(frame), byte_span(msg.second));
  };
  for (int i = 0; i < 3; ++i) send24(*s, engine.step_store(), 'a');
  const StreamSnapshot snap = s->snapshot();
  ASSERT_EQ(snap.ranks.size(), 1u);
  EXPECT_TRUE(snap.ranks[0].has_id);
  EXPECT_EQ(snap.ranks[0].publisher_id[0], 'a');
  FakeEngine other;  // a new life that got as far: seq 3 == last + 1, but another id
  for (int i = 0; i < 3; ++i) other.step_store();
  sw.current = &other;
  auto seeded = make_fresh(&sw);
  ASSERT_TRUE(seeded->seed(snap));
  send24(*seeded, other.step_store(), 'b');
  EXPECT_EQ(seeded->stats().restarts, 1u);
  std::vector<uint32_t> out;
  fresh_.find_overlaps(kv::seq_hashes(other.cached_tokens(), kStreamBs), out);
  EXPECT_EQ(out.at(kWorker), other.cached_blocks());
  EXPECT_EQ(fresh_.block_count(kWorker), other.cached_blocks());
}

TEST_F(SeededStreamTest, SeedingAfterAMessageIsRefusedAndChangesNothing) {
  FakeEngine engine;
  auto s = make(&engine);
  for (int i = 0; i < 3; ++i) deliver(*s, engine.step_store());
  const StreamSnapshot snap = s->snapshot();
  FakeEngine own;
  auto late = make_fresh(&own);
  deliver(*late, own.publish({AllBlocksCleared{}}));
  EXPECT_FALSE(late->seed(snap));
  EXPECT_EQ(fresh_.block_count(kWorker), 0u);
  EXPECT_EQ(late->stats().last_seq(0), 0u);
}

TEST_F(SeededStreamTest, StaleSnapshotIsNotSeededAndTheStreamJoinsFromZero) {
  FakeEngine engine;
  auto s = make(nullptr);  // no replay endpoint: the gap makes the mirror stale
  deliver(*s, engine.step_store());
  engine.step_store();
  deliver(*s, engine.step_store());
  ASSERT_EQ(s->state(), SubscriberState::kStale);
  const StreamSnapshot snap = s->snapshot();
  EXPECT_TRUE(snap.stale);
  EXPECT_EQ(snap.dump.size(), 0u);

  auto joined = make_fresh(&engine);
  EXPECT_FALSE(joined->seed(snap));
  deliver(*joined, engine.step_store());  // seq 3: catches up 0..2 through replay, as today
  EXPECT_EQ(joined->stats().replayed_batches, 3u);
  EXPECT_EQ(fresh_.block_count(kWorker), 4u);
  EXPECT_EQ(joined->state(), SubscriberState::kLive);
}

TEST_F(SeededStreamTest, SnapshotWhileAnotherThreadFeedsIsConsistent) {
  // The feeder applies seq 0..N-1, one block each (blocks 1000 + seq), while this thread takes
  // snapshots: whatever the interleaving, a snapshot's dump holds exactly the blocks of the
  // batches up to its rank's `last`.
  FakeEngine engine;
  constexpr int kMessages = 2000;
  std::vector<std::pair<uint64_t, std::string>> msgs;
  for (int i = 0; i < kMessages; ++i) msgs.push_back(engine.step_store());
  auto s = make(&engine);
  std::atomic<bool> done{false};
  std::thread feeder([&] {
    for (const auto& m : msgs) deliver(*s, m);
    done.store(true, std::memory_order_release);
  });
  std::vector<StreamSnapshot> taken;
  auto check = [&](const StreamSnapshot& snap) {
    ASSERT_FALSE(snap.stale);
    if (snap.ranks.empty()) {
      ASSERT_EQ(snap.dump.size(), 0u);
      return;
    }
    ASSERT_EQ(snap.ranks.size(), 1u);
    const uint64_t last = snap.ranks[0].last;
    ASSERT_EQ(snap.dump.gpu.size(), last + 1);
    std::vector<uint64_t> engines;
    for (const auto& e : snap.dump.gpu) engines.push_back(e.engine);
    std::sort(engines.begin(), engines.end());
    for (uint64_t i = 0; i <= last; ++i) ASSERT_EQ(engines[i], 1000 + i);
  };
  while (!done.load(std::memory_order_acquire)) {
    taken.push_back(s->snapshot());
    check(taken.back());
    if (HasFatalFailure()) break;
  }
  feeder.join();
  taken.push_back(s->snapshot());
  check(taken.back());
  EXPECT_EQ(taken.back().ranks.at(0).last, static_cast<uint64_t>(kMessages - 1));
  // A replica seeded from any of them, fed what followed live, ends where the original is.
  const StreamSnapshot& mid = taken[taken.size() / 2];
  auto seeded = make_fresh(&engine);
  ASSERT_TRUE(seeded->seed(mid));
  const uint64_t from = mid.ranks.empty() ? 0 : mid.ranks[0].last + 1;
  for (uint64_t seq = from; seq < msgs.size(); ++seq) deliver(*seeded, msgs[seq]);
  EXPECT_TRUE(same_mirror(engine.cached_tokens()));
  EXPECT_EQ(seeded->stats().gaps, 0u);
}

}  // namespace
}  // namespace infera::events
