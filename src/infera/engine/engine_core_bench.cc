// Throughput of the engine's core model itself (no HTTP, no ZMQ): a closed loop keeping a fixed
// number of requests in flight at speedup 100, driven in virtual time. One benchmark iteration
// is one scheduler step; reported: steps/s and output tokens/s of wall time on this machine.
//   engine_bench --benchmark_filter=EngineCore
#include <benchmark/benchmark.h>

#include <vector>

#include "infera/common/clock.h"
#include "infera/common/random.h"
#include "infera/engine/engine_core.h"

namespace infera::engine {
namespace {

// Prompts of 256 tokens: one of 16 shared 128-token system prompts, then a 128-token question
// drawn from a pool, so the cache sees realistic reuse and churn.
std::vector<std::vector<TokenId>> make_prompts(size_t n, Rng& rng) {
  std::vector<std::vector<TokenId>> prompts(n);
  for (size_t i = 0; i < n; ++i) {
    const auto family = static_cast<TokenId>(rng.uniform(16));
    auto& p = prompts[i];
    for (TokenId t = 0; t < 128; ++t) p.push_back(family * 100000 + t);
    for (TokenId t = 0; t < 128; ++t) p.push_back(static_cast<TokenId>(rng.uniform(150000)));
  }
  return prompts;
}

// args: concurrent requests, max_num_seqs, KV events on (1) or off (0).
void BM_EngineCoreClosedLoop(benchmark::State& state) {
  const auto concurrency = static_cast<size_t>(state.range(0));
  EngineConfig c;
  c.max_num_seqs = static_cast<uint32_t>(state.range(1));
  c.enable_kv_events = state.range(2) != 0;
  c.speedup_ratio = 100;
  // Room for every running request's 256-token prompt and up to 256 output tokens, plus cache.
  c.num_gpu_blocks =
      static_cast<uint32_t>(std::min<size_t>(concurrency, c.max_num_seqs) * 40 + 8192);
  ManualClock clock;
  EngineCore core(c, clock);
  Rng rng(1);
  const auto prompts = make_prompts(8192, rng);

  RequestId next_id = 0;
  auto add_one = [&] {
    RequestSpec spec;
    spec.id = next_id++;
    spec.prompt = prompts[rng.uniform(prompts.size())];
    spec.max_tokens = static_cast<uint32_t>(64 + rng.uniform(193));
    spec.ignore_eos = true;
    const Status s = core.add_request(spec);
    if (!s.ok()) state.SkipWithError(s.message().c_str());
  };
  for (size_t i = 0; i < concurrency; ++i) add_one();

  StepOutput out;
  uint64_t tokens = 0;
  uint64_t events = 0;
  auto one_step = [&] {
    clock.set(std::max(clock.now(), *core.next_event_time()));
    while (core.poll(out)) {
      tokens += out.outputs.size();
      events += out.kv_events.events.size();
      for (const RequestOutput& o : out.outputs) {
        if (o.finish != FinishReason::kNone) add_one();  // keep the loop closed
      }
    }
  };
  // Warm up past the initial prefill wave, into the steady state.
  for (int i = 0; i < 2000; ++i) one_step();

  tokens = events = 0;
  const Nanos virtual_start = clock.now();
  for (auto _ : state) one_step();
  state.counters["steps/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.counters["events/step"] =
      static_cast<double>(events) / static_cast<double>(state.iterations());
  state.counters["tokens/step"] =
      static_cast<double>(tokens) / static_cast<double>(state.iterations());
  // Virtual seconds per step at speedup 100: what the model says the engine would take.
  state.counters["virt_ms/step"] =
      to_ms(clock.now() - virtual_start) / static_cast<double>(state.iterations());
  const EngineMetrics m = core.metrics();
  state.counters["running"] = m.num_running;
  state.counters["waiting"] = m.num_waiting;
}

BENCHMARK(BM_EngineCoreClosedLoop)
    ->ArgNames({"concurrency", "max_num_seqs", "events"})
    ->Args({2000, 256, 1})
    ->Args({2000, 2048, 1})
    ->Args({2000, 2048, 0})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infera::engine

BENCHMARK_MAIN();
