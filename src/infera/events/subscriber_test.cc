// Real sockets on loopback: the C++ publisher against the C++ subscriber and listener, and raw
// ZeroMQ sockets that send malformed messages. Ports are chosen by ZeroMQ (tcp://127.0.0.1:*).
#include "infera/events/subscriber.h"

#include <gtest/gtest.h>

#include <zmq.hpp>

#include "infera/events/encoder.h"
#include "infera/events/endpoint.h"
#include "infera/events/events_test_util.h"
#include "infera/events/msgpack.h"
#include "infera/events/publisher.h"
#include "infera/events/zmq_io.h"

namespace infera::events {
namespace {

using testing::mirror_equals;
using testing::ToyEngine;
using testing::wait_until;
using namespace std::chrono_literals;

constexpr kv::WorkerId kWorker = 2;

std::unique_ptr<KvEventPublisher> start_publisher(std::string endpoint = "tcp://127.0.0.1:*",
                                                  std::string replay = "tcp://127.0.0.1:*",
                                                  size_t buffer_steps = 10000,
                                                  std::shared_ptr<ZmqContext> ctx = nullptr,
                                                  int64_t rank = 0) {
  KvEventPublisher::Options o;
  o.endpoint = std::move(endpoint);
  o.replay_endpoint = std::move(replay);
  o.topic = "kv-events";
  o.buffer_steps = buffer_steps;
  o.data_parallel_rank = rank;
  auto p = KvEventPublisher::start(o, std::move(ctx));
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(p).value() : nullptr;
}

SubscriberConfig config_for(const KvEventPublisher& pub) {
  SubscriberConfig c;
  c.worker = kWorker;
  c.worker_name = "127.0.0.1:30000";
  c.endpoint = pub.endpoint();
  c.replay_endpoint = pub.replay_endpoint();
  c.topic = "kv-events";
  c.replay_timeout = 2s;
  return c;
}

class SubscriberTest : public ::testing::Test {
 protected:
  SubscriberTest() : index_(kv::KvIndex::Options{ToyEngine::kBlockSize, 64}) {}

  // Waits until the subscriber has applied everything up to `seq`.
  bool caught_up(const KvEventSubscriber& sub, uint64_t seq) {
    return wait_until([&] { return sub.stats().last_seq(0) == seq; });
  }

