// Parsing a completions request at the gateway's edge (docs/benchmarks.md, "Gateway overhead"):
// a 1,000-token token-id prompt as the bench and OpenAI clients send it, through the fast reader
// for plain JSON and, side by side, through Boost.JSON's parser alone; a 1,000-word text prompt;
// a chat body.
#include <benchmark/benchmark.h>

#include <string>

#include "infera/gateway/openai_request.h"

namespace infera::gateway {
namespace {

std::string completions_body(int tokens) {
  std::string b = R"({"model":"canned","prompt":[)";
  for (int i = 0; i < tokens; ++i) {
    if (i > 0) b += ',';
    b += std::to_string(1000 + (i * 7919) % 150000);  // ids of 4-6 digits, as real vocabularies
  }
  b += R"(],"max_tokens":16,"temperature":0.7,"stream":false})";
  return b;
}

void BM_ParseCompletionsIds(benchmark::State& state) {
  const std::string body = completions_body(static_cast<int>(state.range(0)));
  const RequestLimits limits;
  const bool boost_only = state.range(1) != 0;
  for (auto _ : state) {
    auto r = boost_only ? detail::parse_completions_by_boost(body, limits)
                        : parse_openai_request(ApiKind::kCompletions, body, limits);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
  state.SetLabel(boost_only ? "boost.json basic_parser" : "plain-JSON reader");
}
BENCHMARK(BM_ParseCompletionsIds)
    ->Args({1000, 0})
    ->Args({1000, 1})
    ->Args({8192, 0})
    ->Args({8192, 1});

// A text prompt of `words` common words (about one token each), as scripts/bench-proxy sends.
void BM_ParseCompletionsText(benchmark::State& state) {
  static constexpr const char* kWords[] = {"the", "of", "and", "memory", "request", "server",
                                           "token", "network", "answer", "engine", "block"};
  std::string body = R"({"model":"canned","prompt":")";
  for (int64_t i = 0; i < state.range(0); ++i) {
    if (i > 0) body += ' ';
    body += kWords[(i * 7) % 11];
  }
  body += R"(","max_tokens":1,"stream":false})";
  const RequestLimits limits;
  for (auto _ : state) {
    auto r = parse_openai_request(ApiKind::kCompletions, body, limits);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ParseCompletionsText)->Arg(1000);

void BM_ParseChat(benchmark::State& state) {
  std::string body = R"({"model":"m","messages":[{"role":"system","content":")";
  body += std::string(4000, 'x');
  body += R"("},{"role":"user","content":"hello"}],"stream":true})";
  const RequestLimits limits;
  for (auto _ : state) {
    auto r = parse_openai_request(ApiKind::kChatCompletions, body, limits);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ParseChat);

}  // namespace
}  // namespace infera::gateway

BENCHMARK_MAIN();
