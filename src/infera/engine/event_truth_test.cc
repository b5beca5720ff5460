// Event truth: the KV events the engine emits, replayed into a fresh router-side KvIndex, describe
// exactly the engine's prefix cache, at every step boundary, through thousands of random requests
// with eviction, duplicate blocks, preemption, aborts and cache resets.
#include <gtest/gtest.h>

#include <cmath>
#include <variant>

#include "infera/common/random.h"
#include "infera/engine/engine_core.h"
#include "infera/engine/engine_test_driver.h"
#include "infera/kv/block_hash.h"
#include "infera/kv/index.h"

namespace infera::engine {
namespace {

using testing::concat;
using testing::Driver;
using testing::tokens_of;

constexpr kv::WorkerId kWorker = 0;

// Applies the engine's events to a KvIndex the way the events module does: BlockStored ->
// StoredEvent, BlockRemoved -> RemovedEvent, AllBlocksCleared -> clear_worker.
class Mirror {
 public:
  explicit Mirror(uint32_t block_size) : index_(kv::KvIndex::Options{block_size, 4}) {
    index_.add_worker(kWorker);
  }

  void apply(const events::EventBatch& batch) {
    for (const events::Event& e : batch.events) {
      if (const auto* s = std::get_if<events::BlockStored>(&e)) {
        ASSERT_EQ(s->medium, "GPU");
        kv::StoredEvent ev;
        ev.worker = kWorker;
        ev.parent_engine_hash = s->parent_block_hash;
        ev.engine_hashes = s->block_hashes;
        ev.token_ids = s->token_ids;
        ev.block_size = s->block_size;
        ev.medium = kv::Medium::kGpu;
        ASSERT_EQ(index_.apply(ev), kv::ApplyResult::kApplied);
        ++stored_events_;
      } else if (const auto* r = std::get_if<events::BlockRemoved>(&e)) {
        ASSERT_EQ(r->block_hashes.size(), 1u);  // one BlockRemoved per evicted hash
        ASSERT_EQ(index_.apply(kv::RemovedEvent{kWorker, r->block_hashes, kv::Medium::kGpu}),
                  kv::ApplyResult::kApplied);
        ++removed_events_;
      } else {
        index_.clear_worker(kWorker);
        ++cleared_events_;
      }
    }
  }

  uint64_t block_count() const { return index_.block_count(kWorker); }
  uint32_t overlap(std::span<const TokenId> prompt) const {
    std::vector<uint32_t> hits;
    index_.find_overlaps(kv::seq_hashes(prompt, index_.block_size()), hits);
    return hits[kWorker];
  }
  const kv::KvIndex& index() const { return index_; }

  uint64_t stored_events_ = 0;
  uint64_t removed_events_ = 0;
  uint64_t cleared_events_ = 0;

