#include "infera/replica/snapshot.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "infera/common/check.h"
#include "infera/events/msgpack.h"

namespace infera::replica {
namespace {

using events::MsgpackReader;
using events::MsgpackWriter;
using kv::WorkerDump;

// Record sizes of the tier bins: engine hash, router hash (u64 each), copies or refs (u32),
// and for lower tiers a flags byte (bit 0: known; the others are 0).
constexpr size_t kGpuRecord = 20;
constexpr size_t kLowerRecord = 21;
constexpr uint8_t kKnown = 1;

constexpr std::string_view kTierKeys[kv::kNumMedia] = {"gpu", "cpu", "disk"};
using TierBins = std::array<std::span<const uint8_t>, kv::kNumMedia>;  // by Medium

void put_le(uint8_t* p, uint64_t v, size_t width) {
  for (size_t i = 0; i < width; ++i, v >>= 8) p[i] = static_cast<uint8_t>(v & 0xff);
}
uint64_t load_le(const uint8_t* p, size_t width) {
  uint64_t v = 0;
  for (size_t i = width; i > 0; --i) v = (v << 8) | p[i - 1];
  return v;
}

void write_bin(MsgpackWriter& w, const std::vector<uint8_t>& bin) {
  INFERA_CHECK(bin.size() <= UINT32_MAX);  // msgpack's bin 32
  w.bin(bin);
}

// One tier of a dump as its bin; `bin` is reused from worker to worker.
void write_gpu(MsgpackWriter& w, const std::vector<WorkerDump::GpuEntry>& entries,
               std::vector<uint8_t>& bin) {
  bin.resize(entries.size() * kGpuRecord);
  uint8_t* p = bin.data();
  for (const WorkerDump::GpuEntry& e : entries) {
    put_le(p, e.engine, 8);
    put_le(p + 8, e.router, 8);
    put_le(p + 16, e.copies, 4);
    p += kGpuRecord;
  }
  write_bin(w, bin);
}

void write_lower(MsgpackWriter& w, const std::vector<WorkerDump::LowerEntry>& entries,
                 std::vector<uint8_t>& bin) {
  bin.resize(entries.size() * kLowerRecord);
  uint8_t* p = bin.data();
  for (const WorkerDump::LowerEntry& e : entries) {
    put_le(p, e.engine, 8);
    put_le(p + 8, e.router, 8);
    put_le(p + 16, e.refs, 4);
    p[20] = e.known ? kKnown : 0;
    p += kLowerRecord;
  }
  write_bin(w, bin);
}

void write_worker(MsgpackWriter& w, const WorkerSnapshot& worker, std::vector<uint8_t>& bin) {
  const events::StreamSnapshot& s = worker.stream;
  w.map(s.main_group ? 7u : 6u);
  w.str("name");
  w.str(worker.name);
  w.str("stale");
  w.boolean(s.stale);
  w.str("ranks");
  INFERA_CHECK(s.ranks.size() <= UINT32_MAX);
  w.array(static_cast<uint32_t>(s.ranks.size()));
  for (const events::RankPosition& r : s.ranks) {
    w.map(r.has_id ? 3 : 2);
    w.str("dp_rank");
    w.sint(r.dp_rank);
    w.str("last");
    w.uint(r.last);
    if (r.has_id) {
      w.str("publisher_id");
      w.bin(r.publisher_id);
    }
  }
  if (s.main_group) {
    w.str("main_group");
    w.sint(*s.main_group);
  }
  w.str(kTierKeys[0]);
  write_gpu(w, s.dump.gpu, bin);
  for (size_t t = 0; t < s.dump.lower.size(); ++t) {
    w.str(kTierKeys[t + 1]);
    write_lower(w, s.dump.lower[t], bin);
  }
}

// The decoder: one pass over a map per call, errors as Status with the byte offset.
class Decoder {
 public:
  Decoder(std::span<const uint8_t> bytes, const SnapshotLimits& limits)
      : r_(bytes, reader_limits(limits)), limits_(limits) {}

  Status read_version();
  Status read_snapshot(IndexSnapshot& out);

 private:
  static events::MsgpackLimits reader_limits(const SnapshotLimits& limits) {
    // The largest single value is a worker's tier bin; other lengths are checked by the caller.
    const uint64_t bin = limits.max_blocks_per_worker > UINT32_MAX / kLowerRecord
                             ? UINT32_MAX
                             : limits.max_blocks_per_worker * kLowerRecord;
    events::MsgpackLimits m;
    m.max_length = static_cast<uint32_t>(
        std::clamp<uint64_t>(bin, std::max<uint64_t>(limits.max_name_bytes, 1u << 16), UINT32_MAX));
    m.max_depth = 16;
    return m;
  }

