// The metrics registry on the request path (docs/benchmarks.md): a request counts itself in
// infera_requests_total by route, status, worker and model, a lookup among every series of that
// family, which grows with the fleet.
#include <benchmark/benchmark.h>

#include <string>

#include "infera/common/metrics.h"

namespace infera::metrics {
namespace {

Labels request_labels(int worker, int status) {
  return {{"route", "/v1/completions"},
          {"status", std::to_string(status)},
          {"worker", "10.0.0." + std::to_string(worker) + ":8000"},
          {"model", "Qwen/Qwen3-8B"}};
}

// A fleet of `workers` workers, each with series of three statuses; the counted request's
// labels are built per call, as the gateway builds them.
void BM_CounterLookup(benchmark::State& state) {
  const int workers = static_cast<int>(state.range(0));
  Registry registry;
  for (int w = 0; w < workers; ++w) {
    for (int status : {200, 429, 502}) {
      registry.counter("infera_requests_total", "Requests.", request_labels(w, status)).inc();
    }
  }
  int w = 0;
  for (auto _ : state) {
    registry.counter("infera_requests_total", "Requests.", request_labels(w, 200)).inc();
    w = (w + 7) % workers;
  }
}
BENCHMARK(BM_CounterLookup)->Arg(1)->Arg(64)->Arg(1000);

}  // namespace
}  // namespace infera::metrics

BENCHMARK_MAIN();
