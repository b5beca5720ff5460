// libFuzzer target for the KV-event decoder (untrusted engine bytes). Properties checked on every
// input: decoding never crashes, hangs or reads out of bounds (ASan/UBSan in the fuzz preset);
// whatever decodes re-encodes (vLLM map format) and decodes again to the same batch; applying any
// decodable batch to a KV index never crashes it. Seed corpus: tests/testdata/events/fuzz_corpus
// (made from the golden vectors by make_fuzz_corpus.py); CI replays it.
#include <bit>
#include <cstddef>
#include <cstdint>

#include "infera/common/check.h"
#include "infera/events/applier.h"
#include "infera/events/decoder.h"
#include "infera/events/encoder.h"
#include "infera/events/msgpack.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera;
  events::EventBatch batch;
  if (!events::decode_batch({data, size}, batch).ok()) return 0;
  // Decoding into used storage (with spares) gives the same batch as decoding fresh.
  static events::EventBatch reused;  // carries state from input to input on purpose
  static events::DecodeScratch scratch;
  INFERA_CHECK(events::decode_batch({data, size}, reused, {}, &scratch).ok());
  INFERA_CHECK(reused.events == batch.events && reused.dp_rank == batch.dp_rank);

  const std::string again = events::encode_batch(batch, events::WireFormat::kVllmMap);
  events::EventBatch back;
  INFERA_CHECK(events::decode_batch(events::byte_span(again), back).ok());
  // ts compared bitwise: a NaN must survive too.
  INFERA_CHECK(std::bit_cast<uint64_t>(back.ts) == std::bit_cast<uint64_t>(batch.ts));
  INFERA_CHECK(back.events == batch.events && back.dp_rank == batch.dp_rank);

  kv::KvIndex index(kv::KvIndex::Options{16, 64});
  index.add_worker(0);
  events::EventApplier applier(index, 0);
  events::ApplyTally tally;
  applier.apply(batch, tally);
  return 0;
}