  Status read_worker(WorkerSnapshot& out, uint64_t& total_blocks);
  Status read_ranks(std::vector<events::RankPosition>& out);
  Status read_rank(events::RankPosition& out);
  Status read_tiers(const TierBins& bins, WorkerDump& out, uint64_t& total_blocks);

  // Reads a map header (n pairs) or fails.
  Status map(uint32_t& n, std::string_view what) {
    return r_.read_map(n) ? ok_status() : malformed(std::string(what) + " is not a map");
  }
  // The next key; false (with `key` empty) for a non-string key, whose pair the caller skips.
  bool key(std::string_view& key) {
    key = {};
    if (r_.peek() == events::MsgpackType::kStr) return r_.read_str(key);
    return false;
  }
  Status skip_pair_value() { return r_.skip() ? ok_status() : malformed("bad value"); }
  Status skip_pair() {
    if (!r_.skip() || !r_.skip()) return malformed("bad key or value");
    return ok_status();
  }
  Status read_uint(uint64_t& out, uint64_t max, std::string_view what);
  Status read_name(std::string& out, std::string_view what);
  // A repeated key is malformed: the format never writes one.
  Status once(uint32_t& seen, uint32_t bit, std::string_view key) {
    if (seen & bit) return malformed("duplicate key \"" + std::string(key) + "\"");
    seen |= bit;
    return ok_status();
  }

  Status malformed(std::string what) {
    std::string m = "index snapshot: " + what + " at byte " +
                    std::to_string(r_.ok() ? r_.position() : r_.error_position());
    if (!r_.ok()) {
      m += " (msgpack: " + std::string(events::msgpack_error_name(r_.error())) + ")";
    }
    return data_loss(std::move(m));
  }
  static Status too_many(std::string_view what, uint64_t n, uint64_t limit) {
    return resource_exhausted("index snapshot: " + std::string(what) + " " + std::to_string(n) +
                              " above the limit " + std::to_string(limit));
  }

  MsgpackReader r_;
  SnapshotLimits limits_;
  std::unordered_set<std::string> names_;  // worker names seen: each at most once
};

Status Decoder::read_uint(uint64_t& out, uint64_t max, std::string_view what) {
  events::MsgpackInt v;
  if (!r_.read_int(v)) return malformed(std::string(what) + " is not an integer");
  if (v.negative || v.bits > max) {
    return malformed(std::string(what) + " out of range");
  }
  out = v.bits;
  return ok_status();
}

Status Decoder::read_name(std::string& out, std::string_view what) {
  std::string_view s;
  if (!r_.read_str(s)) return malformed(std::string(what) + " is not a string");
  if (s.size() > limits_.max_name_bytes) return too_many(what, s.size(), limits_.max_name_bytes);
  out.assign(s);
  return ok_status();
}

Status Decoder::read_version() {
  uint32_t n = 0;
  INFERA_RETURN_IF_ERROR(map(n, "snapshot"));
  std::optional<uint64_t> version;
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view k;
    if (!key(k)) {
      INFERA_RETURN_IF_ERROR(skip_pair());
    } else if (k == "version" && !version) {
      uint64_t v = 0;
      INFERA_RETURN_IF_ERROR(read_uint(v, UINT64_MAX, "version"));
      version = v;
    } else {
      INFERA_RETURN_IF_ERROR(skip_pair_value());
    }
  }
  if (!r_.ok()) return malformed("truncated");
  if (!version) return invalid_argument("index snapshot: no version");
  if (*version != kSnapshotVersion) {
    return invalid_argument("index snapshot: version " + std::to_string(*version) +
                            " not supported (this router reads version " +
                            std::to_string(kSnapshotVersion) + ")");
  }
  r_.rewind(0);
  return ok_status();
}

Status Decoder::read_snapshot(IndexSnapshot& out) {
  uint32_t n = 0;
  INFERA_RETURN_IF_ERROR(map(n, "snapshot"));
  uint32_t seen = 0;
  uint64_t total_blocks = 0;
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view k;
    if (!key(k)) {
      INFERA_RETURN_IF_ERROR(skip_pair());
    } else if (k == "version") {
      INFERA_RETURN_IF_ERROR(once(seen, 1, k));
      uint64_t v = 0;
      INFERA_RETURN_IF_ERROR(read_uint(v, UINT32_MAX, "version"));
      out.version = static_cast<uint32_t>(v);
    } else if (k == "router_id") {
      INFERA_RETURN_IF_ERROR(once(seen, 2, k));
      INFERA_RETURN_IF_ERROR(read_name(out.router_id, "router_id"));
    } else if (k == "block_size") {
      INFERA_RETURN_IF_ERROR(once(seen, 4, k));
      uint64_t v = 0;
      INFERA_RETURN_IF_ERROR(read_uint(v, UINT32_MAX, "block_size"));
      if (v == 0) return malformed("block_size 0");
      out.block_size = static_cast<uint32_t>(v);
    } else if (k == "workers") {
      INFERA_RETURN_IF_ERROR(once(seen, 8, k));
      uint32_t count = 0;
      if (!r_.read_array(count)) return malformed("workers is not an array");
      if (count > limits_.max_workers) return too_many("workers", count, limits_.max_workers);
      out.workers.resize(count);
      for (WorkerSnapshot& w : out.workers) {
        INFERA_RETURN_IF_ERROR(read_worker(w, total_blocks));
      }
    } else {
      INFERA_RETURN_IF_ERROR(skip_pair_value());  // a later version's addition
    }
  }
  if (!r_.ok()) return malformed("truncated");
  if (!r_.at_end()) return malformed("trailing bytes");
  if ((seen & (1 | 4 | 8)) != (1 | 4 | 8)) {
    return malformed("missing version, block_size or workers");
  }
  return ok_status();
}

