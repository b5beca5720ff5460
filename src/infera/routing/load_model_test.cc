#include "infera/routing/load_model.h"

#include <gtest/gtest.h>

namespace infera::routing {
namespace {

TEST(LoadModelTest, NamesRoundTrip) {
  for (const LoadModel m : {LoadModel::kActiveBlocks, LoadModel::kPrefillAware}) {
    auto parsed = parse_load_model(load_model_name(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  auto bad = parse_load_model("queue-depth");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("prefill-aware"), std::string::npos);
}

TEST(LoadModelTest, TierCreditParsesAnySubsetAndRejectsNonsense) {
  auto all = parse_tier_credit("gpu=1,cpu=0.75,disk=0.25");
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_DOUBLE_EQ(all->gpu, 1.0);
  EXPECT_DOUBLE_EQ(all->cpu, 0.75);
  EXPECT_DOUBLE_EQ(all->disk, 0.25);
  auto cpu_only = parse_tier_credit("cpu=0.5");
  ASSERT_TRUE(cpu_only.ok());
  EXPECT_DOUBLE_EQ(cpu_only->gpu, 1.0) << "an unnamed GPU tier keeps full credit";
  EXPECT_DOUBLE_EQ(cpu_only->cpu, 0.5);
  EXPECT_DOUBLE_EQ(cpu_only->disk, 0.0) << "an unnamed lower tier earns nothing";
  for (const char* bad : {"cpu", "cpu=", "cpu=x", "cpu=1.5", "cpu=-1", "tape=0.1",
                          "cpu=0.5,,disk=0", "cpu=0.5,cpu=0.6", "cpu=nan"}) {
    EXPECT_FALSE(parse_tier_credit(bad).ok()) << bad;
  }
  EXPECT_EQ(format_tier_credit(*all), "gpu=1,cpu=0.75,disk=0.25");
}

TEST(LoadModelTest, ActiveBlocksIsTheSeedsLoadTerm) {
  const LoadModelOptions o = default_load_options(LoadModel::kActiveBlocks);
  kv::WorkerLoad l;
  l.active_blocks = 6;
  l.prefill_blocks = 100;
  l.decode_blocks = 100;
  const LoadTerms t = load_terms(o, l);
  EXPECT_DOUBLE_EQ(t.total, 6.0);
  EXPECT_EQ(o.tier_credit.cpu, 0.0) << "the seed credits GPU hits only";
  EXPECT_EQ(o.predicted_ttl_s, 0.0);
  EXPECT_EQ(o.overload_blocks, 0.0);
}

TEST(LoadModelTest, PrefillAwareSeparatesPendingPrefillFromDecode) {
  LoadModelOptions o = default_load_options(LoadModel::kPrefillAware);
  o.prefill_weight = 1.0;
  o.decode_weight = 0.1;
  kv::WorkerLoad prefilling;
  prefilling.active_blocks = 400;
  prefilling.prefill_blocks = 400;
  kv::WorkerLoad decoding;
  decoding.active_blocks = 400;
  decoding.decode_blocks = 400;
  const LoadTerms p = load_terms(o, prefilling);
  const LoadTerms d = load_terms(o, decoding);
  EXPECT_DOUBLE_EQ(p.prefill, 400.0);
  EXPECT_DOUBLE_EQ(p.total, 400.0);
  EXPECT_DOUBLE_EQ(d.decode, 40.0);
  EXPECT_DOUBLE_EQ(d.total, 40.0) << "decoding the same blocks weighs a tenth";
}

TEST(LoadModelTest, LowerTierHitsEarnTheirCredit) {
  const TierCredit c{1.0, 0.75, 0.25};
  EXPECT_DOUBLE_EQ(credited_hits(c, 4, 2, 0, 0), 6.0);
  EXPECT_DOUBLE_EQ(credited_hits(c, 4, 0, 4, 0), 7.0);
  EXPECT_DOUBLE_EQ(credited_hits(c, 4, 0, 4, 4), 5.0);
  EXPECT_DOUBLE_EQ(credited_hits(c, 4, 0, 4, 9), 5.0) << "disk is a part of the lower run";
  EXPECT_DOUBLE_EQ(credited_hits(TierCredit{}, 4, 0, 4, 2), 4.0);
}

TEST(LoadModelTest, ResolveAppliesTheModelsDefaultsThenTheFlags) {
  config::LoadModelFlags f;
  f.model = "prefill-aware";
  auto d = resolve_load_options(f);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->model, LoadModel::kPrefillAware);
  EXPECT_DOUBLE_EQ(d->tier_credit.cpu, 0.75);
  EXPECT_GT(d->predicted_ttl_s, 0.0);
  f.tier_credit = "cpu=0.5";
  f.predicted_ttl_s = 0;
  f.decode_weight = 0.2;
  auto o = resolve_load_options(f);
  ASSERT_TRUE(o.ok());
  EXPECT_DOUBLE_EQ(o->tier_credit.cpu, 0.5);
  EXPECT_DOUBLE_EQ(o->predicted_ttl_s, 0.0);
  EXPECT_DOUBLE_EQ(o->decode_weight, 0.2);
  f.decode_weight = -1;
  auto bad = resolve_load_options(f);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-decode-load-weight"), std::string::npos);
  f.decode_weight.reset();
  f.tier_credit = "cpu=2";
  bad = resolve_load_options(f);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-tier-credit"), std::string::npos);
  f.tier_credit.reset();
  f.model = "fastest";
  bad = resolve_load_options(f);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-load-model"), std::string::npos);
}

TEST(LoadModelTest, RequestsTheEngineHoldsBeyondOursAreHiddenLoad) {
  LoadModelOptions o = default_load_options(LoadModel::kPrefillAware);
  o.decode_weight = 0.1;
  kv::WorkerLoad ours;
  ours.active_requests = 2;
  ours.prefill_requests = 1;
  ours.prefill_blocks = 50;
  kv::EngineReading engine;
  engine.waiting = 4;  // ours in prefill is one of them: 3 hidden waiting
  engine.running = 3;  // 7 in all, 2 ours: 5 hidden, so 2 hidden running
  engine.ours_active = 2;
  engine.ours_prefill = 1;
  const LoadTerms t = load_terms(o, ours, 0, &engine, 100);
  EXPECT_DOUBLE_EQ(t.hidden, 3 * 100.0 + 0.1 * 2 * 100.0);
  EXPECT_DOUBLE_EQ(t.total, 50.0 + 320.0);
  // Our counts when the engine was read, not now: a request of ours that finished since the
  // reading is not mistaken for someone else's.
  kv::WorkerLoad now = ours;
  now.active_requests = 1;
  now.prefill_requests = 0;
  engine.waiting = 1;
  engine.running = 1;
  EXPECT_DOUBLE_EQ(load_terms(o, now, 0, &engine, 100).hidden, 0.0);
  EXPECT_DOUBLE_EQ(
      load_terms(default_load_options(LoadModel::kActiveBlocks), ours, 0, &engine, 100).hidden, 0.0)
      << "the seed's model never reads the engines";
}

}  // namespace
}  // namespace infera::routing