 private:
  kv::KvIndex index_;
};

TEST(EngineEventTruthTest, ReplayedEventsMirrorTheEngineCacheThroughRandomTraffic) {
  EngineConfig c;
  c.block_size = 16;
  c.num_gpu_blocks = 401;  // 400 usable: far less than the traffic's working set
  c.max_num_seqs = 24;
  c.max_num_batched_tokens = 1024;
  c.enable_kv_events = true;
  c.natural_output_min = 1;
  c.natural_output_max = 48;
  Driver d(c);
  Mirror mirror(c.block_size);
  Rng rng(20240611);

  std::vector<std::vector<TokenId>> prompts;  // every prompt sent, for overlap checks
  uint64_t steps = 0;
  uint64_t boundaries_checked = 0;
  bool saw_duplicate = false;
  auto check_sample = [&](size_t n) {
    for (size_t i = 0; i < n && !prompts.empty(); ++i) {
      const auto& p = prompts[rng.uniform(prompts.size())];
      ASSERT_EQ(mirror.overlap(p), d.core().cached_prefix_blocks(p));
    }
  };
  d.on_output([&](const StepOutput& out) {
    mirror.apply(out.kv_events);
    // At a step boundary the engine's cache is exactly what its events said.
    ASSERT_EQ(mirror.block_count(), d.core().block_pool().num_cached_hashes())
        << "step " << out.step;
    if (++steps % 64 == 0) check_sample(16);
    ++boundaries_checked;
    saw_duplicate |=
        d.core().block_pool().num_cached_blocks() > d.core().block_pool().num_cached_hashes();
  });

  constexpr size_t kRequests = 3000;
  std::vector<std::pair<Nanos, RequestId>> aborts;  // (when, id)
  size_t resets = 0;
  for (RequestId id = 0; id < kRequests; ++id) {
    // Exponential-ish gaps, mean ~6 ms of virtual time: a steady overload with queueing.
    const Nanos gap(static_cast<int64_t>(-std::log(1.0 - rng.uniform_double()) * 6e6));
    const Nanos at = d.clock().now() + gap;
    for (auto it = aborts.begin(); it != aborts.end();) {
      if (it->first <= at) {
        d.run(it->first);
        d.core().abort(it->second);
        it = aborts.erase(it);
      } else {
        ++it;
      }
    }
    d.run(at);
    if (::testing::Test::HasFatalFailure()) return;

    std::vector<TokenId> prompt;
    const uint64_t kind = rng.uniform(100);
    if (kind < 20 && !prompts.empty()) {
      prompt = prompts[rng.uniform(prompts.size())];  // the same prompt again
    } else if (kind < 35 && !prompts.empty()) {
      // A follow-up turn: an earlier prompt, its (deterministic) answer if known, new text.
      const RequestId prev = rng.uniform(prompts.size());
      prompt = prompts[prev];
      const auto& t = d.traces().at(prev);
      prompt.insert(prompt.end(), t.tokens.begin(), t.tokens.end());
      const auto more = tokens_of(static_cast<uint32_t>(500000 + id), 1 + rng.uniform(40));
      prompt.insert(prompt.end(), more.begin(), more.end());
    } else {
      // A shared system prompt of 0..12 blocks from one of 10 families, then a unique question.
      const auto family = static_cast<uint32_t>(rng.uniform(10));
      prompt = tokens_of(family, 16 * rng.uniform(13) + rng.uniform(3));
      prompt = concat(prompt, tokens_of(static_cast<uint32_t>(1000 + id), 1 + rng.uniform(90)));
    }
    if (prompt.size() > 900) prompt.resize(900);
    const auto max_tokens = static_cast<uint32_t>(1 + rng.uniform(64));
    const bool ignore_eos = rng.uniform(2) == 0;
    const auto min_tokens =
        static_cast<uint32_t>(rng.uniform(4) == 0 ? rng.uniform(max_tokens) : 0);
    d.add(id, prompt, max_tokens, ignore_eos, min_tokens);
    prompts.push_back(std::move(prompt));

    if (rng.uniform(100) < 3) {
      aborts.emplace_back(d.clock().now() + Nanos(static_cast<int64_t>(rng.uniform(200'000'000))),
                          id);
    }
    if (id % 700 == 699) {
      EXPECT_TRUE(d.core().reset_prefix_cache(/*reset_running_requests=*/true));
      ++resets;
    }
  }
  for (const auto& [when, id] : aborts) {
    d.run(when);
    d.core().abort(id);
  }
  d.run();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  ASSERT_FALSE(d.core().has_unfinished_requests());

  // The final state, over every prompt that was sent.
  EXPECT_EQ(mirror.block_count(), d.core().block_pool().num_cached_hashes());
  for (const auto& p : prompts) ASSERT_EQ(mirror.overlap(p), d.core().cached_prefix_blocks(p));
  const kv::IndexCounters counters = mirror.index().counters();
  EXPECT_EQ(counters.removals_unknown, 0u);

  // The traffic exercised what it is meant to.
  const EngineMetrics m = d.core().metrics();
  EXPECT_GT(mirror.removed_events_, 5000u);                     // heavy eviction
  EXPECT_GT(m.num_preemptions, 0u);                             // block pressure
  EXPECT_GT(m.prefix_cache_hits, m.prefix_cache_queries / 10);  // real reuse
  EXPECT_EQ(mirror.cleared_events_, resets);
  EXPECT_GT(m.requests_aborted, 0u);
  EXPECT_GT(m.requests_finished_stop, 0u);
  EXPECT_GT(boundaries_checked, 2000u);
  EXPECT_TRUE(saw_duplicate);  // a hash cached twice at once: vLLM does not deduplicate
}

TEST(EngineEventTruthTest, EngineHashesDifferFromTheRouterHashes) {
  ManualClock clock;
  EngineConfig c;
  const EngineCore core(c, clock);
  const auto t = tokens_of(1, 160);
  std::vector<uint64_t> engine;
  core.block_hashes(t, engine);
  const auto router = kv::seq_hashes(t, 16);
  ASSERT_EQ(engine.size(), router.size());
  for (size_t i = 0; i < engine.size(); ++i) EXPECT_NE(engine[i], router[i]) << i;
}

}  // namespace
}  // namespace infera::engine
