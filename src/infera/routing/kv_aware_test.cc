#include "infera/routing/kv_aware.h"

#include <gtest/gtest.h>

#include "infera/common/clock.h"
#include "infera/kv/active_load.h"
#include "infera/kv/index.h"
#include "infera/routing/router.h"

namespace infera::routing {
namespace {

// The product documentation's worked example (docs/contracts.md section 6), on the cost alone:
// a 10-block prompt, weight 1.0; W0 hits 8, active 6 -> cost 8; W1 hits 0, active 1 -> 11.
TEST(KvAwareTest, WorkedExampleCosts) {
  EXPECT_DOUBLE_EQ(kv_aware_cost(1.0, 10, 8, 6), 8.0);
  EXPECT_DOUBLE_EQ(kv_aware_cost(1.0, 10, 0, 1), 11.0);
}

TEST(KvAwareTest, WorkedExamplePicksW0) {
  KvAwarePolicy policy;
  Rng rng(1);
  std::vector<Candidate> c{{0, 8, 6, 1, 0}, {1, 0, 1, 1, 0}};
  EXPECT_EQ(policy.choose({10, 1.0, 0.0}, c, rng), 0u);
  EXPECT_DOUBLE_EQ(c[0].cost, 8.0);
  EXPECT_DOUBLE_EQ(c[1].cost, 11.0);
}

TEST(KvAwareTest, WeightZeroPicksTheLessLoadedWorker) {
  KvAwarePolicy policy;
  Rng rng(1);
  std::vector<Candidate> c{{0, 8, 6, 1, 0}, {1, 0, 1, 1, 0}};
  EXPECT_EQ(policy.choose({10, 0.0, 0.0}, c, rng), 1u);
  EXPECT_DOUBLE_EQ(c[0].cost, 6.0);
  EXPECT_DOUBLE_EQ(c[1].cost, 1.0);
}

// A router over many workers hands the policy two columns instead of rows: the same rows as
// columns pick the same winner with the same costs, gates and use of the Rng, with and without
// the gate and at temperature 0 and above.
TEST(KvAwareTest, ColumnsPickLikeRows) {
  Rng data(11);
  for (const double gate : {0.0, 40.0}) {
    for (const double temperature : {0.0, 0.5}) {
      LoadModelOptions load = default_load_options(LoadModel::kPrefillAware);
      load.overload_blocks = gate;
      const ScoreRequest request{20, 1.5, temperature, {}, &load};
      for (int round = 0; round < 50; ++round) {
        std::vector<Candidate> rows(1 + data.uniform(300));
        ScoreColumns columns;
        columns.resize(rows.size());
        for (size_t i = 0; i < rows.size(); ++i) {
          // Few distinct values, so exact ties are common.
          rows[i].credited_hits = static_cast<double>(data.uniform(4) * 5);
          rows[i].load_terms.total = static_cast<double>(data.uniform(6) * 10);
          columns.credited[i] = rows[i].credited_hits;
          columns.load[i] = rows[i].load_terms.total;
        }
        KvAwarePolicy by_rows, by_columns;
        Rng rng_rows(round), rng_columns(round);
        const size_t a = by_rows.choose(request, rows, rng_rows);
        const size_t b = by_columns.choose_columns(request, columns, rng_columns);
        ASSERT_EQ(a, b) << "gate " << gate << " temperature " << temperature;
        for (size_t i = 0; i < rows.size(); ++i) {
          ASSERT_EQ(rows[i].cost, columns.cost[i]);
          ASSERT_EQ(rows[i].gated, columns.gated[i] != 0);
        }
        ASSERT_EQ(rng_rows.next(), rng_columns.next());
      }
    }
  }
}

// The same example end to end through the real index and active load: W0 caches the first 8
// blocks of a 160-token prompt and has 6 distinct blocks in flight, W1 caches nothing and has 1.
TEST(KvAwareTest, WorkedExampleThroughTheRouter) {
  constexpr uint32_t kBs = 16;
  kv::KvIndex index(kv::KvIndex::Options{kBs, 8});
  ManualClock clock;
  kv::ActiveLoad load(kv::ActiveLoad::Options{std::chrono::minutes(5), 8}, clock);
  index.add_worker(0);
  index.add_worker(1);
  std::vector<kv::TokenId> prompt(10 * kBs);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<kv::TokenId>(i + 3);
  std::vector<uint64_t> engines{1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(index.apply(kv::StoredEvent{0, std::nullopt, engines,
                                        std::span<const kv::TokenId>(prompt).first(8 * kBs), kBs,
                                        kv::Medium::kGpu, {}}),
            kv::ApplyResult::kApplied);
  load.add(0, std::vector<uint64_t>{101, 102, 103, 104, 105, 106});
  load.add(1, std::vector<uint64_t>{201});
  auto router = Router::create(RouterOptions{}, index, load);
  ASSERT_TRUE(router.ok());
  const std::vector<uint64_t> hashes = kv::seq_hashes(prompt, kBs);
  const std::vector<kv::WorkerId> workers{0, 1};
  auto d = (*router)->score(hashes, static_cast<uint32_t>(prompt.size()), workers);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->request_blocks, 10u);
  EXPECT_EQ(d->table[0].cache_hits, 8u);
  EXPECT_EQ(d->table[0].active_blocks, 6u);
  EXPECT_DOUBLE_EQ(d->table[0].cost, 8.0);
  EXPECT_EQ(d->table[1].cache_hits, 0u);
  EXPECT_EQ(d->table[1].active_blocks, 1u);
  EXPECT_DOUBLE_EQ(d->table[1].cost, 11.0);
  EXPECT_EQ(d->worker(), 0u);

  auto balanced = Router::create(RouterOptions{.overlap_weight = 0.0}, index, load);
  ASSERT_TRUE(balanced.ok());
  auto d0 = (*balanced)->score(hashes, static_cast<uint32_t>(prompt.size()), workers);
  ASSERT_TRUE(d0.ok());
  EXPECT_EQ(d0->worker(), 1u);
}

TEST(KvAwareTest, RequestBlocksRoundUpButHitsNeverExceedThem) {
  // 170 tokens = 11 request blocks (ceil), 10 of them full and hashable.
  EXPECT_DOUBLE_EQ(kv_aware_cost(1.0, 11, 10, 0), 1.0);
  EXPECT_DOUBLE_EQ(kv_aware_cost(2.0, 3, 5, 4), 4.0);
}

}  // namespace
}  // namespace infera::routing