  kv::KvIndex index_;
};

TEST_F(SubscriberTest, CppPublisherToSubscriberMirrorsTheCache) {
  auto pub = start_publisher();
  ASSERT_TRUE(pub);
  KvEventSubscriber sub(index_, config_for(*pub));
  ASSERT_TRUE(sub.start().ok());
  ASSERT_TRUE(pub->wait_for_subscriber(5s));
  ToyEngine engine(1);
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(pub->publish(engine.step()).ok());
  ASSERT_TRUE(caught_up(sub, 199));
  EXPECT_TRUE(mirror_equals(index_, kWorker, engine));
  const StreamStats st = sub.stats();
  EXPECT_EQ(st.state, SubscriberState::kLive);
  EXPECT_EQ(st.batches, 200u);
  EXPECT_EQ(st.applied.rejected_total(), 0u);
  EXPECT_EQ(st.decode_errors_total() + st.message_errors_total(), 0u);
}

TEST_F(SubscriberTest, LostMessagesAreReplayed) {
  auto pub = start_publisher();
  ASSERT_TRUE(pub);
  KvEventSubscriber sub(index_, config_for(*pub));
  ASSERT_TRUE(sub.start().ok());
  ASSERT_TRUE(pub->wait_for_subscriber(5s));
  ToyEngine engine(2);
  for (int i = 0; i < 300; ++i) {
    const EventBatch b = engine.step();
    // Every 7th batch is lost on the way (but buffered for replay), sometimes 3 in a row.
    const bool lost = i % 7 == 3 || (i >= 100 && i < 103);
    ASSERT_TRUE((lost ? pub->publish_replay_only(b) : pub->publish(b)).ok());
  }
  ASSERT_TRUE(caught_up(sub, 299));
  EXPECT_TRUE(mirror_equals(index_, kWorker, engine));
  const StreamStats st = sub.stats();
  EXPECT_EQ(st.state, SubscriberState::kLive);
  EXPECT_GE(st.gaps, 40u);
  EXPECT_EQ(st.replayed_batches, st.missed_batches);
  EXPECT_EQ(st.replay_failures, 0u);
  EXPECT_EQ(st.applied.rejected_total(), 0u);
  EXPECT_EQ(pub->replays_served(), st.replays);
}

TEST_F(SubscriberTest, OverflowedReplayBufferMakesTheWorkerStaleUntilCleared) {
  auto pub = start_publisher("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", /*buffer_steps=*/8);
  ASSERT_TRUE(pub);
  KvEventSubscriber sub(index_, config_for(*pub));
  ASSERT_TRUE(sub.start().ok());
  ASSERT_TRUE(pub->wait_for_subscriber(5s));
  ToyEngine engine(3);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(pub->publish(engine.step()).ok());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(pub->publish_replay_only(engine.step()).ok());
  ASSERT_TRUE(pub->publish(engine.step()).ok());  // seq 40: a gap of 20 > the 8-batch buffer
  ASSERT_TRUE(caught_up(sub, 40));
  EXPECT_EQ(sub.state(), SubscriberState::kStale);
  EXPECT_TRUE(index_.is_stale(kWorker));
  std::vector<uint32_t> hits;
  for (const auto& path : engine.leaf_paths()) {
    index_.find_overlaps(kv::seq_hashes(path, ToyEngine::kBlockSize), hits);
    EXPECT_EQ(hits.at(kWorker), 0u);  // stale: not trusted
  }
  EXPECT_EQ(sub.stats().stale_transitions, 1u);

  ASSERT_TRUE(pub->publish(engine.clear()).ok());  // /reset_prefix_cache
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(pub->publish(engine.step()).ok());
  ASSERT_TRUE(caught_up(sub, 71));
  EXPECT_EQ(sub.state(), SubscriberState::kLive);
  EXPECT_TRUE(mirror_equals(index_, kWorker, engine));
  EXPECT_EQ(sub.stats().recoveries, 1u);
}

TEST_F(SubscriberTest, PublisherRestartRebuildsTheMirror) {
  auto pub = start_publisher();
  ASSERT_TRUE(pub);
  const SubscriberConfig cfg = config_for(*pub);
  KvEventSubscriber sub(index_, cfg);
  ASSERT_TRUE(sub.start().ok());
  ASSERT_TRUE(pub->wait_for_subscriber(5s));
  ToyEngine engine(4);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(pub->publish(engine.step()).ok());
  ASSERT_TRUE(caught_up(sub, 99));
  pub.reset();  // the engine process dies

  // A new engine life on the same endpoints: empty cache, sequence from 0.
  std::unique_ptr<KvEventPublisher> again;
  ASSERT_TRUE(wait_until([&] {
    KvEventPublisher::Options o;
    o.endpoint = cfg.endpoint;  // the resolved tcp://127.0.0.1:PORT of the first life
    o.bind = true;              // vLLM's rule would connect to an address without '*'
    o.replay_endpoint = cfg.replay_endpoint;
    o.topic = "kv-events";
    auto p = KvEventPublisher::start(o);
    if (p.ok()) again = std::move(p).value();
    return again != nullptr;
  }));
  ASSERT_TRUE(again->wait_for_subscriber(5s));
  ToyEngine fresh(5);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(again->publish(fresh.step()).ok());
  ASSERT_TRUE(caught_up(sub, 29));
  EXPECT_TRUE(mirror_equals(index_, kWorker, fresh));
  const StreamStats st = sub.stats();
  EXPECT_EQ(st.restarts, 1u);
  EXPECT_EQ(st.state, SubscriberState::kLive);
}

// A fast restart: the new engine life publishes past the old one's last sequence before the
// subscriber has reconnected, so its first live batch looks like a continuation (or a gap) and
// only the reconnect tells that the engine may have changed.
TEST_F(SubscriberTest, FastRestartWhoseSequenceLooksLikeAContinuationRebuildsTheMirror) {
  auto pub = start_publisher();
  ASSERT_TRUE(pub);
  const SubscriberConfig cfg = config_for(*pub);
  KvEventSubscriber sub(index_, cfg);
  ASSERT_TRUE(sub.start().ok());
  ASSERT_TRUE(pub->wait_for_subscriber(5s));
  ToyEngine old_life(21);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(pub->publish(old_life.step()).ok());
  ASSERT_TRUE(caught_up(sub, 49));
  ASSERT_TRUE(mirror_equals(index_, kWorker, old_life));
  pub.reset();  // SIGKILL

  // The new life binds the same endpoints and publishes seq 0..79 at once, without waiting
  // for the subscriber: what it misses is what a real fast restart misses.
  std::unique_ptr<KvEventPublisher> again;
  ASSERT_TRUE(wait_until([&] {
    KvEventPublisher::Options o;
    o.endpoint = cfg.endpoint;
    o.bind = true;
    o.replay_endpoint = cfg.replay_endpoint;
    o.topic = "kv-events";
    auto p = KvEventPublisher::start(o);
    if (p.ok()) again = std::move(p).value();
    return again != nullptr;
  }));
  ToyEngine new_life(22);
  for (int i = 0; i < 80; ++i) ASSERT_TRUE(again->publish(new_life.step()).ok());
  ASSERT_TRUE(again->wait_for_subscriber(5s));
  for (int i = 80; i < 100; ++i) ASSERT_TRUE(again->publish(new_life.step()).ok());
  ASSERT_TRUE(caught_up(sub, 99));
  EXPECT_TRUE(mirror_equals(index_, kWorker, new_life));  // exactly the new life's blocks
  const StreamStats st = sub.stats();
  EXPECT_EQ(st.restarts, 1u);
  EXPECT_EQ(st.state, SubscriberState::kLive);
  EXPECT_EQ(st.applied.rejected_total(), 0u);
}

// A connection that drops and comes back to the same engine life keeps the mirror.
TEST_F(SubscriberTest, ReconnectToTheSameEngineIsNotARestart) {
  // A hand-driven relay between the engine and the subscriber: closing and binding again the
  // relay's socket cuts the subscriber's connection while the engine (and its replay buffer)
  // lives on.
  auto pub = start_publisher();
  ASSERT_TRUE(pub);
  zmq::context_t ctx;
  auto make_relay = [&](const std::string& endpoint) {
    auto relay = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::xpub);
    relay->set(zmq::sockopt::linger, 0);
    relay->bind(endpoint);
    return relay;
  };
  auto relay = make_relay("tcp://127.0.0.1:*");
  const std::string relay_endpoint = relay->get(zmq::sockopt::last_endpoint);
  zmq::socket_t upstream(ctx, zmq::socket_type::sub);
  upstream.set(zmq::sockopt::linger, 0);
  upstream.set(zmq::sockopt::subscribe, "");
  upstream.connect(pub->endpoint());
  ASSERT_TRUE(pub->wait_for_subscriber(5s));

