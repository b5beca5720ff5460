// What the exporter's thread spends per span: a batch of 512 router-like spans encoded as
// OTLP/HTTP JSON (docs/benchmarks.md, "Tracing and the access line").
#include <benchmark/benchmark.h>

#include <vector>

#include "infera/trace/span.h"

namespace infera::trace {
namespace {

Span router_like_span(uint64_t i) {
  Span s;
  s.trace_id = new_trace_id();
  s.span_id = new_span_id();
  s.parent_span_id = i % 2 == 0 ? new_span_id() : 0;
  s.name = "POST /v1/chat/completions";
  s.start_unix_ns = 1'765'000'000'000'000'000 + static_cast<int64_t>(i);
  s.end_unix_ns = s.start_unix_ns + 123'456'789;
  s.attributes = {{"http.request.method", std::string("POST")},
                  {"http.route", std::string("/v1/chat/completions")},
                  {"http.response.status_code", int64_t{200}},
                  {"gen_ai.request.model", std::string("Qwen/Qwen3-0.6B")},
                  {"gen_ai.usage.input_tokens", int64_t{1018}},
                  {"gen_ai.usage.output_tokens", int64_t{350}},
                  {"infera.request_id", std::string("infera-00f067aa0ba902b7")},
                  {"infera.worker", std::string("10.0.3.17:8000")},
                  {"infera.request_blocks", int64_t{63}},
                  {"infera.predicted_hit_blocks", int64_t{59}},
                  {"infera.tokenize_s", 0.000412},
                  {"infera.hash_s", 0.0000031},
                  {"infera.score_s", 0.0000042},
                  {"infera.retries", int64_t{0}},
                  {"infera.ttft_s", 0.0213}};
  return s;
}

void BM_OtlpJsonBatchOf512(benchmark::State& state) {
  std::vector<Span> spans;
  for (uint64_t i = 0; i < 512; ++i) spans.push_back(router_like_span(i));
  const Resource resource{.service_name = "infera", .service_version = "0.3.0", .instance_id = "r-1"};
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string body = otlp_json(spans, resource);
    bytes = body.size();
    benchmark::DoNotOptimize(body.data());
  }
  state.SetItemsProcessed(state.iterations() * 512);
  state.counters["bytes_per_span"] = static_cast<double>(bytes) / 512.0;
}
BENCHMARK(BM_OtlpJsonBatchOf512);

}  // namespace
}  // namespace infera::trace

BENCHMARK_MAIN();
