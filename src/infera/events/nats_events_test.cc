// KV events over a real nats-server (Debian): the engine's ZMQ publisher, the worker-side relay
// (KvEventRelay), the router-side source (NatsEventSource) and the index, with replay, restarts
// of the NATS server, garbage on the subject and a batch above max_payload.
#include <gtest/gtest.h>

#include "infera/events/encoder.h"
#include "infera/events/events_test_util.h"
#include "infera/events/msgpack.h"
#include "infera/events/nats_envelope.h"
#include "infera/events/nats_relay.h"
#include "infera/events/nats_source.h"
#include "infera/events/publisher.h"
#include "infera/nats/client.h"
#include "infera/nats/subjects.h"
#include "tests/support/nats_process.h"

namespace infera::events {
namespace {

using testing::mirror_equals;
using testing::ToyEngine;
using testing::wait_until;
using namespace std::chrono_literals;

constexpr kv::WorkerId kWorker = 3;
const std::string kWorkerName = "127.0.0.1:30000";

std::unique_ptr<nats::Client> nats_client(const infera::testing::NatsProcess& server,
                                          std::function<void(bool)> on_state = nullptr) {
  nats::ClientOptions o;
  o.servers = *nats::parse_server_urls(server.url());
  o.reconnect_min = 20ms;
  o.reconnect_max = 200ms;
  auto c = std::make_unique<nats::Client>(o);
  if (on_state) c->set_state_callback(std::move(on_state));
  EXPECT_TRUE(c->connect().ok());
  return c;
}

class NatsEventsTest : public ::testing::Test {
 protected:
  NatsEventsTest() : index_(kv::KvIndex::Options{ToyEngine::kBlockSize, 64}) {}

  void SetUp() override { start_server({}); }

  void start_server(infera::testing::NatsServerOptions options) {
    auto s = infera::testing::NatsProcess::start(options);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(*s);
  }

  // Engine publisher + relay (worker side).
  void start_worker(size_t buffer_steps = 10000) {
    KvEventPublisher::Options po;
    po.endpoint = "tcp://127.0.0.1:*";
    po.replay_endpoint = "tcp://127.0.0.1:*";
    po.topic = "kv-events";
    po.buffer_steps = buffer_steps;
    auto p = KvEventPublisher::start(po);
    ASSERT_TRUE(p.ok());
    pub_ = std::move(*p);
    worker_nats_ = nats_client(*server_);
    RelayConfig rc;
    rc.worker_id = kWorkerName;
    rc.endpoint = pub_->endpoint();
    rc.replay_endpoint = pub_->replay_endpoint();
    rc.topic = "kv-events";
    relay_ = std::make_unique<KvEventRelay>(*worker_nats_, rc);
    ASSERT_TRUE(relay_->start().ok());
    ASSERT_TRUE(pub_->wait_for_subscriber(5s));
    ASSERT_TRUE(worker_nats_->flush().ok());  // the replay subscription is in place
  }

  // Router side.
  void start_router() {
    router_nats_ = nats_client(*server_, [this](bool up) {
      if (source_) source_->on_connection(up);
    });
    source_ = std::make_unique<NatsEventSource>(index_, *router_nats_, NatsSourceConfig{});
    ASSERT_TRUE(source_->add_worker({kWorker, kWorkerName, {}}).ok());
    ASSERT_TRUE(source_->start().ok());
    ASSERT_TRUE(router_nats_->flush().ok());
  }

  bool caught_up(uint64_t seq) {
    return wait_until([&] {
      auto st = source_->stats(kWorker);
      return st && st->last_seq(0) == seq;
    });
  }

