// What every request asks of the fleet before it is routed (docs/benchmarks.md, "Gateway
// overhead"): lookup() of its model, split() of the model's fleet and candidates() for its first
// stage, over a 64-worker view. Aggregated: 64 workers of role "both" serving one of two models.
// Split: 32 prefill and 32 decode workers, so candidates() is asked for the prefill stage and
// the decode stage is narrowed to the prefill winner's protocol, as a disaggregated request is.
// The workers' records name their model and block size and their URLs a closed loopback port:
// nothing a probe learns changes the view while the benchmark runs.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "infera/common/clock.h"
#include "infera/common/log.h"
#include "infera/gateway/fleet.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/kv/active_load.h"
#include "infera/kv/engine_signals.h"
#include "infera/kv/index.h"

namespace infera::gateway {
namespace {

constexpr uint32_t kWorkers = 64;
constexpr const char* kModel = "meta-llama/Llama-3.1-8B-Instruct";
constexpr const char* kOtherModel = "Qwen/Qwen2.5-7B-Instruct";

// A fleet of kWorkers, every 8th serving kOtherModel; `split`: half prefill, half decode.
struct BenchFleet {
  explicit BenchFleet(bool split) {
    auto workers = std::make_shared<discovery::WorkerSet>();
    for (uint32_t i = 0; i < kWorkers; ++i) {
      discovery::WorkerInfo w;
      // Port 9 (discard) on loopback: closed, so every probe fails at once and learns nothing.
      w.id = "10.0.0." + std::to_string(i) + ":9";
      w.url = "http://127.0.0.1:9";
      w.model = i % 8 == 7 ? kOtherModel : kModel;
      w.block_size = 16;
      if (split) w.role = i % 2 == 0 ? discovery::Role::kPrefill : discovery::Role::kDecode;
      workers->push_back(std::move(w));
    }
    fleet.update(workers);
  }

  http::EventLoop loop{1};
  http::Client client;
  SteadyClock clock;
  kv::KvIndex index{kv::KvIndex::Options{16, 1024, nullptr}};
  kv::ActiveLoad load{kv::ActiveLoad::Options{std::chrono::minutes(5), 1024}, clock};
  kv::EngineSignals signals{1024, clock};
  Fleet fleet{Fleet::Options{.engine_metrics_interval = std::chrono::milliseconds(0)},
              index,
              load,
              signals,
              loop,
              client,
              clock};
};

void BM_FleetChooseCandidates(benchmark::State& state) {
  set_log_level(LogLevel::kError);
  const bool split = state.range(0) != 0;
  BenchFleet b(split);
  const std::string model = kModel;
  const std::vector<kv::WorkerId> skip;
  std::vector<kv::WorkerId> out;
  out.reserve(kWorkers);
  for (auto _ : state) {
    const auto view = b.fleet.view();
    const Fleet::ModelLookup found = b.fleet.lookup(model);
    benchmark::DoNotOptimize(found);
    const bool disaggregated = b.fleet.split(*view, model);
    bool at_capacity = false;
    b.fleet.candidates(*view, model,
                       disaggregated ? routing::Stage::kPrefill : routing::Stage::kAggregated, skip,
                       out, &at_capacity);
    if (disaggregated) {
      b.fleet.candidates(*view, model, routing::Stage::kDecode, skip, out, &at_capacity);
      keep_protocol(*view, discovery::PdProtocol::kVllm, out);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  if (out.empty()) state.SkipWithError("no candidates");
  state.SetLabel(split ? "32 prefill + 32 decode" : "64 aggregated");
}
BENCHMARK(BM_FleetChooseCandidates)->Arg(0)->Arg(1);

}  // namespace
}  // namespace infera::gateway

BENCHMARK_MAIN();
