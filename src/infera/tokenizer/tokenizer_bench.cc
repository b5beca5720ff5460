// Tokenizer benchmarks (Qwen3, one thread):
//   BM_LoadQwen3                 load time of tokenizer.json, process RSS after loading
//   BM_Encode/{english,cjk,code} throughput with the word cache warm (steady state of a server),
//                                segment cache off so every iteration really tokenizes
//   BM_EncodeCold/...            same with every cache emptied before each iteration
//   BM_ConversationNewTurn       a 20-turn ~30k-token chat re-encoded after one new turn vs cold
// Inputs: the tokenizer in $INFERA_MODELS_DIR/qwen3 (the extract_tokenizers test writes it into
// <build>/testdata/models) and 1 MiB texts in $INFERA_BENCH_TEXTS (default <build>/bench_texts,
// written by `node tests/tools/tokenizer/make_bench_texts.mjs <build>/bench_texts`).
// tests/tools/tokenizer/bench_node.mjs runs @huggingface/tokenizers on the same texts.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "infera/common/heap.h"
#include "infera/tokenizer/tokenizer.h"

namespace infera::tokenizer {
namespace {

namespace fs = std::filesystem;

fs::path env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? fs::path(v) : fs::path(fallback);
}

const fs::path& tokenizer_json() {
  static const fs::path p = env_or("INFERA_MODELS_DIR", INFERA_BENCH_MODELS_DIR) / "qwen3" / "tokenizer.json";
  return p;
}

const std::string& text(const std::string& name) {
  static std::map<std::string, std::string> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const fs::path p = env_or("INFERA_BENCH_TEXTS", INFERA_BENCH_TEXTS_DIR) / (name + ".txt");
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "missing %s: run node tests/tools/tokenizer/make_bench_texts.mjs %s\n",
                 p.c_str(), p.parent_path().c_str());
    std::exit(2);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return cache.emplace(name, ss.str()).first->second;
}

std::unique_ptr<Tokenizer> load(const Tokenizer::Options& options) {
  auto t = Tokenizer::from_file(tokenizer_json(), options);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().to_string().c_str());
    std::exit(2);
  }
  return std::move(t).value();
}

double rss_mb() { return static_cast<double>(resident_bytes().value_or(0)) / 1e6; }

void BM_LoadQwen3(benchmark::State& state) {
  // Runs first, in a fresh process: the RSS counters are what one loaded tokenizer costs.
  const double before = rss_mb();
  double loaded = 0;
  for (auto _ : state) {
    auto tok = load({});
    benchmark::DoNotOptimize(tok.get());
    if (loaded == 0) loaded = rss_mb();
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  state.counters["rss_before_MB"] = before;
  state.counters["rss_loaded_MB"] = loaded;
  state.counters["peak_rss_MB"] = static_cast<double>(ru.ru_maxrss) / 1e3;
}
BENCHMARK(BM_LoadQwen3)->Unit(benchmark::kMillisecond)->Iterations(5);

Tokenizer::Options no_segment_cache() {
  Tokenizer::Options o;
  o.segment_cache_bytes = 0;
  return o;
}

void encode_bench(benchmark::State& state, const std::string& name, bool cold) {
  static const std::unique_ptr<Tokenizer> tok = load(no_segment_cache());
  const std::string& t = text(name);
  tok->clear_caches();
  if (!cold) benchmark::DoNotOptimize(tok->encode(t, false));  // warm the word cache
  size_t tokens = 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      tok->clear_caches();
      state.ResumeTiming();
    }
    const std::vector<TokenId> ids = tok->encode(t, false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * t.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["bytes/token"] = static_cast<double>(t.size()) / static_cast<double>(tokens);
}

void BM_Encode(benchmark::State& state, const char* name) { encode_bench(state, name, false); }
void BM_EncodeCold(benchmark::State& state, const char* name) { encode_bench(state, name, true); }
BENCHMARK_CAPTURE(BM_Encode, english, "english")->Unit(benchmark::kMillisecond)->MinTime(2);
BENCHMARK_CAPTURE(BM_Encode, cjk, "cjk")->Unit(benchmark::kMillisecond)->MinTime(2);
BENCHMARK_CAPTURE(BM_Encode, code, "code")->Unit(benchmark::kMillisecond)->MinTime(2);
BENCHMARK_CAPTURE(BM_EncodeCold, english, "english")->Unit(benchmark::kMillisecond)->MinTime(2);
BENCHMARK_CAPTURE(BM_EncodeCold, cjk, "cjk")->Unit(benchmark::kMillisecond)->MinTime(2);
BENCHMARK_CAPTURE(BM_EncodeCold, code, "code")->Unit(benchmark::kMillisecond)->MinTime(2);

// A chat rendered as Qwen3's template does: turns alternate user / assistant, each ~6 KB of real
// text (English and code), so 20 turns are ~30k tokens.
std::string conversation(int turns) {
  const std::string& english = text("english");
  const std::string& code = text("code");
  std::string out = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n";
  constexpr size_t kTurnBytes = 6000;
  for (int i = 0; i < turns; ++i) {
    const std::string& src = i % 2 == 0 ? english : code;
    const size_t at = (static_cast<size_t>(i) * kTurnBytes * 7) % (src.size() - kTurnBytes);
    out += i % 2 == 0 ? "<|im_start|>user\n" : "<|im_start|>assistant\n";
    out += src.substr(at, kTurnBytes);
    out += "<|im_end|>\n";
  }
  return out;
}

void BM_ConversationNewTurn(benchmark::State& state) {
  // Manual time = the re-encode after the new turn. Counters: the same text encoded cold (every
  // cache empty) and with only the word cache warm (a tokenizer without a segment cache).
  static const std::unique_ptr<Tokenizer> tok = load({});
  static const std::unique_ptr<Tokenizer> words_only = load(no_segment_cache());
  const std::string before = conversation(20);
  const std::string after = before + "<|im_start|>user\nThanks! One more question about the " +
                            "second paragraph: what does it mean for the license?<|im_end|>\n" +
                            "<|im_start|>assistant\n";
  benchmark::DoNotOptimize(words_only->encode(after, false));
  using Clock = std::chrono::steady_clock;
  double cold_s = 0, words_s = 0, warm_s = 0;
  size_t tokens = 0;
  for (auto _ : state) {
    // Cold: nothing cached at all.
    tok->clear_caches();
    auto t0 = Clock::now();
    tokens = tok->encode(after, false).size();
    cold_s += std::chrono::duration<double>(Clock::now() - t0).count();
    t0 = Clock::now();
    benchmark::DoNotOptimize(words_only->encode(after, false));
    words_s += std::chrono::duration<double>(Clock::now() - t0).count();
    // The previous request encoded the first 20 turns; then the new turn arrives.
    tok->clear_caches();
    benchmark::DoNotOptimize(tok->encode(before, false));
    t0 = Clock::now();
    benchmark::DoNotOptimize(tok->encode(after, false));
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    warm_s += s;
    state.SetIterationTime(s);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["cold_ms"] = cold_s / n * 1e3;
  state.counters["words_warm_ms"] = words_s / n * 1e3;
  state.counters["new_turn_ms"] = warm_s / n * 1e3;
  state.counters["new_turn_vs_cold"] = warm_s / cold_s;
  state.counters["new_turn_vs_words_warm"] = warm_s / words_s;
}
BENCHMARK(BM_ConversationNewTurn)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(30);  // each iteration also runs two cold encodes

}  // namespace
}  // namespace infera::tokenizer

BENCHMARK_MAIN();