Status Decoder::read_worker(WorkerSnapshot& out, uint64_t& total_blocks) {
  uint32_t n = 0;
  INFERA_RETURN_IF_ERROR(map(n, "worker"));
  uint32_t seen = 0;
  TierBins bins;
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view k;
    if (!key(k)) {
      INFERA_RETURN_IF_ERROR(skip_pair());
      continue;
    }
    const auto tier = std::find(std::begin(kTierKeys), std::end(kTierKeys), k);
    if (k == "name") {
      INFERA_RETURN_IF_ERROR(once(seen, 1, k));
      INFERA_RETURN_IF_ERROR(read_name(out.name, "worker name"));
    } else if (k == "stale") {
      INFERA_RETURN_IF_ERROR(once(seen, 2, k));
      if (!r_.read_bool(out.stream.stale)) return malformed("stale is not a bool");
    } else if (k == "ranks") {
      INFERA_RETURN_IF_ERROR(once(seen, 4, k));
      INFERA_RETURN_IF_ERROR(read_ranks(out.stream.ranks));
    } else if (k == "main_group") {
      INFERA_RETURN_IF_ERROR(once(seen, 64, k));
      events::MsgpackInt g;
      if (!r_.read_int(g)) return malformed("main_group is not an integer");
      out.stream.main_group = static_cast<int64_t>(g.bits);
    } else if (tier != std::end(kTierKeys)) {
      const size_t t = static_cast<size_t>(tier - std::begin(kTierKeys));
      INFERA_RETURN_IF_ERROR(once(seen, 8u << t, k));
      if (!r_.read_bin(bins[t])) return malformed(std::string(k) + " is not a bin");
    } else {
      INFERA_RETURN_IF_ERROR(skip_pair_value());
    }
  }
  if ((seen & (1 | 2)) != (1 | 2)) return malformed("worker without name or stale");
  if (!names_.insert(out.name).second) return malformed("worker \"" + out.name + "\" twice");
  return read_tiers(bins, out.stream.dump, total_blocks);
}

Status Decoder::read_ranks(std::vector<events::RankPosition>& out) {
  uint32_t n = 0;
  if (!r_.read_array(n)) return malformed("ranks is not an array");
  if (n > limits_.max_ranks) return too_many("ranks", n, limits_.max_ranks);
  out.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    INFERA_RETURN_IF_ERROR(read_rank(out[i]));
    for (uint32_t j = 0; j < i; ++j) {
      if (out[j].dp_rank == out[i].dp_rank) return malformed("dp_rank listed twice");
    }
  }
  return ok_status();
}

