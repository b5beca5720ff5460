#include "infera/routing/router.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <set>
#include <thread>

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

TEST_F(RouterTest, SetOverlapWeightsChangesTheNextDecisions) {
  // Worker 1 caches 10 of 20 blocks and carries 30 active blocks: at weight 1 the idle worker 0
  // wins (20 vs 10 + 30), at weight 20 the cache does (400 vs 200 + 30).
  cache_on(1, 10);
  std::vector<uint64_t> busy;
  for (uint64_t i = 0; i < 30; ++i) busy.push_back(9000 + i);
  load_.add(1, busy);
  auto router = make({});
  const std::vector<kv::WorkerId> two{0, 1};
  const auto n = static_cast<uint32_t>(prompt_.size());
  EXPECT_EQ(router->score(hashes_, n, two)->worker(), 0u);

  ASSERT_TRUE(router->set_overlap_weights(20.0, std::nullopt, 0.5).ok());
  auto d = router->score(hashes_, n, two);
  ASSERT_TRUE(d.ok());
  EXPECT_DOUBLE_EQ(d->overlap_weight, 20.0);
  EXPECT_EQ(d->worker(), 1u);
  EXPECT_DOUBLE_EQ(router->overlap_weight(Stage::kPrefill), 20.0);  // falls back to the global one
  EXPECT_DOUBLE_EQ(router->overlap_weight(Stage::kDecode), 0.5);
  EXPECT_EQ(router->score(hashes_, n, two, Stage::kDecode)->worker(), 0u);
}

TEST_F(RouterTest, SetOverlapWeightsRefusesABadWeightAndKeepsTheOnesInForce) {
  auto router = make({.overlap_weight = 2.0});
  EXPECT_FALSE(router->set_overlap_weights(-1.0, std::nullopt, std::nullopt).ok());
  EXPECT_FALSE(router->set_overlap_weights(1.0, std::nan(""), std::nullopt).ok());
  EXPECT_DOUBLE_EQ(router->overlap_weight(Stage::kAggregated), 2.0);
  EXPECT_DOUBLE_EQ(router->overlap_weight(Stage::kPrefill), 2.0);
}

