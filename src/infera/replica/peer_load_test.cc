#include "infera/replica/peer_load.h"

#include <gtest/gtest.h>

#include <map>

#include "infera/events/msgpack.h"
#include "infera/kv/index.h"
#include "infera/routing/router.h"

namespace infera::replica {
namespace {

using namespace std::chrono_literals;

struct Replica {
  explicit Replica(std::string id, const Clock& clock)
      : load({}, clock),
        predicted({.ttl = 2s}, clock),
        peers({}, std::move(id), load, &predicted,
              [](std::string_view name) -> std::optional<kv::WorkerId> {
                if (name.size() == 2 && name[0] == 'w') return static_cast<kv::WorkerId>(name[1] - '0');
                return std::nullopt;
              },
              clock) {}
  kv::ActiveLoad load;
  kv::PredictedBlocks predicted;
  PeerLoad peers;
};

// An op as the bus would deliver it (encoded, then decoded).
ApplyOutcome deliver(PeerLoad& to, std::string_view from, uint64_t seq, const OpFields& f) {
  std::string wire;
  encode_op(wire, from, seq, f);
  std::vector<uint64_t> blocks;
  const Result<LoadOp> op = decode_op(events::byte_span(wire), blocks);
  EXPECT_TRUE(op.ok());
  return to.apply(*op, blocks);
}

const std::vector<uint64_t> kPrompt = {11, 12, 13, 14};

TEST(PeerLoadTest, APeersRequestCountsAsLoadThroughItsPhases) {
  ManualClock clock;
  Replica r("me", clock);
  EXPECT_EQ(deliver(r.peers, "other", 1, {OpKind::kAdd, "w1", 5, kPrompt, 3, 1}), ApplyOutcome::kApplied);
  kv::WorkerLoad l = r.load.load(1);
  EXPECT_EQ(l.active_blocks, 4u);
  EXPECT_EQ(l.prefill_blocks, 3u);
  EXPECT_EQ(l.prefill_requests, 1u);
  EXPECT_EQ(r.predicted.extend(1, kPrompt, 1), 3u);  // its predicted entries are shared too
  EXPECT_EQ(deliver(r.peers, "other", 2, {OpKind::kPrefillDone, "w1", 5, {}, 0, 0}), ApplyOutcome::kApplied);
  l = r.load.load(1);
  EXPECT_EQ(l.prefill_requests, 0u);
  EXPECT_EQ(l.decode_requests, 1u);
  EXPECT_EQ(deliver(r.peers, "other", 3, {OpKind::kRelease, "", 5, {}, 0, 0}), ApplyOutcome::kApplied);
  EXPECT_EQ(r.load.active_blocks(1), 0u);
  EXPECT_EQ(r.peers.peers().at(0).requests, 0u);
}

TEST(PeerLoadTest, OwnEchoesDuplicatesUnknownsAndGapsAreCountedNotApplied) {
  ManualClock clock;
  Replica r("me", clock);
  EXPECT_EQ(deliver(r.peers, "me", 1, {OpKind::kAdd, "w1", 1, kPrompt, 4, 0}), ApplyOutcome::kOwn);
  EXPECT_EQ(r.load.active_blocks(1), 0u);
  EXPECT_EQ(deliver(r.peers, "p", 4, {OpKind::kAdd, "zz", 1, kPrompt, 4, 0}), ApplyOutcome::kUnknownWorker);
  EXPECT_EQ(deliver(r.peers, "p", 4, {OpKind::kAdd, "w2", 1, kPrompt, 4, 0}), ApplyOutcome::kDuplicate);
  EXPECT_EQ(deliver(r.peers, "p", 7, {OpKind::kRelease, "w2", 9, {}, 0, 0}), ApplyOutcome::kUnknownRequest);
  EXPECT_EQ(r.load.active_blocks(2), 0u);
  const std::vector<PeerStats> peers = r.peers.peers();
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0].last_seq, 7u);
  EXPECT_EQ(peers[0].lost, 2u);  // 5 and 6 never came
  const auto outcomes = r.peers.outcomes();
  EXPECT_EQ(outcomes[static_cast<size_t>(ApplyOutcome::kOwn)], 1u);
  EXPECT_EQ(outcomes[static_cast<size_t>(ApplyOutcome::kDuplicate)], 1u);
  EXPECT_EQ(outcomes[static_cast<size_t>(ApplyOutcome::kUnknownWorker)], 1u);
  EXPECT_EQ(outcomes[static_cast<size_t>(ApplyOutcome::kUnknownRequest)], 1u);
}

TEST(PeerLoadTest, ASilentPeersLoadIsDroppedAndAHeartbeatKeepsItAlive) {
  ManualClock clock;
  Replica r("me", clock);
  deliver(r.peers, "a", 1, {OpKind::kAdd, "w1", 1, kPrompt, 4, 0});
  deliver(r.peers, "b", 1, {OpKind::kAdd, "w2", 1, kPrompt, 4, 0});
  clock.advance(4s);
  deliver(r.peers, "a", 2, OpFields{});  // a's hello; b stays silent
  clock.advance(2s);
  EXPECT_EQ(r.peers.expire(), 1u);
  EXPECT_EQ(r.load.active_blocks(1), 4u);
  EXPECT_EQ(r.load.active_blocks(2), 0u);
  EXPECT_TRUE(r.peers.drop_peer("a"));
  EXPECT_EQ(r.load.active_blocks(1), 0u);
  EXPECT_FALSE(r.peers.drop_peer("a"));
  EXPECT_EQ(r.peers.departures().silent, 1u);
  EXPECT_EQ(r.peers.departures().gone, 1u);
  EXPECT_EQ(r.peers.departures().goodbye, 0u);
}