Status Decoder::read_rank(events::RankPosition& out) {
  uint32_t n = 0;
  INFERA_RETURN_IF_ERROR(map(n, "rank"));
  uint32_t seen = 0;
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view k;
    if (!key(k)) {
      INFERA_RETURN_IF_ERROR(skip_pair());
    } else if (k == "dp_rank") {
      INFERA_RETURN_IF_ERROR(once(seen, 1, k));
      events::MsgpackInt v;
      if (!r_.read_int(v)) return malformed("dp_rank is not an integer");
      if (!v.negative && v.bits > static_cast<uint64_t>(INT64_MAX)) {
        return malformed("dp_rank out of range");
      }
      out.dp_rank = static_cast<int64_t>(v.bits);
    } else if (k == "last") {
      INFERA_RETURN_IF_ERROR(once(seen, 2, k));
      INFERA_RETURN_IF_ERROR(read_uint(out.last, UINT64_MAX, "last"));
    } else if (k == "publisher_id") {
      INFERA_RETURN_IF_ERROR(once(seen, 4, k));
      std::span<const uint8_t> id;
      if (!r_.read_bin(id)) return malformed("publisher_id is not a bin");
      if (id.size() != out.publisher_id.size()) return malformed("publisher_id not 16 bytes");
      std::memcpy(out.publisher_id.data(), id.data(), id.size());
      out.has_id = true;
    } else {
      INFERA_RETURN_IF_ERROR(skip_pair_value());
    }
  }
  if ((seen & (1 | 2)) != (1 | 2)) return malformed("rank without dp_rank or last");
  return ok_status();
}

Status Decoder::read_tiers(const TierBins& bins, WorkerDump& out, uint64_t& total_blocks) {
  // Sizes first: nothing is allocated before every bound holds.
  uint64_t blocks = 0;
  for (size_t t = 0; t < kv::kNumMedia; ++t) {
    const size_t record = t == 0 ? kGpuRecord : kLowerRecord;
    if (bins[t].size() % record != 0) {
      return malformed(std::string(kTierKeys[t]) + " bin of " + std::to_string(bins[t].size()) +
                       " bytes is not a multiple of " + std::to_string(record));
    }
    blocks += bins[t].size() / record;
  }
  if (blocks > limits_.max_blocks_per_worker) {
    return too_many("blocks of one worker", blocks, limits_.max_blocks_per_worker);
  }
  total_blocks += blocks;
  if (total_blocks > limits_.max_total_blocks) {
    return too_many("blocks", total_blocks, limits_.max_total_blocks);
  }
  out.gpu.resize(bins[0].size() / kGpuRecord);
  for (size_t i = 0; i < out.gpu.size(); ++i) {
    const uint8_t* p = bins[0].data() + i * kGpuRecord;
    out.gpu[i] = {load_le(p, 8), load_le(p + 8, 8), static_cast<uint32_t>(load_le(p + 16, 4))};
    if (out.gpu[i].copies == 0) {
      return malformed("gpu record " + std::to_string(i) + " with 0 copies");
    }
  }
  for (size_t t = 0; t < out.lower.size(); ++t) {
    const std::span<const uint8_t> bin = bins[t + 1];
    std::vector<WorkerDump::LowerEntry>& entries = out.lower[t];
    entries.resize(bin.size() / kLowerRecord);
    for (size_t i = 0; i < entries.size(); ++i) {
      const uint8_t* p = bin.data() + i * kLowerRecord;
      entries[i] = {load_le(p, 8), load_le(p + 8, 8), static_cast<uint32_t>(load_le(p + 16, 4)),
                    p[20] == kKnown};
      if (entries[i].refs == 0 || (p[20] & ~kKnown) != 0) {
        return malformed(std::string(kTierKeys[t + 1]) + " record " + std::to_string(i) +
                         " with 0 refs or unknown flags");
      }
    }
  }
  return ok_status();
}

}  // namespace

std::string encode_snapshot(const IndexSnapshot& snapshot) {
  size_t records = 0;
  for (const WorkerSnapshot& w : snapshot.workers) records += w.stream.dump.size();
  std::string out;
  out.reserve(128 + records * kLowerRecord + snapshot.workers.size() * 160);
  MsgpackWriter w(out);
  w.map(4);
  w.str("version");
  w.uint(snapshot.version);
  w.str("router_id");
  w.str(snapshot.router_id);
  w.str("block_size");
  w.uint(snapshot.block_size);
  w.str("workers");
  INFERA_CHECK(snapshot.workers.size() <= UINT32_MAX);
  w.array(static_cast<uint32_t>(snapshot.workers.size()));
  std::vector<uint8_t> bin;
  for (const WorkerSnapshot& worker : snapshot.workers) write_worker(w, worker, bin);
  return out;
}

Result<IndexSnapshot> decode_snapshot(std::span<const uint8_t> bytes, SnapshotLimits limits) {
  Decoder d(bytes, limits);
  // The version first, over the whole map: a later version's layout is not guessed at.
  INFERA_RETURN_IF_ERROR(d.read_version());
  IndexSnapshot out;
  INFERA_RETURN_IF_ERROR(d.read_snapshot(out));
  return out;
}

}  // namespace infera::replica