TEST_F(RouterTest, DecisionsWhileTheWeightsChangeEachUseOneOfThem) {
  auto router = make({});
  std::atomic<bool> done{false};
  std::thread swapper([&] {
    for (int i = 0; i < 2000; ++i) {
      (void)router->set_overlap_weights(i % 2 ? 3.0 : 1.0, std::nullopt, std::nullopt);
    }
    done = true;
  });
  int decisions = 0;
  while (!done.load() || decisions < 100) {
    auto d = router->route(hashes_, static_cast<uint32_t>(prompt_.size()), all_);
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE(d->decision.overlap_weight == 1.0 || d->decision.overlap_weight == 3.0)
        << d->decision.overlap_weight;
    router->release(d->ticket);
    ++decisions;
  }
  swapper.join();
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

// The prefill-aware load model, predicted-on-route entries and tier credit through the real
// index, active load and predicted table (issue 20).
class PrefillAwareRouterTest : public ::testing::Test {
 protected:
  PrefillAwareRouterTest()
      : predicted_(kv::PredictedBlocks::Options{std::chrono::seconds(2), 16}, clock_),
        index_(kv::KvIndex::Options{kBs, 16, &predicted_}),
        load_(kv::ActiveLoad::Options{std::chrono::minutes(5), 16}, clock_) {
    for (kv::WorkerId w = 0; w < 4; ++w) index_.add_worker(w);
  }

  // A prompt of `blocks` full blocks whose first `shared` blocks are family `family`'s.
  std::vector<kv::TokenId> prompt(uint32_t family, size_t shared, size_t blocks, uint32_t own) {
    std::vector<kv::TokenId> t(blocks * kBs);
    for (size_t i = 0; i < t.size(); ++i) {
      t[i] =
          static_cast<kv::TokenId>(i < shared * kBs ? family * 100000 + i : own * 100000 + 7 * i);
    }
    return t;
  }
  void store(kv::WorkerId w, const std::vector<kv::TokenId>& tokens, size_t blocks,
             kv::Medium medium = kv::Medium::kGpu, uint64_t engine_base = 0) {
    std::vector<uint64_t> engines;
    for (size_t i = 0; i < blocks; ++i) engines.push_back(engine_base + w * 1000 + i + 1);
    ASSERT_EQ(index_.apply(kv::StoredEvent{w,
                                           std::nullopt,
                                           engines,
                                           std::span<const kv::TokenId>(tokens).first(blocks * kBs),
                                           kBs,
                                           medium,
                                           {}}),
              kv::ApplyResult::kApplied);
  }
  std::unique_ptr<Router> make(LoadModelOptions load, double overlap_weight = 1.0) {
    RouterOptions o;
    o.overlap_weight = overlap_weight;
    o.load = load;
    o.seed = 7;
    // The fixture's table is on (2 s); a model without predictions gets none.
    auto r = Router::create(std::move(o), index_, load_,
                            load.predicted_ttl_s > 0 ? &predicted_ : nullptr);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return std::move(r).value();
  }
  static LoadModelOptions prefill_aware(double predicted_ttl_s = 0) {
    LoadModelOptions o = default_load_options(LoadModel::kPrefillAware);
    o.predicted_ttl_s = predicted_ttl_s;  // > 0: the fixture's table (2 s) is given to the router
    return o;
  }

  ManualClock clock_;
  kv::PredictedBlocks predicted_;
  kv::KvIndex index_;
  kv::ActiveLoad load_;
  std::vector<kv::WorkerId> all_{0, 1, 2, 3};
};

// route() keeps only the chosen row; it is the row score() shows for the same worker, with
// predicted, lower-tier and load terms alike (two routers seeded alike over the same state).
TEST_F(PrefillAwareRouterTest, RouteReturnsTheChosenRowAsScoreShowsIt) {
  const auto p = prompt(1, 8, 10, 2);
  store(1, p, 3);
  store(2, p, 6, kv::Medium::kCpu, 50000);
  const auto hashes = kv::seq_hashes(p, kBs);
  for (const std::string policy : {"kv-aware", "least-loaded"}) {
    load_.add(0, std::vector<uint64_t>{1, 2, 3});
    LoadModelOptions load = prefill_aware(2.0);
    RouterOptions o;
    o.policy = policy;
    o.load = load;
    o.seed = 3;
    auto scorer = Router::create(o, index_, load_, &predicted_);
    auto router = Router::create(o, index_, load_, &predicted_);
    ASSERT_TRUE(scorer.ok() && router.ok());
    auto scored = (*scorer)->score(hashes, static_cast<uint32_t>(p.size()), all_);
    auto routed = (*router)->route(hashes, static_cast<uint32_t>(p.size()), all_);
    ASSERT_TRUE(scored.ok() && routed.ok());
    ASSERT_EQ(scored->table.size(), all_.size());
    ASSERT_EQ(routed->decision.table.size(), 1u) << policy;
    const Candidate& a = scored->chosen();
    const Candidate& b = routed->decision.chosen();
    EXPECT_EQ(a.worker, b.worker) << policy;
    EXPECT_EQ(a.cache_hits, b.cache_hits);
    EXPECT_EQ(a.predicted_hits, b.predicted_hits);
    EXPECT_EQ(a.lower_hits, b.lower_hits);
    EXPECT_EQ(a.disk_hits, b.disk_hits);
    EXPECT_EQ(a.credited_hits, b.credited_hits);
    EXPECT_EQ(a.active_blocks, b.active_blocks);
    EXPECT_EQ(a.load_terms.total, b.load_terms.total);
    EXPECT_EQ(a.cost, b.cost);
    EXPECT_EQ(a.gated, b.gated);
    EXPECT_EQ(scored->gated, routed->decision.gated);
    EXPECT_EQ(scored->request_blocks, routed->decision.request_blocks);
    (*router)->release(routed->ticket);
  }
}

// The case: one worker decodes a long conversation (cheap per step), another is in the
// middle of prefilling one. active-blocks sees them as equally loaded; prefill-aware does not.
TEST_F(PrefillAwareRouterTest, ADecodingWorkerIsLessLoadedThanAPrefillingOne) {
  const auto long_a = prompt(1, 0, 400, 1), long_b = prompt(2, 0, 400, 2);
  const auto a = kv::seq_hashes(long_a, kBs), b = kv::seq_hashes(long_b, kBs);
  load_.prefill_done(load_.add(0, a));  // worker 0 decodes 400 blocks
  load_.add(1, b);                      // worker 1 still prefills 400 blocks
  const auto q = prompt(3, 0, 40, 3);
  const auto qh = kv::seq_hashes(q, kBs);
  const std::vector<kv::WorkerId> two{0, 1};
  auto seed = make(default_load_options(LoadModel::kActiveBlocks));
  auto d = seed->score(qh, static_cast<uint32_t>(q.size()), two);
  ASSERT_TRUE(d.ok());
  EXPECT_DOUBLE_EQ(d->table[0].cost, d->table[1].cost) << "the seed cannot tell them apart";
  auto aware = make(prefill_aware());
  d = aware->score(qh, static_cast<uint32_t>(q.size()), two);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->worker(), 0u);
  EXPECT_DOUBLE_EQ(d->table[1].load_terms.prefill, 400.0);
  EXPECT_EQ(d->table[0].load.decode_blocks, 400u);
  EXPECT_LT(d->table[0].load_terms.total, d->table[1].load_terms.total);
}