TEST(PeerLoadTest, AByeDropsThePeersLoadAtOnce) {
  ManualClock clock;
  Replica r("me", clock);
  deliver(r.peers, "a", 1, {OpKind::kAdd, "w1", 1, kPrompt, 4, 0});
  deliver(r.peers, "b", 1, {OpKind::kAdd, "w2", 1, kPrompt, 4, 0});
  EXPECT_EQ(deliver(r.peers, "a", 2, {OpKind::kBye, "", 0, {}, 0, 0}), ApplyOutcome::kApplied);
  EXPECT_EQ(r.load.active_blocks(1), 0u);  // no silence needed
  EXPECT_EQ(r.load.active_blocks(2), 4u);  // b is untouched
  const std::vector<PeerStats> peers = r.peers.peers();
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0].router_id, "b");
  EXPECT_EQ(r.peers.expire(), 0u);
  EXPECT_EQ(r.peers.departures().goodbye, 1u);
  EXPECT_EQ(r.peers.departures().silent, 0u);
}

TEST(PeerLoadTest, ThePeersPerPeerRequestBoundHolds) {
  ManualClock clock;
  kv::ActiveLoad load({}, clock);
  PeerLoad peers({.max_requests = 2}, "me", load, nullptr,
                 [](std::string_view) { return std::optional<kv::WorkerId>(0); }, clock);
  for (uint64_t i = 1; i <= 3; ++i) deliver(peers, "p", i, {OpKind::kAdd, "w0", i, {{i}}, 1, 0});
  EXPECT_EQ(load.active_requests(0), 2u);
  EXPECT_EQ(peers.outcomes()[static_cast<size_t>(ApplyOutcome::kOverLimit)], 1u);
}

// Two routers sharing their load through the listener and the wire: the second, which never
// routed anything, sees the first's request and routes a different prompt away from it.
class WireListener final : public routing::LoadListener {
 public:
  WireListener(std::string id, PeerLoad& to) : id_(std::move(id)), to_(to) {}
  void on_add(kv::LoadTicket t, std::span<const uint64_t> h, uint32_t uncached, uint32_t cached) override {
    deliver(to_, id_, ++seq_, {OpKind::kAdd, "w" + std::to_string(t.worker), t.serial, h, uncached, cached});
  }
  void on_prefill_done(kv::LoadTicket t) override {
    deliver(to_, id_, ++seq_, {OpKind::kPrefillDone, "", t.serial, {}, 0, 0});
  }
  void on_release(kv::LoadTicket t) override {
    deliver(to_, id_, ++seq_, {OpKind::kRelease, "", t.serial, {}, 0, 0});
  }

 private:
  std::string id_;
  PeerLoad& to_;
  uint64_t seq_ = 0;
};

TEST(PeerLoadTest, ARouterScoresWithItsPeersLoad) {
  ManualClock clock;
  kv::KvIndex index_a({.block_size = 16}), index_b({.block_size = 16});
  Replica a("a", clock), b("b", clock);
  for (kv::WorkerId w : {0u, 1u}) {
    index_a.add_worker(w);
    index_b.add_worker(w);
  }
  routing::RouterOptions ro;
  ro.policy = "least-loaded";
  auto router_a = routing::Router::create(ro, index_a, a.load);
  auto router_b = routing::Router::create(ro, index_b, b.load);
  ASSERT_TRUE(router_a.ok() && router_b.ok());
  WireListener to_b("a", b.peers);
  (*router_a)->set_load_listener(&to_b);
  const std::vector<kv::WorkerId> both = {0, 1};
  const std::vector<uint64_t> big(64, 7);
  auto first = (*router_a)->route(big, 64 * 16, both);
  ASSERT_TRUE(first.ok());
  const kv::WorkerId busy = first->decision.worker();
  EXPECT_EQ(b.load.active_requests(busy), 1u);
  for (int i = 0; i < 5; ++i) {
    auto next = (*router_b)->route(std::vector<uint64_t>{static_cast<uint64_t>(100 + i)}, 16, both);
    ASSERT_TRUE(next.ok());
    EXPECT_NE(next->decision.worker(), busy);
    (*router_b)->release(next->ticket);
  }
  (*router_a)->release(first->ticket);
  (*router_a)->release(first->ticket);  // a second release changes nothing and says nothing
  EXPECT_EQ(b.load.active_requests(busy), 0u);
  EXPECT_EQ(b.peers.outcomes()[static_cast<size_t>(ApplyOutcome::kUnknownRequest)], 0u);
}

}  // namespace
}  // namespace infera::replica
