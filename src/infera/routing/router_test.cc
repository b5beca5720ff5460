#include "infera/routing/router.h"

#include <gtest/gtest.h>

#include <cmath>

#include "infera/common/clock.h"

namespace infera::routing {
namespace {

constexpr uint32_t kBs = 16;

class RouterTest : public ::testing::Test {
 protected:
  RouterTest()
      : index_(kv::KvIndex::Options{kBs, 16}),
        load_(kv::ActiveLoad::Options{std::chrono::minutes(5), 16}, clock_) {
    for (kv::WorkerId w = 0; w < 4; ++w) index_.add_worker(w);
    for (size_t i = 0; i < prompt_.size(); ++i) prompt_[i] = static_cast<kv::TokenId>(i * 3);
    hashes_ = kv::seq_hashes(prompt_, kBs);
  }

  void cache_on(kv::WorkerId w, size_t blocks) {
    std::vector<uint64_t> engines;
    for (size_t i = 0; i < blocks; ++i) engines.push_back(w * 1000 + i);
    ASSERT_EQ(index_.apply(kv::StoredEvent{w, std::nullopt, engines,
                                           std::span<const kv::TokenId>(prompt_).first(blocks * kBs),
                                           kBs, kv::Medium::kGpu, {}}),
              kv::ApplyResult::kApplied);
  }

  std::unique_ptr<Router> make(RouterOptions o) {
    auto r = Router::create(std::move(o), index_, load_);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return std::move(r).value();
  }

  ManualClock clock_;
  kv::KvIndex index_;
  kv::ActiveLoad load_;
  std::vector<kv::TokenId> prompt_ = std::vector<kv::TokenId>(20 * kBs);
  std::vector<uint64_t> hashes_;
  std::vector<kv::WorkerId> all_{0, 1, 2, 3};
};

TEST_F(RouterTest, RouteRegistersActiveBlocksUntilReleased) {
  cache_on(2, 12);
  auto router = make({});
  auto routed = router->route(hashes_, static_cast<uint32_t>(prompt_.size()), all_);
  ASSERT_TRUE(routed.ok());
  EXPECT_EQ(routed->decision.worker(), 2u);
  EXPECT_EQ(routed->decision.chosen().cache_hits, 12u);
  EXPECT_EQ(load_.active_blocks(2), 20u);
  EXPECT_EQ(load_.active_requests(2), 1u);
  router->release(routed->ticket);
  EXPECT_EQ(load_.active_blocks(2), 0u);
}

TEST_F(RouterTest, ScoreRegistersNothing) {
  auto router = make({});
  auto d = router->score(hashes_, static_cast<uint32_t>(prompt_.size()), all_);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->table.size(), 4u);
  EXPECT_EQ(d->policy, "kv-aware");
  for (kv::WorkerId w : all_) EXPECT_EQ(load_.active_blocks(w), 0u);
}

TEST_F(RouterTest, EachStageUsesItsOwnWeightWithFallback) {
  RouterOptions o;
  o.overlap_weight = 1.0;
  o.prefill_overlap_weight = 20.0;
  auto router = make(o);
  EXPECT_DOUBLE_EQ(router->overlap_weight(Stage::kPrefill), 20.0);
  EXPECT_DOUBLE_EQ(router->overlap_weight(Stage::kDecode), 1.0);
  EXPECT_DOUBLE_EQ(router->overlap_weight(Stage::kAggregated), 1.0);

  // Worker 1 caches 10 of 20 blocks but carries 30 active blocks. At weight 20 the prefill stage
  // follows the cache (costs 400 vs 10*20+30=230); with decode weight 0.5 it balances load.
  cache_on(1, 10);
  std::vector<uint64_t> busy;
  for (uint64_t i = 0; i < 30; ++i) busy.push_back(9000 + i);
  load_.add(1, busy);
  o.decode_overlap_weight = 0.5;
  auto router2 = make(o);
  const std::vector<kv::WorkerId> two{0, 1};
  auto pre = router2->score(hashes_, static_cast<uint32_t>(prompt_.size()), two, Stage::kPrefill);
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(pre->worker(), 1u);
  EXPECT_DOUBLE_EQ(pre->overlap_weight, 20.0);
  auto dec = router2->score(hashes_, static_cast<uint32_t>(prompt_.size()), two, Stage::kDecode);
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(dec->worker(), 0u);  // 0.5*20 = 10 vs 0.5*10 + 30 = 35
}

TEST_F(RouterTest, NoCandidatesIsUnavailable) {
  auto router = make({});
  auto d = router->score(hashes_, 10, {});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
}

TEST_F(RouterTest, RejectsBadOptions) {
  EXPECT_FALSE(Router::create(RouterOptions{.policy = "nope"}, index_, load_).ok());
  EXPECT_FALSE(Router::create(RouterOptions{.overlap_weight = -1}, index_, load_).ok());
  RouterOptions nan_prefill;
  nan_prefill.prefill_overlap_weight = std::nan("");
  EXPECT_FALSE(Router::create(nan_prefill, index_, load_).ok());
}

TEST_F(RouterTest, TiesSpreadAcrossIdleWorkers) {
  auto router = make({.seed = 99});
  std::vector<int> wins(4);
  for (int i = 0; i < 4000; ++i) {
    auto d = router->score(hashes_, static_cast<uint32_t>(prompt_.size()), all_);
    ++wins[d->worker()];
  }
  for (int w : wins) EXPECT_NEAR(w, 1000, 120);
}

}  // namespace
}  // namespace infera::routing