  SubscriberConfig cfg = config_for(*pub);
  cfg.endpoint = relay_endpoint;
  KvEventSubscriber sub(index_, cfg);
  ASSERT_TRUE(sub.start().ok());
  zmq::message_t subscription;
  ASSERT_TRUE(relay->recv(subscription));
  // Forwards what the engine has sent so far.
  auto forward = [&](uint64_t through) {
    std::array<zmq::message_t, 4> frames;
    uint64_t seq = 0;
    do {
      if (!wait_readable(upstream, 5s)) return false;
      const size_t n = recv_message(upstream, frames);
      if (n != 3) return false;
      seq = load_be(static_cast<const uint8_t*>(frames[1].data()), 8);
      relay->send(frames[0], zmq::send_flags::sndmore);
      relay->send(frames[1], zmq::send_flags::sndmore);
      relay->send(frames[2], zmq::send_flags::none);
    } while (seq < through);
    return true;
  };
  ToyEngine engine(23);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(pub->publish(engine.step()).ok());
  ASSERT_TRUE(forward(29));
  ASSERT_TRUE(caught_up(sub, 29));

  relay.reset();  // the connection drops; the engine lives on and publishes 30..39 meanwhile
  for (int i = 30; i < 40; ++i) ASSERT_TRUE(pub->publish(engine.step()).ok());
  ASSERT_TRUE(wait_until([&] {
    try {
      relay = make_relay(relay_endpoint);
      return true;
    } catch (const zmq::error_t&) {
      return false;
    }
  }));
  ASSERT_TRUE(relay->recv(subscription));  // reconnected
  ASSERT_TRUE(forward(39));  // 30..39 arrive as a continuation from the same life
  for (int i = 40; i < 50; ++i) ASSERT_TRUE(pub->publish(engine.step()).ok());
  ASSERT_TRUE(forward(49));
  ASSERT_TRUE(caught_up(sub, 49));
  EXPECT_TRUE(mirror_equals(index_, kWorker, engine));
  const StreamStats st = sub.stats();
  EXPECT_EQ(st.restarts, 0u);
  EXPECT_EQ(st.state, SubscriberState::kLive);
  EXPECT_GE(st.replays, 1u);  // the incarnation check
}

TEST_F(SubscriberTest, MalformedMessagesAreSkippedAndCountedAndTheSubscriberKeepsRunning) {
  zmq::context_t ctx;
  zmq::socket_t pub(ctx, zmq::socket_type::xpub);
  pub.set(zmq::sockopt::linger, 0);
  pub.bind("tcp://127.0.0.1:*");
  SubscriberConfig cfg;
  cfg.worker = kWorker;
  cfg.endpoint = pub.get(zmq::sockopt::last_endpoint);
  cfg.topic = "kv";
  KvEventSubscriber sub(index_, cfg);
  ASSERT_TRUE(sub.start().ok());
  zmq::message_t subscription;
  ASSERT_TRUE(pub.recv(subscription));  // the subscription has arrived: sends are not lost

  auto send = [&](std::vector<std::string> frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      pub.send(zmq::buffer(frames[i]),
               i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  };
  uint64_t seq = 0;
  auto good = [&](const EventBatch& b) { send({"kv", sequence_frame(seq++), encode_batch(b)}); };
  ToyEngine engine(6);
  good(engine.step());
  send({"kv"});                                                  // 1 frame
  send({"kv", sequence_frame(seq)});                             // 2 frames
  send({"kv", sequence_frame(seq), "x", "extra"});               // 4 frames
  send({"kv", "\x01\x02\x03\x04", encode_batch(engine.clear())}); // short sequence frame
  const std::string valid = encode_batch(engine.step());
  send({"kv", sequence_frame(seq++), valid.substr(0, valid.size() / 2)});  // truncated
  send({"kv", sequence_frame(seq++), "\xc1\xc1\xc1"});                      // garbage
  send({"kv", sequence_frame(seq++), std::string("\x92\xa2hi\x90", 5)});    // ts of the wrong type
  send({"kv", sequence_frame(seq++),
        std::string("\x92\xcb\0\0\0\0\0\0\0\0\xdd\xff\xff\xff\xff", 15)});  // huge declared list
  std::string deep;
  MsgpackWriter w(deep);
  w.array(2);
  w.uint(0);
  w.array(1);
  w.map(3);
  w.str("type");
  w.str("BlockRemoved");
  w.str("block_hashes");
  w.array(0);
  w.str("future_field");
  for (int i = 0; i < 10000; ++i) w.array(1);
  w.nil();
  send({"kv", sequence_frame(seq++), deep});  // deep nesting in an unknown field
  // The engine state the test mirrors: a fresh one, cleared and stored after the junk.
  ToyEngine after(7);
  good(after.clear());
  for (int i = 0; i < 20; ++i) good(after.step());
  ASSERT_TRUE(wait_until([&] { return sub.stats().last_seq(0) == seq - 1; }));

  const StreamStats st = sub.stats();
  EXPECT_EQ(st.message_errors[static_cast<size_t>(MessageError::kFrameCount)], 3u);
  EXPECT_EQ(st.message_errors[static_cast<size_t>(MessageError::kSequenceFrame)], 1u);
  EXPECT_EQ(st.decode_errors[static_cast<size_t>(DecodeError::kTruncated)], 1u);
  EXPECT_EQ(st.decode_errors[static_cast<size_t>(DecodeError::kInvalidByte)], 1u);
  EXPECT_EQ(st.decode_errors[static_cast<size_t>(DecodeError::kWrongType)], 1u);
  EXPECT_EQ(st.decode_errors[static_cast<size_t>(DecodeError::kTooLarge)], 1u);
  EXPECT_EQ(st.decode_errors[static_cast<size_t>(DecodeError::kTooDeep)], 1u);
  EXPECT_EQ(st.gaps, 0u);  // undecodable payloads still consumed their sequence numbers
  EXPECT_EQ(st.state, SubscriberState::kLive);
  EXPECT_TRUE(mirror_equals(index_, kWorker, after));
}

// A publisher whose replay service accepts requests and never answers.
class SilentReplayTest : public SubscriberTest {
 protected:
  SilentReplayTest() : pub_(ctx_, zmq::socket_type::xpub), router_(ctx_, zmq::socket_type::router) {
    pub_.set(zmq::sockopt::linger, 0);
    pub_.bind("tcp://127.0.0.1:*");
    router_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
  }

  std::unique_ptr<KvEventSubscriber> start(Nanos replay_timeout) {
    SubscriberConfig cfg;
    cfg.worker = kWorker;
    cfg.endpoint = pub_.get(zmq::sockopt::last_endpoint);
    cfg.replay_endpoint = router_.get(zmq::sockopt::last_endpoint);
    cfg.replay_timeout = replay_timeout;
    auto sub = std::make_unique<KvEventSubscriber>(index_, cfg);
    EXPECT_TRUE(sub->start().ok());
    zmq::message_t subscription;
    EXPECT_TRUE(pub_.recv(subscription));
    return sub;
  }

  void send(uint64_t seq, const EventBatch& b) {
    const std::string s = sequence_frame(seq);
    const std::string p = encode_batch(b);
    pub_.send(zmq::buffer(std::string()), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(s), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(p), zmq::send_flags::none);
  }

  zmq::context_t ctx_;
  zmq::socket_t pub_;
  zmq::socket_t router_;
  ToyEngine engine_{8};
};

TEST_F(SilentReplayTest, UnansweredReplayTimesOutAndTheWorkerGoesStale) {
  auto sub = start(300ms);
  send(0, engine_.step());
  send(5, engine_.step());  // a gap: the replay request goes unanswered
  ASSERT_TRUE(wait_until([&] { return sub->state() == SubscriberState::kStale; }));
  EXPECT_EQ(sub->stats().replay_failures, 1u);
  zmq::message_t request;
  EXPECT_TRUE(router_.recv(request, zmq::recv_flags::dontwait));  // it did ask
  // The subscriber keeps running: later messages are applied (to the stale mirror).
  send(6, engine_.step());
  ASSERT_TRUE(wait_until([&] { return sub->stats().last_seq(0) == 6u; }));
}

TEST_F(SilentReplayTest, StopIsPromptDuringAReplay) {
  auto sub = start(30s);
  send(0, engine_.step());
  send(9, engine_.step());  // the thread now waits up to 30 s for the replay
  ASSERT_TRUE(wait_until([&] { return sub->stats().replays == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  sub->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 250ms);
  EXPECT_EQ(sub->state(), SubscriberState::kStopped);
  EXPECT_EQ(sub->stats().stale_transitions, 0u);  // stopping is not a lost gap
}

TEST_F(SubscriberTest, InvalidEndpointIsAStartError) {
  SubscriberConfig cfg;
  cfg.worker = kWorker;
  cfg.endpoint = "nonsense://x";
  KvEventSubscriber sub(index_, cfg);
  EXPECT_FALSE(sub.start().ok());
  EXPECT_EQ(sub.state(), SubscriberState::kStopped);
}

TEST_F(SubscriberTest, DataParallelRanksOnOffsetEndpoints) {
  // inproc endpoints need one context: rank r publishes on inproc://kv_dp<r> (vLLM's offset).
  auto ctx = std::make_shared<ZmqContext>();
  auto rank0 = start_publisher("inproc://kv", "inproc://replay", 10000, ctx, 0);
  auto rank1 = start_publisher("inproc://kv", "inproc://replay", 10000, ctx, 1);
  ASSERT_TRUE(rank0 && rank1);
  EXPECT_EQ(rank1->endpoint(), "inproc://kv_dp1");
  SubscriberConfig cfg;
  cfg.worker = kWorker;
  cfg.endpoint = "inproc://kv";
  cfg.replay_endpoint = "inproc://replay";
  cfg.topic = "kv-events";
  cfg.dp_size = 2;
  KvEventSubscriber sub(index_, cfg, ctx);
  ASSERT_TRUE(sub.start().ok());
  ASSERT_TRUE(rank0->wait_for_subscriber(5s) && rank1->wait_for_subscriber(5s));
  ToyEngine e0(9);
  ToyEngine e1(10);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(rank0->publish(e0.step()).ok());
    const EventBatch b = e1.step();
    ASSERT_TRUE((i % 5 == 2 ? rank1->publish_replay_only(b) : rank1->publish(b)).ok());
  }
  ASSERT_TRUE(wait_until([&] {
    const StreamStats st = sub.stats();
    return st.last_seq(0) == 49u && st.last_seq(1) == 49u;
  }));
  // One worker mirrors both ranks: every path of either engine is held.
  auto paths = e0.leaf_paths();
  for (auto& p : e1.leaf_paths()) paths.push_back(std::move(p));
  EXPECT_TRUE(testing::mirror_equals(index_, kWorker, e0.size() + e1.size(), paths));
  EXPECT_GE(sub.stats().gaps, 9u);  // rank 1's losses, repaired through rank 1's replay socket
  EXPECT_EQ(sub.stats().replay_failures, 0u);
}

TEST_F(SubscriberTest, ListenerRoutesEnginesThatConnectToItByTopic) {
  KvEventListener listener(index_, ListenerConfig{"tcp://127.0.0.1:*"});
  ASSERT_TRUE(listener.start().ok());
  const std::string endpoint = listener.endpoint();
  ASSERT_FALSE(publisher_binds(endpoint));  // engines given this address connect to it
  std::vector<std::unique_ptr<KvEventPublisher>> pubs;
  for (int w = 0; w < 2; ++w) {
    KvEventPublisher::Options o;
    o.endpoint = endpoint;
    o.replay_endpoint = "tcp://127.0.0.1:*";
    o.topic = "kv@10.0.0." + std::to_string(w) + ":8000@model";
    auto p = KvEventPublisher::start(o);
    ASSERT_TRUE(p.ok());
    pubs.push_back(std::move(p).value());
    ASSERT_TRUE(listener
                    .add_worker(ListenerWorker{static_cast<kv::WorkerId>(10 + w),
                                               "10.0.0." + std::to_string(w) + ":8000", o.topic,
                                               pubs.back()->replay_endpoint()})
                    .ok());
  }
  EXPECT_FALSE(listener.add_worker(ListenerWorker{12, "dup", "kv@10.0.0.0:8000@model"}).ok());
  KvEventPublisher::Options stranger;
  stranger.endpoint = endpoint;
  stranger.topic = "kv@unknown";
  auto unknown = KvEventPublisher::start(stranger);
  ASSERT_TRUE(unknown.ok());
  for (auto& p : pubs) ASSERT_TRUE(p->wait_for_subscriber(5s));
  ASSERT_TRUE((*unknown)->wait_for_subscriber(5s));

  ToyEngine e0(11);
  ToyEngine e1(12);
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(pubs[0]->publish(e0.step()).ok());
    const EventBatch b = e1.step();
    ASSERT_TRUE((i == 30 ? pubs[1]->publish_replay_only(b) : pubs[1]->publish(b)).ok());
    ASSERT_TRUE((*unknown)->publish(ToyEngine(13).step()).ok());
  }
  ASSERT_TRUE(wait_until([&] {
    auto s0 = listener.stats(10);
    auto s1 = listener.stats(11);
    return s0 && s1 && s0->last_seq(0) == 59u && s1->last_seq(0) == 59u &&
           listener.unattributed_errors()[static_cast<size_t>(MessageError::kUnknownTopic)] == 60;
  }));
  EXPECT_TRUE(mirror_equals(index_, 10, e0));
  EXPECT_TRUE(mirror_equals(index_, 11, e1));
  EXPECT_EQ(listener.stats(11)->gaps, 1u);
  EXPECT_EQ(listener.stats(11)->replayed_batches, 1u);
  listener.remove_worker(10);
  EXPECT_FALSE(listener.stats(10).has_value());
  listener.stop();
  EXPECT_EQ(listener.stats(11)->state, SubscriberState::kStopped);
}

TEST(EndpointTest, VllmBindRuleAndRankOffsets) {
  EXPECT_TRUE(publisher_binds("tcp://*:5557"));
  EXPECT_TRUE(publisher_binds("tcp://[::]:5557"));
  EXPECT_TRUE(publisher_binds("ipc:///tmp/kv"));
  EXPECT_TRUE(publisher_binds("inproc://kv"));
  EXPECT_FALSE(publisher_binds("tcp://router-host:5557"));
  EXPECT_EQ(*offset_endpoint_port("tcp://*:5557", 0), "tcp://*:5557");
  EXPECT_EQ(*offset_endpoint_port("tcp://*:5557", 1), "tcp://*:5558");
  EXPECT_EQ(*offset_endpoint_port("tcp://10.0.0.1:5557", 3), "tcp://10.0.0.1:5560");
  EXPECT_EQ(*offset_endpoint_port("inproc://x", 2), "inproc://x_dp2");
  EXPECT_FALSE(offset_endpoint_port("ipc:///tmp/kv", 1).ok());
  EXPECT_FALSE(offset_endpoint_port("tcp://127.0.0.1:*", 1).ok());
  EXPECT_FALSE(offset_endpoint_port("tcp://h:65535", 1).ok());
  EXPECT_EQ(sequence_frame(256), std::string("\0\0\0\0\0\0\x01\0", 8));
}

}  // namespace
}  // namespace infera::events
