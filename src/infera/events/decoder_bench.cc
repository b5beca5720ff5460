// KV-event decoding and applying without sockets (issue 4 target: decode >= 10 M blocks/s).
// Payloads are what vLLM sends: one BlockStored of 16 blocks (256 token ids drawn from a
// 150k vocabulary, so most take 5 bytes on the wire) per batch, in the current map encoding and
// the older array encoding; items/s counts blocks.
#include <benchmark/benchmark.h>

#include "infera/common/random.h"
#include "infera/events/applier.h"
#include "infera/events/decoder.h"
#include "infera/events/encoder.h"
#include "infera/events/msgpack.h"

namespace infera::events {
namespace {

constexpr uint32_t kBs = 16;

std::vector<std::string> payloads(WireFormat format, size_t count, uint32_t blocks,
                                  bool with_parents = true) {
  Rng rng(42);
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    BlockStored s;
    for (uint32_t b = 0; b < blocks; ++b) s.block_hashes.push_back(rng.next());
    if (with_parents && i % 2 == 1) s.parent_block_hash = rng.next();
    for (uint32_t t = 0; t < blocks * kBs; ++t) s.token_ids.push_back(static_cast<uint32_t>(rng.uniform(150000)));
    s.block_size = kBs;
    s.medium = "GPU";
    s.extra_keys_count = blocks;
    s.group_idx = 0;
    s.kv_cache_spec_kind = "full_attention";
    EventBatch b;
    b.ts = 1700000000.0 + static_cast<double>(i);
    b.dp_rank = 0;
    b.events.push_back(std::move(s));
    out.push_back(encode_batch(b, format));
  }
  return out;
}

void BM_Decode(benchmark::State& state) {
  const auto format = static_cast<WireFormat>(state.range(0));
  const auto blocks = static_cast<uint32_t>(state.range(1));
  const auto data = payloads(format, 256, blocks);
  EventBatch batch;
  size_t i = 0;
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string& p = data[i++ % data.size()];
    const DecodeResult r = decode_batch(byte_span(p), batch);
    benchmark::DoNotOptimize(r);
    bytes += p.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * blocks);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.SetLabel(std::string(wire_format_name(format)));
}
BENCHMARK(BM_Decode)
    ->ArgsProduct({{static_cast<int>(WireFormat::kVllmMap), static_cast<int>(WireFormat::kVllmArray)},
                   {1, 16, 64}});

// Decoded and applied to a KvIndex: a 16-block store (a request's first blocks), then a batch
// removing them, so the index keeps its size; 1 M entries of 63 other workers make the tables
// as large as a fleet's. items/s counts stored plus removed blocks.
void BM_DecodeAndApply(benchmark::State& state) {
  const auto stores = payloads(WireFormat::kVllmMap, 4096, 16, /*with_parents=*/false);
  std::vector<std::string> removes;
  for (const std::string& p : stores) {
    auto b = decode_batch(byte_span(p));
    BlockRemoved r;
    r.block_hashes = std::get<BlockStored>(b->events[0]).block_hashes;
    r.medium = "GPU";
    EventBatch rb;
    rb.events.push_back(r);
    removes.push_back(encode_batch(rb));
  }
  kv::KvIndex index(kv::KvIndex::Options{kBs, 64});
  Rng rng(7);
  std::vector<uint64_t> hashes(16);
  std::vector<uint32_t> tokens(16 * kBs);
  for (kv::WorkerId w = 1; w < 64; ++w) {
    index.add_worker(w);
    for (int e = 0; e < 1000; ++e) {  // 63 x 1000 x 16 = 1 M resident entries
      for (auto& h : hashes) h = rng.next();
      for (auto& t : tokens) t = static_cast<uint32_t>(rng.uniform(150000));
      index.apply(kv::StoredEvent{w, std::nullopt, hashes, tokens, kBs, kv::Medium::kGpu, {}});
    }
  }
  index.add_worker(0);
  EventApplier applier(index, 0);
  ApplyTally tally;
  EventBatch batch;
  size_t i = 0;
  for (auto _ : state) {
    const size_t k = i++ % stores.size();
    decode_batch(byte_span(stores[k]), batch);
    applier.apply(batch, tally);
    decode_batch(byte_span(removes[k]), batch);
    applier.apply(batch, tally);
  }
  state.SetItemsProcessed(static_cast<int64_t>(tally.blocks_stored + tally.blocks_removed));
  state.counters["rejected"] = static_cast<double>(tally.rejected_total());
}
BENCHMARK(BM_DecodeAndApply);

}  // namespace
}  // namespace infera::events

BENCHMARK_MAIN();