  kv::KvIndex index_;
  std::optional<infera::testing::NatsProcess> server_;
  std::unique_ptr<KvEventPublisher> pub_;
  std::unique_ptr<nats::Client> worker_nats_;
  std::unique_ptr<KvEventRelay> relay_;
  std::unique_ptr<nats::Client> router_nats_;
  std::unique_ptr<NatsEventSource> source_;
};

TEST_F(NatsEventsTest, EngineToRelayToRouterMirrorsTheCache) {
  start_worker();
  start_router();
  ToyEngine engine(1);
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(pub_->publish(engine.step()).ok());
  ASSERT_TRUE(caught_up(299));
  EXPECT_TRUE(mirror_equals(index_, kWorker, engine));
  const StreamStats st = *source_->stats(kWorker);
  EXPECT_EQ(st.state, SubscriberState::kLive);
  EXPECT_EQ(st.batches, 300u);
  EXPECT_EQ(st.gaps, 0u);
  EXPECT_EQ(relay_->stats().relayed, 300u);
}

TEST_F(NatsEventsTest, ARouterThatJoinsLateCatchesUpFromSeqZeroOverNatsReplay) {
  start_worker();
  ToyEngine engine(2);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(pub_->publish(engine.step()).ok());
  ASSERT_TRUE(wait_until([&] { return relay_->stats().relayed == 50; }));
  start_router();
  ASSERT_TRUE(pub_->publish(engine.step()).ok());
  ASSERT_TRUE(caught_up(50));
  EXPECT_TRUE(mirror_equals(index_, kWorker, engine));
  const StreamStats st = *source_->stats(kWorker);
  EXPECT_EQ(st.replayed_batches, 50u);
  EXPECT_EQ(st.partial_joins, 0u);
  EXPECT_EQ(relay_->stats().replays, 1u);
}

TEST_F(NatsEventsTest, LostBatchesAreRepairedByReplayOverNats) {
  start_worker();
  start_router();
  ToyEngine engine(3);
  for (int i = 0; i < 200; ++i) {
    const EventBatch b = engine.step();
    const bool lost = i % 9 == 4;
    ASSERT_TRUE((lost ? pub_->publish_replay_only(b) : pub_->publish(b)).ok());
  }
  ASSERT_TRUE(caught_up(199));
  EXPECT_TRUE(mirror_equals(index_, kWorker, engine));
  const StreamStats st = *source_->stats(kWorker);
  EXPECT_GE(st.gaps, 20u);
  EXPECT_EQ(st.replayed_batches, st.missed_batches);
  EXPECT_EQ(st.replay_failures, 0u);
}

TEST_F(NatsEventsTest, ANatsServerRestartMidRunIsRepairedWithoutAnotherBatch) {
  start_worker();
  start_router();
  ToyEngine engine(4);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(pub_->publish(engine.step()).ok());
  ASSERT_TRUE(caught_up(49));
  server_->kill();
  ASSERT_TRUE(wait_until([&] { return !router_nats_->connected() && !worker_nats_->connected(); }));
  // The engine goes on while the bus is away; the relay buffers or drops, the router hears none.
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(pub_->publish(engine.step()).ok());
  ASSERT_TRUE(pub_->flush(5s));
  ASSERT_TRUE(server_->restart().ok());
  ASSERT_TRUE(wait_until([&] { return router_nats_->connected() && worker_nats_->connected(); }));
  // No further batch: the reconnect itself makes the router ask for what it missed.
  ASSERT_TRUE(caught_up(79));
  EXPECT_TRUE(mirror_equals(index_, kWorker, engine));
  EXPECT_EQ(source_->stats(kWorker)->state, SubscriberState::kLive);
  // And the stream goes on live.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(pub_->publish(engine.step()).ok());
  ASSERT_TRUE(caught_up(89));
  EXPECT_TRUE(mirror_equals(index_, kWorker, engine));
}

TEST_F(NatsEventsTest, ARelayRestartIsAGapRepairedByTheNewRelay) {
  start_worker();
  start_router();
  ToyEngine engine(5);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(pub_->publish(engine.step()).ok());
  ASSERT_TRUE(caught_up(19));
  relay_->stop();  // the relay dies; the engine publishes on
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(pub_->publish(engine.step()).ok());
  ASSERT_TRUE(pub_->flush(5s));
  RelayConfig rc = relay_->config();
  relay_ = std::make_unique<KvEventRelay>(*worker_nats_, rc);
  ASSERT_TRUE(relay_->start().ok());
  ASSERT_TRUE(worker_nats_->flush().ok());
  // ZeroMQ's SUB joins asynchronously (and the publisher already saw the old relay's
  // subscription): publish until the new relay has relayed a batch, then five more.
  uint64_t last = 34;
  for (int i = 0; i < 200 && relay_->stats().relayed == 0; ++i) {
    ASSERT_TRUE(pub_->publish(engine.step()).ok());
    ++last;
    wait_until([&] { return relay_->stats().relayed > 0; }, 20ms);
  }
  for (int i = 0; i < 5; ++i, ++last) ASSERT_TRUE(pub_->publish(engine.step()).ok());
  ASSERT_TRUE(caught_up(last));
  EXPECT_TRUE(mirror_equals(index_, kWorker, engine));
  EXPECT_GE(source_->stats(kWorker)->replayed_batches, 15u);
}

TEST_F(NatsEventsTest, GarbageAndStrangersOnTheSubjectAreCountedNeverApplied) {
  start_worker();
  start_router();
  auto other = nats_client(*server_);
  const std::string subject = nats::kv_events_subject("infera", kWorkerName);
  ASSERT_TRUE(other->publish(subject, "\xc1 not msgpack").ok());
  ASSERT_TRUE(other->publish(subject, "").ok());
  uint8_t seq[8] = {0, 0, 0, 0, 0, 0, 0, 7};
  const std::string garbage_batch = "\x93\x01\x02";
  ASSERT_TRUE(other->publish(subject, encode_envelope("10.9.9.9:1", seq, "t",
                                                      byte_span(garbage_batch))).ok());
  ASSERT_TRUE(other->publish(nats::kv_events_subject("infera", "10.0.0.1:9"),
                             encode_envelope("10.0.0.1:9", seq, "t", byte_span(garbage_batch))).ok());
  ASSERT_TRUE(other->flush().ok());
  ToyEngine engine(6);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(pub_->publish(engine.step()).ok());
  ASSERT_TRUE(caught_up(19));
  EXPECT_TRUE(mirror_equals(index_, kWorker, engine));
  const NatsSourceStats ss = source_->source_stats();
  EXPECT_EQ(ss.malformed, 2u);
  EXPECT_EQ(ss.unattributed, 2u);  // a worker_id that differs, and an unknown token
  EXPECT_EQ(source_->stats(kWorker)->state, SubscriberState::kLive);
}

TEST_F(NatsEventsTest, ABatchAboveMaxPayloadIsCountedAndTheMirrorGoesStaleNotWrong) {
  infera::testing::NatsServerOptions so;
  so.max_payload = 4096;
  start_server(so);
  start_worker();
  start_router();
  ToyEngine engine(7);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pub_->publish(engine.step()).ok());
  ASSERT_TRUE(caught_up(4));
  EventBatch big;
  BlockStored s;
  s.block_size = ToyEngine::kBlockSize;
  for (uint32_t b = 0; b < 200; ++b) {
    s.block_hashes.push_back(0x1000000000ull + b);
    for (uint32_t t = 0; t < ToyEngine::kBlockSize; ++t) s.token_ids.push_back(100000 + b * 16 + t);
  }
  big.events.push_back(s);
  ASSERT_TRUE(pub_->publish(big).ok());
  ASSERT_TRUE(pub_->publish(engine.step()).ok());  // seq 6 shows the gap at 5
  ASSERT_TRUE(wait_until([&] { return relay_->stats().oversized == 1; }));
  ASSERT_TRUE(wait_until([&] { return source_->stats(kWorker)->state == SubscriberState::kStale; }));
  EXPECT_TRUE(index_.is_stale(kWorker));  // hits count 0: never a false hit
}

}  // namespace
}  // namespace infera::events
