#include "infera/engine/engine_core.h"

#include <gtest/gtest.h>

#include <cmath>

#include "infera/common/random.h"
#include "infera/engine/engine_test_driver.h"

namespace infera::engine {
namespace {

using testing::concat;
using testing::Driver;
using testing::tokens_of;
using Hashes = std::vector<uint64_t>;

EngineConfig small_config(uint32_t num_gpu_blocks = 1025) {
  EngineConfig c;
  c.num_gpu_blocks = num_gpu_blocks;
  c.enable_kv_events = true;
  return c;
}

std::vector<events::BlockStored> stored_events(const std::vector<events::Event>& all) {
  std::vector<events::BlockStored> out;
  for (const auto& e : all) {
    if (auto* s = std::get_if<events::BlockStored>(&e)) out.push_back(*s);
  }
  return out;
}

Hashes removed_hashes(const std::vector<events::Event>& all) {
  Hashes out;
  for (const auto& e : all) {
    if (auto* r = std::get_if<events::BlockRemoved>(&e)) {
      out.insert(out.end(), r->block_hashes.begin(), r->block_hashes.end());
    }
  }
  return out;
}

// ---- Requests and outputs -------------------------------------------------------------------

TEST(EngineCoreTest, RejectsInvalidRequests) {
  ManualClock clock;
  EngineConfig c = small_config(11);  // 10 usable blocks of 16: max_model_len 160
  EngineCore core(c, clock);
  EXPECT_EQ(core.max_model_len(), 160u);
  const auto p = tokens_of(1, 100);
  auto add = [&](RequestId id, std::span<const TokenId> prompt, uint32_t max_tokens,
                 uint32_t min_tokens = 0) {
    return core.add_request(RequestSpec{id, prompt, max_tokens, min_tokens, false}).code();
  };
  EXPECT_EQ(add(1, {}, 10), StatusCode::kInvalidArgument);
  EXPECT_EQ(add(1, p, 0), StatusCode::kInvalidArgument);
  EXPECT_EQ(add(1, p, 10, 11), StatusCode::kInvalidArgument);
  EXPECT_EQ(add(1, p, 61), StatusCode::kInvalidArgument);  // 161 > max_model_len
  EXPECT_EQ(add(1, p, 60), StatusCode::kOk);
  EXPECT_EQ(add(1, p, 10), StatusCode::kInvalidArgument);  // id in use
  EXPECT_TRUE(core.has_unfinished_requests());
}

TEST(EngineCoreTest, IgnoreEosGeneratesExactlyMaxTokensOfTheOutputModel) {
  Driver d(small_config());
  const auto prompt = tokens_of(1, 37);
  d.add(1, prompt, 25, /*ignore_eos=*/true);
  d.run();
  const auto& t = d.trace(1);
  ASSERT_EQ(t.tokens.size(), 25u);
  EXPECT_EQ(t.finish, FinishReason::kLength);
  const OutputModel model({});
  const uint64_t key = model.prompt_key(prompt);
  for (uint32_t i = 0; i < 25; ++i) EXPECT_EQ(t.tokens[i], model.token_at(key, i)) << i;
  EXPECT_FALSE(d.core().has_unfinished_requests());
  EXPECT_EQ(d.core().block_pool().num_free(), d.core().block_pool().num_usable());
}

TEST(EngineCoreTest, StopsWithEosAtTheNaturalLengthUnlessMinTokensHoldsItBack) {
  EngineConfig c = small_config();
  c.natural_output_min = 4;
  c.natural_output_max = 8;
  Driver d(c);
  const auto prompt = tokens_of(2, 20);
  const OutputModel model({c.output_seed, c.vocab_size, c.eos_token_id, 4, 8});
  const uint32_t natural = model.natural_eos_index(model.prompt_key(prompt));
  d.add(1, prompt, 100, /*ignore_eos=*/false);
  d.add(2, prompt, 100, /*ignore_eos=*/false, /*min_tokens=*/30);
  d.add(3, prompt, natural + 1, /*ignore_eos=*/false);  // EOS would be the last allowed token
  d.run();
  const auto& t1 = d.trace(1);
  ASSERT_EQ(t1.tokens.size(), natural + 1);
  EXPECT_EQ(t1.tokens.back(), c.eos_token_id);
  EXPECT_EQ(t1.finish, FinishReason::kStop);
  const auto& t2 = d.trace(2);
  ASSERT_EQ(t2.tokens.size(), 31u);  // EOS first allowed at index min_tokens
  EXPECT_EQ(t2.tokens.back(), c.eos_token_id);
  EXPECT_EQ(t2.finish, FinishReason::kStop);
  for (size_t i = 0; i + 1 < t2.tokens.size(); ++i) EXPECT_NE(t2.tokens[i], c.eos_token_id);
  // vLLM checks the length cap before EOS.
  EXPECT_EQ(d.trace(3).finish, FinishReason::kLength);
  EXPECT_EQ(d.core().metrics().requests_finished_stop, 2u);
  EXPECT_EQ(d.core().metrics().requests_finished_length, 1u);
}

// ---- Prefix cache ---------------------------------------------------------------------------

TEST(EngineCoreTest, SecondIdenticalPromptReportsTheFullBlocksOfTheFirstAsCached) {
  Driver d(small_config());
  const auto prompt = tokens_of(3, 100);  // 6 full blocks + 4 tokens
  d.add(1, prompt, 5);
  d.run();
  d.add(2, prompt, 5);
  d.run();
  EXPECT_EQ(d.trace(1).cached_tokens, 0u);
  EXPECT_EQ(d.trace(2).cached_tokens, 96u);
  EXPECT_EQ(d.trace(1).tokens, d.trace(2).tokens);
  const EngineMetrics m = d.core().metrics();
  EXPECT_EQ(m.prefix_cache_queries, 200u);
  EXPECT_EQ(m.prefix_cache_hits, 96u);
  EXPECT_EQ(m.prefix_cache_requests, 2u);
}

TEST(EngineCoreTest, FullyCachedPromptStillRecomputesItsLastBlock) {
  // As vLLM: the hit is capped at prompt_len - 1 tokens so the last token yields logits.
  Driver d(small_config());
  const auto prompt = tokens_of(4, 64);  // exactly 4 blocks
  d.add(1, prompt, 3);
  d.run();
  d.add(2, prompt, 3);
  d.run();
  EXPECT_EQ(d.trace(2).cached_tokens, 48u);
  // The recomputed block 3 is cached a second time: the same hash stored twice.
  Hashes h;
  d.core().block_hashes(prompt, h);
  int stores_of_last = 0;
  for (const auto& s : stored_events(d.all_events())) {
    for (const uint64_t x : s.block_hashes) stores_of_last += x == h[3] ? 1 : 0;
  }
  EXPECT_EQ(stores_of_last, 2);
  EXPECT_EQ(d.core().block_pool().num_cached_hashes(), 4u);
  EXPECT_EQ(d.core().block_pool().num_cached_blocks(), 5u);
}

TEST(EngineCoreTest, BlockStoredEventsCarryVllmFields) {
  Driver d(small_config());
  const auto prompt = tokens_of(5, 40);
  d.add(1, prompt, 1);
  d.run();
  ASSERT_EQ(d.batches().size(), 1u);
  const auto stored = stored_events(d.batches()[0].events);
  ASSERT_EQ(stored.size(), 1u);
  const auto& s = stored[0];
  Hashes h;
  d.core().block_hashes(prompt, h);
  EXPECT_EQ(s.block_hashes, h);
  EXPECT_FALSE(s.parent_block_hash.has_value());  // block 0 of the request
  EXPECT_EQ(s.token_ids, std::vector<TokenId>(prompt.begin(), prompt.begin() + 32));
  EXPECT_EQ(s.block_size, 16u);
  EXPECT_EQ(s.medium, "GPU");
  EXPECT_FALSE(s.lora_id.has_value());
  EXPECT_FALSE(s.lora_name.has_value());
  EXPECT_EQ(s.group_idx, 0);
  EXPECT_EQ(s.kv_cache_spec_kind, "full_attention");
  EXPECT_EQ(s.extra_keys_count, 2u);
  EXPECT_EQ(d.batches()[0].ts, to_seconds(d.trace(1).times[0]));
  EXPECT_FALSE(d.batches()[0].dp_rank.has_value());
}

// A LoRA adapter's KV is not the base model's: the same prompt under an adapter hashes apart
// (no prefix hit across them, as vLLM puts the adapter in every block's extra keys), hits its
// own blocks the second time, and its BlockStored events name the adapter.
TEST(EngineCoreTest, ALoraAdaptersBlocksAreItsOwnAndItsEventsNameIt) {
  Driver d(small_config());
  const auto prompt = tokens_of(6, 100);  // 6 full blocks + 4 tokens
  d.add(1, prompt, 2);
  d.run();
  auto lora = [&](RequestId id) {
    RequestSpec spec;
    spec.id = id;
    spec.prompt = prompt;
    spec.max_tokens = 2;
    spec.ignore_eos = true;
    spec.lora_name = "sql-lora";
    d.add(spec);
    d.run();
  };
  lora(2);
  lora(3);
  EXPECT_EQ(d.trace(2).cached_tokens, 0u);   // the base model's blocks are not the adapter's
  EXPECT_EQ(d.trace(3).cached_tokens, 96u);  // the adapter's own are
  const auto stored = stored_events(d.all_events());
  ASSERT_GE(stored.size(), 2u);
  EXPECT_FALSE(stored.front().lora_name.has_value());
  bool named = false;
  for (const auto& s : stored) named = named || s.lora_name == std::optional<std::string>("sql-lora");
  EXPECT_TRUE(named);
}

TEST(EngineCoreTest, GeneratedTokensFillBlocksThatBecomeCached) {
  Driver d(small_config());
  const auto prompt = tokens_of(6, 20);
  d.add(1, prompt, 30);  // 50 tokens in all; the KV of the last token is never computed
  d.run();
  const auto full = concat(prompt, d.trace(1).tokens);
  Hashes h;
  d.core().block_hashes(full, h);
  ASSERT_EQ(h.size(), 3u);
  const auto stored = stored_events(d.all_events());
  ASSERT_EQ(stored.size(), 3u);  // block 0 at prefill, blocks 1 and 2 as decoding fills them
  for (size_t b = 0; b < 3; ++b) {
    EXPECT_EQ(stored[b].block_hashes, Hashes{h[b]});
    if (b == 0) {
      EXPECT_FALSE(stored[b].parent_block_hash.has_value());
    } else {
      EXPECT_EQ(stored[b].parent_block_hash, h[b - 1]);
    }
    EXPECT_EQ(stored[b].token_ids,
              std::vector<TokenId>(full.begin() + 16 * b, full.begin() + 16 * (b + 1)));
  }
  // A follow-up turn carrying the generated text hits those blocks.
  d.add(2, concat(full, tokens_of(7, 10)), 1);
  d.run();
  EXPECT_EQ(d.trace(2).cached_tokens, 48u);
}

TEST(EngineCoreTest, FreedBlocksAreEvictedInLeastRecentlyFreedOrderOnlyWhenReused) {
  EngineConfig c = small_config(7);  // 6 usable blocks
  Driver d(c);
  const auto a = tokens_of(10, 32), b = tokens_of(11, 32), cc = tokens_of(12, 64);
  Hashes ha, hb, hc;
  d.core().block_hashes(a, ha);
  d.core().block_hashes(b, hb);
  d.core().block_hashes(cc, hc);

  d.add(1, a, 1);  // blocks 1,2; freed tail first: queue 3 4 5 6 2 1
  d.run();
  d.add(2, b, 1);  // blocks 3,4; queue 5 6 2 1 4 3
  d.run();
  EXPECT_TRUE(removed_hashes(d.all_events()).empty());  // finishing evicts nothing
  EXPECT_EQ(d.core().cached_prefix_blocks(a), 2u);
  EXPECT_EQ(d.core().cached_prefix_blocks(b), 2u);

  // C needs 4 blocks: 5, 6 (never used), then A's (freed before B's), tail block first.
  d.add(3, cc, 1);  // queue after: 4 3 1 2 6 5
  d.run();
  EXPECT_EQ(removed_hashes(d.all_events()), (Hashes{ha[1], ha[0]}));
  EXPECT_EQ(d.core().cached_prefix_blocks(a), 0u);
  EXPECT_EQ(d.core().cached_prefix_blocks(b), 2u);

  // A follow-up of B hits B's two blocks, which moves them behind C's in the LRU order; its
  // third block reuses the head of the queue, C's last block.
  const auto b_follow = concat(b, tokens_of(13, 16));
  Hashes hd;
  d.core().block_hashes(b_follow, hd);
  d.add(4, b_follow, 1);  // queue after: 2 6 5 1 4 3
  d.run();
  EXPECT_EQ(d.trace(4).cached_tokens, 32u);
  EXPECT_EQ(removed_hashes(d.all_events()), (Hashes{ha[1], ha[0], hc[3]}));

  // Now C's remaining blocks are older than B's: a new 4-block request evicts C first.
  d.add(5, tokens_of(14, 64), 1);
  d.run();
  EXPECT_EQ(removed_hashes(d.all_events()),
            (Hashes{ha[1], ha[0], hc[3], hc[2], hc[1], hc[0], hd[2]}));
  EXPECT_EQ(d.core().cached_prefix_blocks(b), 2u);
  EXPECT_EQ(d.core().cached_prefix_blocks(cc), 0u);
}

// ---- Scheduling -----------------------------------------------------------------------------

TEST(EngineCoreTest, PreemptionUnderBlockPressureStillFinishesEveryRequestCorrectly) {
  std::vector<std::vector<TokenId>> prompts;
  for (uint32_t i = 0; i < 8; ++i) prompts.push_back(tokens_of(20 + i, 40 + 3 * i));

  // Reference: a cache large enough that nothing is preempted.
  Driver ref(small_config(4097));
  for (uint32_t i = 0; i < 8; ++i) ref.add(i, prompts[i], 70);
  ref.run();
  EXPECT_EQ(ref.core().metrics().num_preemptions, 0u);

  Driver d(small_config(25));  // 24 usable blocks; the 8 requests need up to 56
  for (uint32_t i = 0; i < 8; ++i) d.add(i, prompts[i], 70);
  d.run();
  EXPECT_GT(d.core().metrics().num_preemptions, 0u);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(d.trace(i).tokens, ref.trace(i).tokens) << "request " << i;
    EXPECT_EQ(d.trace(i).finish, FinishReason::kLength);
  }
  EXPECT_FALSE(d.core().has_unfinished_requests());
  EXPECT_EQ(d.core().block_pool().num_free(), d.core().block_pool().num_usable());
  bool saw_preemption_step = false;
  for (const auto& s : d.steps()) saw_preemption_step |= s.num_preempted > 0;
  EXPECT_TRUE(saw_preemption_step);
}

TEST(EngineCoreTest, ChunkedPrefillSpansStepsBoundedByTheTokenBudget) {
  EngineConfig c = small_config();
  c.max_num_batched_tokens = 64;
  Driver d(c);
  d.add(1, tokens_of(30, 200), 3);
  d.run();
  const auto& steps = d.steps();
  ASSERT_EQ(steps.size(), 4u + 2u);  // 64+64+64+8 prompt tokens, then two decodes
  EXPECT_EQ(steps[0].shape.prefill_tokens, 64u);
  EXPECT_EQ(steps[1].shape.prefill_tokens, 64u);
  EXPECT_EQ(steps[2].shape.prefill_tokens, 64u);
  EXPECT_EQ(steps[3].shape.prefill_tokens, 8u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(steps[static_cast<size_t>(i)].num_outputs, 0u);
  EXPECT_EQ(steps[3].num_outputs, 1u);  // the first token comes with the last chunk
  EXPECT_EQ(d.trace(1).times[0], steps[3].end);
}

TEST(EngineCoreTest, ChunkedPrefillSharesTheBudgetWithDecodes) {
  EngineConfig c = small_config();
  c.max_num_batched_tokens = 64;
  Driver d(c);
  d.add(1, tokens_of(31, 10), 50);
  d.run(Nanos(1));  // request 1 is now decoding
  d.add(2, tokens_of(32, 300), 2);
  d.run();
  size_t mixed = 0;
  for (const auto& s : d.steps()) {
    EXPECT_LE(s.shape.prefill_tokens + s.shape.decode_rows, 64u);
    if (s.shape.decode_rows == 1 && s.shape.prefill_tokens == 63) ++mixed;
  }
  EXPECT_GE(mixed, 4u);  // 300 tokens at 63 a step next to request 1's decode
  EXPECT_EQ(d.trace(2).tokens.size(), 2u);
}

TEST(EngineCoreTest, MaxNumSeqsBoundsTheRunningBatch) {
  EngineConfig c = small_config();
  c.max_num_seqs = 3;
  Driver d(c);
  for (uint32_t i = 0; i < 7; ++i) d.add(i, tokens_of(40 + i, 30), 10);
  for (int i = 0; i < 5; ++i) {
    d.run(d.core().next_event_time());
    const EngineMetrics m = d.core().metrics();
    EXPECT_LE(m.num_running, 3u);
    EXPECT_EQ(m.num_running + m.num_waiting, 7u);
  }
  d.run();
  for (const auto& s : d.steps()) EXPECT_LE(s.num_scheduled, 3u);
  EXPECT_EQ(d.traces().size(), 7u);
  for (const auto& [id, t] : d.traces()) EXPECT_EQ(t.tokens.size(), 10u) << id;
}

TEST(EngineCoreTest, AbortedRequestsStopAndReleaseTheirBlocks) {
  EngineConfig c = small_config();
  c.max_num_seqs = 1;
  Driver d(c);
  d.add(1, tokens_of(50, 40), 100);
  d.add(2, tokens_of(51, 40), 100);  // waits behind request 1
  for (int i = 0; i < 3; ++i) d.run(d.core().next_event_time());
  ASSERT_EQ(d.trace(1).tokens.size(), 2u);  // and step 2 is in flight
  EXPECT_TRUE(d.core().abort(2));           // waiting: leaves at once
  EXPECT_EQ(d.core().metrics().num_waiting, 0u);
  EXPECT_TRUE(d.core().abort(1));  // running: stops at the end of the in-flight step
  EXPECT_FALSE(d.core().abort(1));
  EXPECT_FALSE(d.core().abort(99));
  d.run();
  EXPECT_EQ(d.trace(1).tokens.size(), 2u);
  EXPECT_TRUE(d.trace(2).tokens.empty());
  EXPECT_FALSE(d.core().has_unfinished_requests());
  EXPECT_EQ(d.core().block_pool().num_free(), d.core().block_pool().num_usable());
  EXPECT_EQ(d.core().metrics().requests_aborted, 2u);
  EXPECT_FALSE(d.core().next_event_time().has_value());
}

TEST(EngineCoreTest, AbortAtAStepBoundaryFreesBlocksAtOnce) {
  Driver d(small_config());
  d.add(1, tokens_of(52, 40), 100);
  d.add(2, tokens_of(53, 40), 5);
  bool aborted = false;
  d.on_output([&](const StepOutput&) {
    if (aborted || d.trace(1).tokens.size() < 3) return;
    const uint32_t before = d.core().block_pool().num_free();
    ASSERT_TRUE(d.core().abort(1));
    aborted = true;
    EXPECT_EQ(d.core().block_pool().num_free(), before + 3);  // ceil(42 / 16) blocks
    EXPECT_FALSE(d.core().request_state(1).has_value());
  });
  d.run();
  EXPECT_TRUE(aborted);
  EXPECT_EQ(d.trace(1).tokens.size(), 3u);
  EXPECT_EQ(d.trace(2).tokens.size(), 5u);
  EXPECT_EQ(d.core().block_pool().num_free(), d.core().block_pool().num_usable());
}

TEST(EngineCoreTest, ResetPrefixCacheEmitsAllBlocksClearedAndForgetsBlocks) {
  Driver d(small_config());
  const auto prompt = tokens_of(60, 64);
  d.add(1, prompt, 1);
  d.run();
  ASSERT_EQ(d.core().cached_prefix_blocks(prompt), 4u);
  EXPECT_TRUE(d.core().reset_prefix_cache());
  EXPECT_EQ(d.core().cached_prefix_blocks(prompt), 0u);
  d.run();  // the idle reset is delivered through poll()
  ASSERT_FALSE(d.batches().empty());
  ASSERT_EQ(d.batches().back().events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<events::AllBlocksCleared>(d.batches().back().events[0]));

  // While requests hold blocks the reset is refused, unless running requests are reset too.
  d.add(2, prompt, 20);
  d.run(d.core().next_event_time());
  EXPECT_FALSE(d.core().reset_prefix_cache());
  EXPECT_TRUE(d.core().reset_prefix_cache(/*reset_running_requests=*/true));
  d.run();
  EXPECT_EQ(d.trace(2).tokens.size(), 20u);
  EXPECT_EQ(d.trace(2).tokens, [&] {
    Driver ref(small_config());
    ref.add(2, prompt, 20);
    ref.run();
    return ref.trace(2).tokens;
  }());
  size_t clears = 0;
  for (const auto& b : d.batches()) {
    for (const auto& e : b.events) clears += std::holds_alternative<events::AllBlocksCleared>(e);
  }
  EXPECT_EQ(clears, 2u);
  EXPECT_EQ(d.core().metrics().num_preemptions, 1u);
}

TEST(EngineCoreTest, RequestsArrivingDuringAStepWaitForTheNextOne) {
  Driver d(small_config());
  d.add(1, tokens_of(70, 500), 5);
  d.run(Nanos(1000));  // the first step is in flight
  const Nanos first_end = *d.core().next_event_time();
  d.add(2, tokens_of(71, 100), 5);
  d.run();
  ASSERT_GE(d.steps().size(), 2u);
  EXPECT_EQ(d.steps()[0].num_scheduled, 1u);
  EXPECT_EQ(d.steps()[0].end, first_end);
  EXPECT_EQ(d.steps()[1].start, first_end);  // scheduled as soon as the engine is free
  EXPECT_EQ(d.steps()[1].shape.prefill_tokens, 100u);
}

// ---- Timing (virtual clock) -----------------------------------------------------------------

class EngineTimingTest : public ::testing::TestWithParam<double> {
 protected:
  // Model milliseconds -> engine time at this speedup.
  double scaled_ms(double model_ms) const { return model_ms / GetParam(); }
  static double ms(Nanos d) { return to_ms(d); }
  static void expect_within_5_percent(double actual, double expected, const char* what, size_t i) {
    EXPECT_LE(std::abs(actual - expected), 0.05 * expected) << what << " " << i;
    // The virtual clock makes it exact up to nanosecond rounding.
    EXPECT_NEAR(actual, expected, 1e-5) << what << " " << i;
  }
};

TEST_P(EngineTimingTest, TtftAndInterTokenGapsFollowThePolynomialModel) {
  EngineConfig c = small_config(1001);  // 1000 usable blocks
  c.speedup_ratio = GetParam();
  Driver d(c, Nanos(5'000'000));
  d.add(1, tokens_of(80, 1000), 40);
  d.run();
  const auto& t = d.trace(1);
  ASSERT_EQ(t.times.size(), 40u);
  expect_within_5_percent(ms(t.times[0] - t.arrival), scaled_ms(TimingModel::prefill_ms(1000)),
                          "ttft", 0);
  for (size_t k = 1; k < t.times.size(); ++k) {
    // Decode step k computes the KV of token 1000 + k - 1: ceil((1000 + k) / 16) blocks held.
    const double usage = std::ceil((1000.0 + static_cast<double>(k)) / 16.0) / 1000.0;
    expect_within_5_percent(ms(t.times[k] - t.times[k - 1]),
                            scaled_ms(TimingModel::decode_ms(usage)), "gap", k);
  }
  const EngineMetrics m = d.core().metrics();
  EXPECT_EQ(m.time_to_first_token.count, 1u);
  EXPECT_NEAR(m.time_to_first_token.sum_seconds, to_seconds(t.times[0] - t.arrival), 1e-12);
}

TEST_P(EngineTimingTest, MixedStepLastsPrefillPlusDecode) {
  EngineConfig c = small_config(1001);
  c.speedup_ratio = GetParam();
  Driver d(c);
  d.add(1, tokens_of(81, 160), 30);   // 10 blocks
  d.run(d.core().next_event_time());  // step 0 (request 1's prefill) is in flight
  d.add(2, tokens_of(82, 480), 5);    // prefilled in step 1, next to request 1's first decode
  d.run();
  const auto& t1 = d.trace(1);
  const auto& t2 = d.trace(2);
  // Step 1 holds request 1's 161 tokens (11 blocks) and request 2's 480 (30 blocks).
  const double usage = (11.0 + 30.0) / 1000.0;
  const double mixed = TimingModel::prefill_ms(480) + TimingModel::decode_ms(usage);
  // Request 2 arrived while step 0 ran, so it waited for it.
  expect_within_5_percent(ms(t2.times[0] - t2.arrival),
                          scaled_ms(TimingModel::prefill_ms(160) + mixed), "ttft", 2);
  expect_within_5_percent(ms(t1.times[1] - t1.times[0]), scaled_ms(mixed), "gap", 1);
}

TEST_P(EngineTimingTest, QueueingBehindABusyEngineAddsToTtft) {
  EngineConfig c = small_config(1001);
  c.speedup_ratio = GetParam();
  c.max_num_batched_tokens = 512;
  Driver d(c);
  d.add(1, tokens_of(83, 512), 1);
  d.add(2, tokens_of(84, 512), 1);  // no budget left in step 0
  d.run();
  const double step = TimingModel::prefill_ms(512);
  expect_within_5_percent(ms(d.trace(1).times[0] - d.trace(1).arrival), scaled_ms(step), "ttft", 1);
  expect_within_5_percent(ms(d.trace(2).times[0] - d.trace(2).arrival), scaled_ms(2 * step), "ttft",
                          2);
}

INSTANTIATE_TEST_SUITE_P(Speedup, EngineTimingTest, ::testing::Values(1.0, 100.0));

// ---- Determinism ----------------------------------------------------------------------------

struct Workload {
  std::vector<std::pair<Nanos, std::vector<TokenId>>> arrivals;
  std::vector<uint32_t> max_tokens;
};

Workload random_workload(uint64_t seed, size_t n) {
  Rng rng(seed);
  Workload w;
  Nanos t(0);
  for (size_t i = 0; i < n; ++i) {
    t += Nanos(static_cast<int64_t>(rng.uniform(30'000'000)));
    auto prompt = tokens_of(static_cast<uint32_t>(rng.uniform(5)), 16 * rng.uniform(6));
    const auto suffix = tokens_of(static_cast<uint32_t>(100 + i), 1 + rng.uniform(60));
    prompt.insert(prompt.end(), suffix.begin(), suffix.end());
    w.arrivals.emplace_back(t, std::move(prompt));
    w.max_tokens.push_back(static_cast<uint32_t>(1 + rng.uniform(80)));
  }
  return w;
}

void run_workload(Driver& d, const Workload& w) {
  for (size_t i = 0; i < w.arrivals.size(); ++i) {
    d.run(w.arrivals[i].first);
    d.add(i, w.arrivals[i].second, w.max_tokens[i], /*ignore_eos=*/i % 2 == 0);
  }
  d.run();
}

TEST(EngineCoreTest, SameSeedGivesTheSameOutputsAndEvents) {
  const Workload w = random_workload(7, 300);
  EngineConfig c = small_config(129);  // small: eviction and preemption happen
  Driver a(c), b(c);
  run_workload(a, w);
  run_workload(b, w);
  ASSERT_EQ(a.traces().size(), 300u);
  for (const auto& [id, t] : a.traces()) {
    EXPECT_EQ(t.tokens, b.trace(id).tokens) << id;
    EXPECT_EQ(t.times, b.trace(id).times) << id;
    EXPECT_EQ(t.cached_tokens, b.trace(id).cached_tokens) << id;
  }
  EXPECT_EQ(a.batches(), b.batches());
  EXPECT_GT(removed_hashes(a.all_events()).size(), 0u);
  EXPECT_GT(a.core().metrics().num_preemptions, 0u);

  // Another hash seed: the same tokens and timing, other block ids.
  c.hash_seed = "1";
  Driver e(c);
  run_workload(e, w);
  for (const auto& [id, t] : a.traces()) EXPECT_EQ(t.tokens, e.trace(id).tokens) << id;
  const auto sa = stored_events(a.all_events()), se = stored_events(e.all_events());
  ASSERT_EQ(sa.size(), se.size());
  EXPECT_NE(sa[0].block_hashes, se[0].block_hashes);
  EXPECT_EQ(sa[0].token_ids, se[0].token_ids);
}

TEST(EngineCoreTest, MetricsTrackRunningWaitingUsageAndTtft) {
  EngineConfig c = small_config(101);
  c.max_num_seqs = 2;
  Driver d(c);
  for (uint32_t i = 0; i < 4; ++i) d.add(i, tokens_of(90 + i, 50), 8);
  d.run(d.core().next_event_time());
  EngineMetrics m = d.core().metrics();
  EXPECT_EQ(m.num_running, 2u);
  EXPECT_EQ(m.num_waiting, 2u);
  EXPECT_NEAR(m.kv_cache_usage, 8.0 / 100.0, 1e-12);  // 2 x ceil(50 / 16) blocks
  d.run();
  m = d.core().metrics();
  EXPECT_EQ(m.num_running + m.num_waiting, 0u);
  EXPECT_EQ(m.kv_cache_usage, 0.0);
  EXPECT_EQ(m.time_to_first_token.count, 4u);
  EXPECT_EQ(m.generation_tokens, 32u);
  EXPECT_EQ(m.prompt_tokens, 200u);
  uint64_t bucketed = 0;
  for (const uint64_t n : m.time_to_first_token.counts) bucketed += n;
  EXPECT_EQ(bucketed, 4u);
}

// ---- Disaggregation ---------------------------------------------------------------------------

RequestSpec disagg_spec(RequestId id, const std::vector<TokenId>& prompt, uint32_t max_tokens,
                        bool hold_kv, bool remote_kv) {
  RequestSpec spec;
  spec.id = id;
  spec.prompt = prompt;
  spec.max_tokens = max_tokens;
  spec.ignore_eos = true;
  spec.hold_kv = hold_kv;
  spec.remote_kv = remote_kv;
  return spec;
}

TEST(EngineCoreTest, AHoldKvPrefillKeepsItsBlocksUntilReleased) {
  Driver d(small_config());
  const auto prompt = tokens_of(70, 64);  // 4 full blocks (the sampled token gets no slot)
  d.add(disagg_spec(1, prompt, 1, /*hold_kv=*/true, /*remote_kv=*/false));
  d.run();
  ASSERT_EQ(d.trace(1).finish, FinishReason::kLength);
  const std::vector<uint32_t>* held = d.core().held_blocks(1);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->size(), 4u);
  EXPECT_GT(d.core().metrics().kv_cache_usage, 0);
  EXPECT_EQ(d.core().metrics().num_held_for_transfer, 1u);
  EXPECT_FALSE(d.core().reset_prefix_cache()) << "held blocks are in use";
  EXPECT_TRUE(d.core().release_held(1));
  EXPECT_FALSE(d.core().release_held(1));
  EXPECT_EQ(d.core().held_blocks(1), nullptr);
  EXPECT_EQ(d.core().metrics().kv_cache_usage, 0);
  EXPECT_EQ(d.core().cached_prefix_blocks(prompt), 4u);  // freed blocks stay cached
}

EngineConfig link_config() {
  EngineConfig c = small_config();
  c.kv_block_bytes = 1'000'000;
  c.kv_transfer_bandwidth_gb_s = 1.0;  // 1 ms per block
  return c;
}

TEST(EngineCoreTest, ARemoteKvDecodePullsTheBlocksInsteadOfComputingThem) {
  Driver d(link_config());
  const auto prompt = tokens_of(71, 64);
  d.add(disagg_spec(1, prompt, 3, /*hold_kv=*/false, /*remote_kv=*/true));
  d.run();
  const auto& t = d.trace(1);
  ASSERT_EQ(t.tokens.size(), 3u);
  // TTFT = the pull of 4 blocks (4 ms) + one step computing the prompt's last token.
  const TimingModel timing(1.0);
  StepShape last_token;
  last_token.prefill_tokens = 1;
  EXPECT_EQ(t.times[0], Nanos(4'000'000) + timing.step_duration(last_token));
  EXPECT_EQ(d.steps()[0].start, Nanos(4'000'000)) << "no step computes the pulled prompt";
  EXPECT_EQ(d.steps()[0].shape.prefill_tokens, 1u);
  // The same tokens an aggregated engine produces for the prompt.
  Driver local(small_config());
  local.add(2, prompt, 3);
  local.run();
  EXPECT_EQ(t.tokens, local.trace(2).tokens);
  // The pulled blocks are stored and announced like computed ones.
  std::vector<TokenId> stored;
  for (const auto& s : stored_events(d.all_events())) {
    stored.insert(stored.end(), s.token_ids.begin(), s.token_ids.end());
  }
  EXPECT_EQ(stored, prompt);
  EXPECT_EQ(d.core().cached_prefix_blocks(prompt), 4u);
  const EngineMetrics m = d.core().metrics();
  EXPECT_EQ(m.kv_pulls, 1u);
  EXPECT_EQ(m.kv_pulled_blocks, 4u);
  EXPECT_EQ(m.num_transferring, 0u);
}

TEST(EngineCoreTest, ARemoteKvDecodePullsOnlyWhatItDoesNotCache) {
  Driver d(link_config());
  const auto prefix = tokens_of(72, 32);
  d.add(3, prefix, 1);
  d.run();
  const Nanos arrival = d.clock().now();
  d.add(disagg_spec(4, concat(prefix, tokens_of(73, 32)), 1, false, true));
  d.run();
  EXPECT_EQ(d.core().metrics().kv_pulled_blocks, 2u);  // 2 of 4 blocks were cached here
  EXPECT_EQ(d.steps().back().start, arrival + Nanos(2'000'000));
  EXPECT_EQ(d.trace(4).cached_tokens, 48u) << "local hits plus pulled full blocks";
}

TEST(EngineCoreTest, OtherRequestsRunWhileABlockPullIsInProgress) {
  EngineConfig c = link_config();
  c.kv_transfer_bandwidth_gb_s = 0.01;  // 100 ms per block: a long pull
  Driver d(c);
  d.add(disagg_spec(1, tokens_of(74, 64), 1, false, true));
  d.add(2, tokens_of(75, 16), 4);
  d.run();
  EXPECT_LT(d.trace(2).times.back(), d.trace(1).times[0]);
  EXPECT_GE(d.trace(1).times[0], Nanos(400'000'000));
}

TEST(EngineCoreTest, ADecodeWaitingForBlocksHeldByPullsStartsWhenThePullsEnd) {
  EngineConfig c = link_config();
  c.num_gpu_blocks = 10;  // 9 usable: two 4-block pulls leave too few for a third prompt
  Driver d(c);
  d.add(disagg_spec(1, tokens_of(77, 64), 2, false, true));
  d.add(disagg_spec(2, tokens_of(78, 64), 2, false, true));
  d.add(disagg_spec(3, tokens_of(79, 64), 2, false, true));
  d.run(Nanos(1'000'000));
  ASSERT_EQ(d.core().request_state(3)->status, RequestStatus::kWaiting);
  EXPECT_EQ(d.core().next_event_time(), Nanos(4'000'000)) << "the pulls' end, not the past";
  d.run();  // fails on a stall
  for (RequestId id : {1, 2, 3}) EXPECT_EQ(d.trace(id).tokens.size(), 2u) << id;
  EXPECT_GT(d.trace(3).times[0], d.trace(1).times[1]) << "3 pulled once 1 and 2 freed blocks";
}

TEST(EngineCoreTest, AbortDuringABlockPullFreesItsBlocks) {
  Driver d(link_config());
  d.add(disagg_spec(1, tokens_of(76, 64), 1, false, true));
  d.run(Nanos(1'000'000));  // the pull takes 4 ms
  ASSERT_EQ(d.core().request_state(1)->status, RequestStatus::kTransferring);
  EXPECT_GT(d.core().metrics().kv_cache_usage, 0);
  EXPECT_TRUE(d.core().abort(1));
  EXPECT_EQ(d.core().metrics().kv_cache_usage, 0);
  EXPECT_EQ(d.core().metrics().num_transferring, 0u);
  d.run();
  EXPECT_TRUE(d.trace(1).tokens.empty());
  EXPECT_TRUE(stored_events(d.all_events()).empty()) << "nothing was pulled, nothing stored";
}

}  // namespace
}  // namespace infera::engine
