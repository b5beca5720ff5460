// The sim's router replicas: what one replica registers reaches the others through the
// server's load ops, after the bus latency of virtual time, and not at all without sync.
#include "infera/sim/router_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace infera::sim {
namespace {

using std::chrono::milliseconds;

RouterGroupOptions two_replicas(bool sync) {
  RouterGroupOptions o;
  o.workers = 4;
  o.routers = 2;
  o.sync = sync;
  o.sync_latency = milliseconds(5);
  o.router = routing::RouterOptions{};
  o.router.load = routing::default_load_options(routing::LoadModel::kPrefillAware);
  return o;
}

const std::vector<kv::WorkerId> kAll = {0, 1, 2, 3};
const std::vector<uint64_t> kPrompt = {11, 12, 13, 14};  // 4 blocks

// Replica `r`'s view of `worker` for kPrompt.
routing::Candidate view(RouterGroup& group, uint32_t r, kv::WorkerId worker) {
  Result<routing::Decision> d = group.router(r).score(kPrompt, 64, kAll);
  EXPECT_TRUE(d.ok());
  return d->table[worker];
}

TEST(RouterGroupTest, AReplicasLoadReachesTheOthersAfterTheLatency) {
  ManualClock clock;
  auto group = RouterGroup::create(two_replicas(true), clock);
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  RouterGroup& g = **group;
  auto routed = g.router(0).route(kPrompt, 64, kAll);
  ASSERT_TRUE(routed.ok());
  const kv::WorkerId w = routed->decision.worker();
  EXPECT_EQ(g.sync_stats().sent, 1u);
  ASSERT_TRUE(g.next_delivery().has_value());
  EXPECT_EQ(*g.next_delivery(), milliseconds(5));

  clock.set(milliseconds(4));
  g.deliver_due();
  EXPECT_EQ(view(g, 1, w).active_requests, 0u) << "still on the bus";
  clock.set(milliseconds(5));
  g.deliver_due();
  EXPECT_FALSE(g.next_delivery().has_value());
  const routing::Candidate seen = view(g, 1, w);
  EXPECT_EQ(seen.active_requests, 1u);
  EXPECT_EQ(seen.load.prefill_requests, 1u);
  EXPECT_EQ(seen.predicted_hits, 4u) << "the peer's predicted-on-route blocks count too";
  EXPECT_EQ(view(g, 0, w).active_requests, 1u) << "its own change is not applied twice";

  g.router(0).prefill_done(routed->ticket);
  g.router(0).release(routed->ticket);
  clock.set(milliseconds(10));
  g.deliver_due();
  EXPECT_EQ(view(g, 1, w).active_requests, 0u);
  EXPECT_EQ(g.sync_stats().sent, 3u);
  EXPECT_EQ(g.sync_stats().applied, 3u);
  EXPECT_EQ(g.sync_stats().not_applied, 0u);
}

TEST(RouterGroupTest, WithoutSyncEachReplicaSeesOnlyItsOwnLoad) {
  ManualClock clock;
  auto group = RouterGroup::create(two_replicas(false), clock);
  ASSERT_TRUE(group.ok());
  RouterGroup& g = **group;
  auto routed = g.router(0).route(kPrompt, 64, kAll);
  ASSERT_TRUE(routed.ok());
  EXPECT_FALSE(g.next_delivery().has_value());
  clock.set(milliseconds(100));
  g.deliver_due();
  EXPECT_EQ(view(g, 1, routed->decision.worker()).active_requests, 0u);
  EXPECT_EQ(g.sync_stats().sent, 0u);
}

TEST(RouterGroupTest, WorkersAreNamedOnTheBusAsTheSimNamesThem) {
  EXPECT_EQ(worker_name(0), "worker-0");
  EXPECT_EQ(worker_name(999), "worker-999");
}

}  // namespace
}  // namespace infera::sim
