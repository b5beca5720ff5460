// libFuzzer target for the KV-index snapshot a booting router replica decodes (untrusted bytes
// from a sibling). Properties checked on every input: decoding never crashes, hangs or reads out
// of bounds (ASan/UBSan); whatever decodes re-encodes to bytes that decode and re-encode to the
// same bytes; seeding a stream with any decoded worker never crashes the index, and what it
// imported exports again within the decoded sizes. Seed corpus: fuzz_corpus/replica_snapshot_fuzz
// (a tiny valid snapshot, a stale one, garbage); CI replays it.
#include <cstddef>
#include <cstdint>

#include "infera/common/check.h"
#include "infera/common/log.h"
#include "infera/events/msgpack.h"
#include "infera/events/stream.h"
#include "infera/kv/index.h"
#include "infera/replica/snapshot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera;
  set_log_level(LogLevel::kWarn);  // every seeded input logs a line at INFO
  replica::SnapshotLimits limits;
  limits.max_blocks_per_worker = 1u << 16;  // keeps each input's work small
  limits.max_total_blocks = 1u << 18;
  const Result<replica::IndexSnapshot> decoded = replica::decode_snapshot({data, size}, limits);
  if (!decoded.ok()) return 0;

  const std::string again = replica::encode_snapshot(*decoded);
  const Result<replica::IndexSnapshot> back =
      replica::decode_snapshot(events::byte_span(again), limits);
  INFERA_CHECK(back.ok());
  INFERA_CHECK(replica::encode_snapshot(*back) == again);

  for (const replica::WorkerSnapshot& w : decoded->workers) {
    kv::KvIndex index(kv::KvIndex::Options{decoded->block_size, 1});
    events::StreamOptions options;
    options.worker = 0;
    events::WorkerStream stream(index, options, nullptr);
    if (!stream.seed(w.stream)) continue;
    // Engine hashes listed twice merge on import: never more records than were decoded.
    const kv::WorkerDump dump = index.export_worker(0);
    INFERA_CHECK(dump.gpu.size() <= w.stream.dump.gpu.size());
    for (size_t t = 0; t < dump.lower.size(); ++t) {
      INFERA_CHECK(dump.lower[t].size() <= w.stream.dump.lower[t].size());
    }
  }
  return 0;
}