// Routing registers the winner's uncached blocks as pending prefill; the first token moves
// the request to decode.
TEST_F(PrefillAwareRouterTest, RoutedUncachedBlocksArePendingUntilPrefillDone) {
  const auto p = prompt(1, 0, 30, 1);
  store(2, p, 10);
  auto router = make(prefill_aware());
  auto routed = router->route(kv::seq_hashes(p, kBs), static_cast<uint32_t>(p.size()), all_);
  ASSERT_TRUE(routed.ok());
  EXPECT_EQ(routed->decision.worker(), 2u);
  EXPECT_EQ(load_.load(2).prefill_blocks, 20u);
  router->prefill_done(routed->ticket);
  EXPECT_EQ(load_.load(2).prefill_blocks, 0u);
  EXPECT_EQ(load_.load(2).decode_blocks, 30u);
  router->release(routed->ticket);
  EXPECT_EQ(load_.load(2).decode_blocks, 0u);
}

// Eight siblings with a new 256-block prefix and their own 4-block suffix arrive before any
// KV event: with predicted-on-route they land together, without it they spread.
TEST_F(PrefillAwareRouterTest, ABurstOfSiblingsLandsTogetherOnlyWithPredictedBlocks) {
  for (const bool on : {true, false}) {
    auto router = make(prefill_aware(on ? 2.0 : 0.0));
    std::vector<kv::LoadTicket> tickets;
    std::set<kv::WorkerId> used;
    for (uint32_t s = 0; s < 8; ++s) {
      const auto p = prompt(on ? 10 : 20, 256, 260, 100 + s);
      auto routed = router->route(kv::seq_hashes(p, kBs), static_cast<uint32_t>(p.size()), all_);
      ASSERT_TRUE(routed.ok());
      used.insert(routed->decision.worker());
      if (s > 0 && on) {
        EXPECT_EQ(routed->decision.chosen().predicted_hits, 256u);
      }
      tickets.push_back(routed->ticket);
    }
    EXPECT_EQ(used.size(), on ? 1u : 4u) << (on ? "predicted on" : "predicted off");
    for (const auto& t : tickets) router->release(t);
  }
}

// Predicted entries count only until the TTL passes, and a BlockStored replaces them by
// confirmed hits.
TEST_F(PrefillAwareRouterTest, PredictedHitsExpireOrBecomeConfirmed) {
  auto router = make(prefill_aware(2.0));
  const auto p = prompt(1, 0, 20, 1);
  const auto h = kv::seq_hashes(p, kBs);
  auto routed = router->route(h, static_cast<uint32_t>(p.size()), all_);
  ASSERT_TRUE(routed.ok());
  const kv::WorkerId w = routed->decision.worker();
  auto d = router->score(h, static_cast<uint32_t>(p.size()), all_);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->table[w].predicted_hits, 20u);
  EXPECT_EQ(d->table[w].cache_hits, 0u);
  store(w, p, 12);
  d = router->score(h, static_cast<uint32_t>(p.size()), all_);
  EXPECT_EQ(d->table[w].cache_hits, 12u);
  EXPECT_EQ(d->table[w].predicted_hits, 8u) << "the rest is still being computed";
  clock_.advance(std::chrono::seconds(3));
  d = router->score(h, static_cast<uint32_t>(p.size()), all_);
  EXPECT_EQ(d->table[w].cache_hits, 12u);
  EXPECT_EQ(d->table[w].predicted_hits, 0u);
}

// A CPU-tier hit is worth its credit: between equally loaded workers, the one whose blocks are
// on CPU beats a cold one but loses to a GPU hit; the seed's model ignores the CPU copy.
TEST_F(PrefillAwareRouterTest, LowerTierHitsAreDiscountedNotIgnored) {
  const auto p = prompt(1, 0, 40, 1);
  store(0, p, 40);                          // GPU on worker 0
  store(1, p, 40, kv::Medium::kCpu, 5000);  // CPU on worker 1
  const auto h = kv::seq_hashes(p, kBs);
  auto aware = make(prefill_aware());
  auto d = aware->score(h, static_cast<uint32_t>(p.size()), all_);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->table[1].lower_hits, 40u);
  EXPECT_DOUBLE_EQ(d->table[1].credited_hits, 30.0);
  EXPECT_DOUBLE_EQ(d->table[1].cost, 10.0);
  EXPECT_DOUBLE_EQ(d->table[2].cost, 40.0);
  EXPECT_EQ(d->worker(), 0u);
  const std::vector<kv::WorkerId> no_gpu{1, 2, 3};
  EXPECT_EQ(aware->score(h, static_cast<uint32_t>(p.size()), no_gpu)->worker(), 1u);
  auto seed = make(default_load_options(LoadModel::kActiveBlocks));
  d = seed->score(h, static_cast<uint32_t>(p.size()), all_);
  EXPECT_DOUBLE_EQ(d->table[1].credited_hits, 0.0);
  EXPECT_DOUBLE_EQ(d->table[1].cost, 40.0);
}

