#include "infera/routing/policy.h"

#include <gtest/gtest.h>

namespace infera::routing {
namespace {

std::vector<Candidate> three_workers() {
  return {{0, 0, 5, 2, 0}, {1, 9, 3, 4, 0}, {2, 0, 3, 1, 0}};
}

TEST(PolicyTest, MakesEveryNamedPolicy) {
  for (const std::string& name : policy_names()) {
    auto p = make_policy(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  auto bad = make_policy("fastest");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kv-aware"), std::string::npos);
}

TEST(PolicyTest, RoundRobinCyclesThroughCandidates) {
  auto p = make_policy("round-robin");
  Rng rng(0);
  auto c = three_workers();
  std::vector<size_t> picks;
  for (int i = 0; i < 6; ++i) picks.push_back((*p)->choose({}, c, rng));
  EXPECT_EQ(picks, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
}

// Requests alternating between two pools (two models, or the prefill and decode stages of a
// split fleet): each pool still rotates through its own workers.
TEST(PolicyTest, RoundRobinRotatesEachPoolOnItsOwn) {
  auto p = make_policy("round-robin");
  Rng rng(0);
  std::vector<Candidate> a{{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}};
  std::vector<Candidate> b{{2, 0, 0, 0, 0}, {3, 0, 0, 0, 0}};
  std::vector<kv::WorkerId> picks_a, picks_b;
  for (int i = 0; i < 4; ++i) {
    picks_a.push_back(a[(*p)->choose({}, a, rng)].worker);
    picks_b.push_back(b[(*p)->choose({}, b, rng)].worker);
  }
  EXPECT_EQ(picks_a, (std::vector<kv::WorkerId>{0, 1, 0, 1}));
  EXPECT_EQ(picks_b, (std::vector<kv::WorkerId>{2, 3, 2, 3}));
}

// A worker left out for a while (in backoff, at its cap) is next when it comes back: it has
// waited longest.
TEST(PolicyTest, RoundRobinGivesAReturningWorkerTheNextTurn) {
  auto p = make_policy("round-robin");
  Rng rng(0);
  auto all = three_workers();
  std::vector<Candidate> without_0{all[1], all[2]};
  EXPECT_EQ(all[(*p)->choose({}, all, rng)].worker, 0u);
  EXPECT_EQ(without_0[(*p)->choose({}, without_0, rng)].worker, 1u);
  EXPECT_EQ(without_0[(*p)->choose({}, without_0, rng)].worker, 2u);
  EXPECT_EQ(without_0[(*p)->choose({}, without_0, rng)].worker, 1u);
  EXPECT_EQ(all[(*p)->choose({}, all, rng)].worker, 0u);
  EXPECT_EQ(all[(*p)->choose({}, all, rng)].worker, 2u);
}

TEST(PolicyTest, LeastLoadedPrefersFewestBlocksThenFewestRequests) {
  auto p = make_policy("least-loaded");
  Rng rng(0);
  auto c = three_workers();  // workers 1 and 2 have 3 blocks; 2 has fewer requests
  for (int i = 0; i < 100; ++i) EXPECT_EQ((*p)->choose({}, c, rng), 2u);
  EXPECT_FALSE((*p)->uses_cache());
}

TEST(PolicyTest, LeastLoadedBreaksFullTiesAtRandom) {
  auto p = make_policy("least-loaded");
  Rng rng(5);
  std::vector<Candidate> c{{0, 0, 1, 1, 0}, {1, 0, 1, 1, 0}};
  int first = 0;
  for (int i = 0; i < 10000; ++i) first += (*p)->choose({}, c, rng) == 0 ? 1 : 0;
  EXPECT_NEAR(first, 5000, 300);
}

TEST(PolicyTest, RandomIsUniform) {
  auto p = make_policy("random");
  Rng rng(9);
  auto c = three_workers();
  std::vector<int> wins(3);
  for (int i = 0; i < 30000; ++i) ++wins[(*p)->choose({}, c, rng)];
  for (int w : wins) EXPECT_NEAR(w, 10000, 400);
}

TEST(PolicyTest, KvAwareFollowsTheCacheUnlessLoadOutweighsIt) {
  auto p = make_policy("kv-aware");
  Rng rng(0);
  EXPECT_TRUE((*p)->uses_cache());
  auto c = three_workers();
  // 10 blocks, weight 1: costs 15, 4, 13 -> worker 1 (9 hits).
  EXPECT_EQ((*p)->choose({10, 1.0, 0.0}, c, rng), 1u);
  c[1].active_blocks = 20;  // costs 15, 21, 13 -> worker 2
  EXPECT_EQ((*p)->choose({10, 1.0, 0.0}, c, rng), 2u);
}

}  // namespace
}  // namespace infera::routing

namespace infera::routing {
namespace {

std::vector<uint64_t> prompt_hashes(uint64_t family, size_t n) {
  std::vector<uint64_t> h;
  for (size_t i = 0; i < n; ++i) h.push_back(family * 1000 + i + 1);
  return h;
}

TEST(ApproxPrefixTest, FollowsItsOwnHistoryAboveTheThreshold) {
  auto p = make_policy("approx-prefix");
  ASSERT_TRUE(p.ok());
  Rng rng(3);
  std::vector<Candidate> c{{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}, {2, 0, 0, 0, 0}};
  const auto a = prompt_hashes(1, 10);
  const size_t first = (*p)->choose({10, 1.0, 0.0, a}, c, rng);
  // The same family again: the history match (10/10 > 0.3) wins even if that worker is busier.
  c[first].active_requests = 5;
  for (int i = 0; i < 20; ++i) EXPECT_EQ((*p)->choose({10, 1.0, 0.0, a}, c, rng), first);
  EXPECT_EQ(c[first].cache_hits, 10u);
}

TEST(ApproxPrefixTest, LowMatchGoesToTheLeastLoaded) {
  auto p = make_policy("approx-prefix");
  Rng rng(3);
  std::vector<Candidate> c{{0, 0, 3, 3, 0}, {1, 0, 1, 1, 0}, {2, 0, 2, 2, 0}};
  EXPECT_EQ((*p)->choose({10, 1.0, 0.0, prompt_hashes(2, 10)}, c, rng), 1u);
}

TEST(ApproxPrefixTest, ImbalanceOverridesTheCache) {
  auto p = make_policy("approx-prefix");
  Rng rng(3);
  std::vector<Candidate> c{{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}};
  const auto a = prompt_hashes(3, 10);
  const size_t first = (*p)->choose({10, 1.0, 0.0, a}, c, rng);
  c[first].active_requests = 200;  // 200 - 10 > 64 and 200 > 1.5 * 10
  c[1 - first].active_requests = 10;
  EXPECT_EQ((*p)->choose({10, 1.0, 0.0, a}, c, rng), 1 - first);
}

}  // namespace
}  // namespace infera::routing
