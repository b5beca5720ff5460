// Block hashing of an 8,192-token prompt (target <= 20 us), against the obvious baseline that
// serialises each block's tokens into a byte buffer before hashing it.
#include <benchmark/benchmark.h>
#include <xxhash.h>

#include <vector>

#include "infera/common/random.h"
#include "infera/kv/block_hash.h"

namespace infera::kv {
namespace {

std::vector<TokenId> prompt(size_t n) {
  Rng rng(1);
  std::vector<TokenId> t(n);
  for (TokenId& x : t) x = static_cast<TokenId>(rng.uniform(151000));
  return t;
}

void BM_HashPrompt(benchmark::State& state) {
  const auto tokens = prompt(static_cast<size_t>(state.range(0)));
  std::vector<uint64_t> out;
  for (auto _ : state) {
    compute_seq_hashes(tokens, 16, kHashSeed, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * tokens.size() * 4));
}
BENCHMARK(BM_HashPrompt)->Arg(8192)->Unit(benchmark::kMicrosecond);

// Baseline: per-block byte vector, per-token little-endian packing, a fresh vector per call.
void BM_HashPromptBaseline(benchmark::State& state) {
  const auto tokens = prompt(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    std::vector<uint64_t> seq;
    for (size_t start = 0; start + 16 <= tokens.size(); start += 16) {
      std::vector<unsigned char> bytes;
      for (size_t i = start; i < start + 16; ++i) {
        for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<unsigned char>(tokens[i] >> (8 * b)));
      }
      const uint64_t local = XXH3_64bits_withSeed(bytes.data(), bytes.size(), kHashSeed);
      if (seq.empty()) {
        seq.push_back(local);
      } else {
        std::vector<unsigned char> pair;
        for (uint64_t v : {seq.back(), local}) {
          for (int b = 0; b < 8; ++b) pair.push_back(static_cast<unsigned char>(v >> (8 * b)));
        }
        seq.push_back(XXH3_64bits_withSeed(pair.data(), pair.size(), kHashSeed));
      }
    }
    benchmark::DoNotOptimize(seq.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * tokens.size() * 4));
}
BENCHMARK(BM_HashPromptBaseline)->Arg(8192)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infera::kv