// The gate: a candidate past the threshold is busy and its cache earns it nothing while another
// candidate is not busy (a hot prefix cannot pile onto it); past it everywhere, load alone.
TEST_F(PrefillAwareRouterTest, TheOverloadGateStopsAffinityForBusyWorkers) {
  const auto p = prompt(1, 0, 100, 1);
  store(0, p, 100);
  const auto h = kv::seq_hashes(p, kBs);
  for (kv::WorkerId w = 0; w < 4; ++w) {
    load_.add(w, kv::seq_hashes(prompt(50 + w, 0, w == 0 ? 250 : 200 + 10 * w, 50 + w), kBs));
  }
  LoadModelOptions o = prefill_aware();
  auto off = make(o);
  auto d = off->score(h, static_cast<uint32_t>(p.size()), all_);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->worker(), 0u) << "250 pending + 0 uncached beats 210 + 100";
  EXPECT_FALSE(d->chosen().gated);
  o.overload_blocks = 300;  // nobody is busy
  EXPECT_EQ(make(o)->score(h, static_cast<uint32_t>(p.size()), all_)->worker(), 0u);
  o.overload_blocks = 240;  // only worker 0 is busy: its hits stop counting
  d = make(o)->score(h, static_cast<uint32_t>(p.size()), all_);
  EXPECT_EQ(d->worker(), 1u) << "the least loaded of the others";
  EXPECT_TRUE(d->table[0].gated);
  EXPECT_DOUBLE_EQ(d->table[0].cost, 350.0);
  EXPECT_FALSE(d->table[1].gated);
  o.overload_blocks = 150;  // everyone is busy: load alone
  d = make(o)->score(h, static_cast<uint32_t>(p.size()), all_);
  EXPECT_EQ(d->worker(), 1u);
  EXPECT_DOUBLE_EQ(d->chosen().cost, 210.0);
  EXPECT_TRUE(d->chosen().gated);
}

// A fresh engine reading of requests this router did not send (another router, direct
// clients) loads that worker; a stale one is ignored and the router's own counts rule.
TEST_F(PrefillAwareRouterTest, FreshEngineReadingsCountHiddenRequestsStaleOnesDoNot) {
  kv::EngineSignals signals(16, clock_);
  LoadModelOptions o = prefill_aware();
  o.engine_poll_interval_s = 1;  // a reading counts for 3 s
  RouterOptions ro;
  ro.load = o;
  auto router = std::move(Router::create(ro, index_, load_, &predicted_, &signals)).value();
  const auto p = prompt(1, 0, 40, 1);
  const auto h = kv::seq_hashes(p, kBs);
  const std::vector<kv::WorkerId> two{0, 1};
  signals.record(0, 6, 2, 0.5, 0, 0);  // worker 0: 8 requests, none ours
  auto d = router->score(h, static_cast<uint32_t>(p.size()), two);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->worker(), 1u);
  EXPECT_TRUE(d->table[0].engine_fresh);
  EXPECT_GT(d->table[0].load_terms.hidden, 0.0);
  clock_.advance(std::chrono::seconds(4));
  d = router->score(h, static_cast<uint32_t>(p.size()), two);
  EXPECT_FALSE(d->table[0].engine_fresh) << "older than the max age: not used";
  EXPECT_DOUBLE_EQ(d->table[0].load_terms.hidden, 0.0);
  EXPECT_DOUBLE_EQ(d->table[0].cost, d->table[1].cost);
}

// Siblings routed at the same instant on many threads still land together: each route()
// decides on what the routes before it registered.
TEST_F(PrefillAwareRouterTest, SiblingsRoutedAtOnceOnManyThreadsLandTogether) {
  auto router = make(prefill_aware(2.0));
  constexpr int kThreads = 16;
  std::vector<std::vector<uint64_t>> prompts;
  for (int s = 0; s < kThreads; ++s) prompts.push_back(kv::seq_hashes(prompt(30, 256, 260, 200 + s), kBs));
  std::atomic<int> waiting{kThreads};
  std::vector<kv::WorkerId> chosen(kThreads);
  std::vector<std::thread> threads;
  for (int s = 0; s < kThreads; ++s) {
    threads.emplace_back([&, s] {
      waiting.fetch_sub(1);
      while (waiting.load() > 0) {
      }  // all start together
      auto routed = router->route(prompts[s], 260 * kBs, all_);
      chosen[s] = routed.ok() ? routed->decision.worker() : 99;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(std::set<kv::WorkerId>(chosen.begin(), chosen.end()).size(), 1u);
}

}  // namespace
}  // namespace infera::routing
