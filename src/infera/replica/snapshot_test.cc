#include "infera/replica/snapshot.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "infera/events/encoder.h"
#include "infera/events/msgpack.h"
#include "infera/kv/block_hash.h"

namespace infera::replica {
namespace {

using events::byte_span;
using events::MsgpackWriter;
using kv::WorkerDump;

std::array<uint8_t, 16> id_of(char c) {
  std::array<uint8_t, 16> id;
  id.fill(static_cast<uint8_t>(c));
  return id;
}

// Two workers: one with every tier, two ranks (one with a publisher id), one stale and empty.
IndexSnapshot sample() {
  IndexSnapshot s;
  s.router_id = "router-a";
  s.block_size = 32;
  WorkerSnapshot a;
  a.name = "10.0.0.1:8000";
  a.stream.ranks = {{0, 41, true, id_of('x')}, {-1, 7, false, {}}};
  a.stream.main_group = 3;  // a hybrid model's learned full-attention group
  a.stream.dump.gpu = {{1, 101, 1}, {2, 101, 3}, {UINT64_MAX, 0, 1}};
  a.stream.dump.lower[0] = {{5, 105, 2, true}, {6, 0, 1, false}};
  a.stream.dump.lower[1] = {{9, UINT64_MAX - 1, 1, true}};
  WorkerSnapshot b;
  b.name = "10.0.0.2:8000";
  b.stream.stale = true;
  s.workers = {a, b};
  return s;
}

void expect_same(const IndexSnapshot& a, const IndexSnapshot& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.router_id, b.router_id);
  EXPECT_EQ(a.block_size, b.block_size);
  ASSERT_EQ(a.workers.size(), b.workers.size());
  for (size_t w = 0; w < a.workers.size(); ++w) {
    const events::StreamSnapshot& x = a.workers[w].stream;
    const events::StreamSnapshot& y = b.workers[w].stream;
    EXPECT_EQ(a.workers[w].name, b.workers[w].name);
    EXPECT_EQ(x.stale, y.stale);
    EXPECT_EQ(x.main_group, y.main_group);
    ASSERT_EQ(x.ranks.size(), y.ranks.size());
    for (size_t r = 0; r < x.ranks.size(); ++r) {
      EXPECT_EQ(x.ranks[r].dp_rank, y.ranks[r].dp_rank);
      EXPECT_EQ(x.ranks[r].last, y.ranks[r].last);
      EXPECT_EQ(x.ranks[r].has_id, y.ranks[r].has_id);
      if (x.ranks[r].has_id) {
        EXPECT_EQ(x.ranks[r].publisher_id, y.ranks[r].publisher_id);
      }
    }
    ASSERT_EQ(x.dump.gpu.size(), y.dump.gpu.size());
    for (size_t i = 0; i < x.dump.gpu.size(); ++i) {
      EXPECT_EQ(x.dump.gpu[i].engine, y.dump.gpu[i].engine);
      EXPECT_EQ(x.dump.gpu[i].router, y.dump.gpu[i].router);
      EXPECT_EQ(x.dump.gpu[i].copies, y.dump.gpu[i].copies);
    }
    for (size_t t = 0; t < x.dump.lower.size(); ++t) {
      ASSERT_EQ(x.dump.lower[t].size(), y.dump.lower[t].size());
      for (size_t i = 0; i < x.dump.lower[t].size(); ++i) {
        EXPECT_EQ(x.dump.lower[t][i].engine, y.dump.lower[t][i].engine);
        EXPECT_EQ(x.dump.lower[t][i].router, y.dump.lower[t][i].router);
        EXPECT_EQ(x.dump.lower[t][i].refs, y.dump.lower[t][i].refs);
        EXPECT_EQ(x.dump.lower[t][i].known, y.dump.lower[t][i].known);
      }
    }
  }
}

Result<IndexSnapshot> decode(const std::string& bytes, SnapshotLimits limits = {}) {
  return decode_snapshot(byte_span(bytes), limits);
}

// A snapshot's top level written by hand, for inputs encode_snapshot never makes; `worker`
// writes the one worker's map.
template <typename WriteWorker>
std::string handmade(WriteWorker&& worker, uint64_t version = 1) {
  std::string out;
  MsgpackWriter w(out);
  w.map(3);
  w.str("version");
  w.uint(version);
  w.str("block_size");
  w.uint(16);
  w.str("workers");
  w.array(1);
  worker(w);
  return out;
}

TEST(SnapshotCodecTest, RoundTripKeepsEveryField) {
  const IndexSnapshot s = sample();
  const Result<IndexSnapshot> back = decode(encode_snapshot(s));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(s, *back);
}

TEST(SnapshotCodecTest, RecordsArePackedTwentyBytesPerGpuBlock) {
  IndexSnapshot s;
  WorkerSnapshot w;
  w.name = "w";
  for (uint64_t i = 0; i < 100000; ++i) w.stream.dump.gpu.push_back({i, i * 31, 1});
  s.workers.push_back(std::move(w));
  const std::string bytes = encode_snapshot(s);
  EXPECT_LE(bytes.size(), 100000u * 20 + 128);  // a million blocks: about 20 MB
  const Result<IndexSnapshot> back = decode(bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->workers.at(0).stream.dump.gpu.size(), 100000u);
}

TEST(SnapshotCodecTest, AnotherVersionIsRejectedByName) {
  IndexSnapshot s = sample();
  s.version = 2;
  const Result<IndexSnapshot> back = decode(encode_snapshot(s));
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(back.status().message().find("version 2 not supported"), std::string::npos)
      << back.status().message();
}

TEST(SnapshotCodecTest, AnotherVersionIsRejectedWhateverItsLayout) {
  // A later version may change what follows; the version is checked before anything else.
  std::string bytes;
  MsgpackWriter w(bytes);
  w.map(2);
  w.str("workers");
  w.str("not an array in version 1");
  w.str("version");
  w.uint(3);
  const Result<IndexSnapshot> back = decode(bytes);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kInvalidArgument);
}

TEST(SnapshotCodecTest, MissingVersionIsRejected) {
  std::string bytes;
  MsgpackWriter w(bytes);
  w.map(1);
  w.str("block_size");
  w.uint(16);
  EXPECT_EQ(decode(bytes).status().code(), StatusCode::kInvalidArgument);
}

TEST(SnapshotCodecTest, EveryTruncationIsRejected) {
  const std::string bytes = encode_snapshot(sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const Result<IndexSnapshot> back = decode(bytes.substr(0, n));
    ASSERT_FALSE(back.ok()) << "prefix of " << n << " bytes";
    EXPECT_EQ(back.status().code(), StatusCode::kDataLoss) << back.status().to_string();
  }
}

TEST(SnapshotCodecTest, TrailingBytesAreRejected) {
  EXPECT_EQ(decode(encode_snapshot(sample()) + "x").status().code(), StatusCode::kDataLoss);
}

TEST(SnapshotCodecTest, BinNotAMultipleOfTheRecordIsRejected) {
  for (const char* tier : {"gpu", "cpu", "disk"}) {
    const std::string bytes = handmade([&](MsgpackWriter& w) {
      w.map(3);
      w.str("name");
      w.str("w");
      w.str("stale");
      w.boolean(false);
      w.str(tier);
      w.bin(std::vector<uint8_t>(std::string_view(tier) == "gpu" ? 41 : 43, 1));
    });
    const Result<IndexSnapshot> back = decode(bytes);
    ASSERT_FALSE(back.ok()) << tier;
    EXPECT_EQ(back.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(back.status().message().find("not a multiple"), std::string::npos)
        << back.status().message();
  }
}

TEST(SnapshotCodecTest, ZeroCopiesAndUnknownFlagsAreRejected) {
  IndexSnapshot s = sample();
  s.workers[0].stream.dump.gpu[1].copies = 0;
  EXPECT_EQ(decode(encode_snapshot(s)).status().code(), StatusCode::kDataLoss);
  std::string bytes = handmade([](MsgpackWriter& w) {
    w.map(3);
    w.str("name");
    w.str("w");
    w.str("stale");
    w.boolean(false);
    w.str("cpu");
    std::vector<uint8_t> record(21, 0);
    record[16] = 1;  // refs 1
    record[20] = 2;  // a flag no version defines
    w.bin(record);
  });
  EXPECT_EQ(decode(bytes).status().code(), StatusCode::kDataLoss);
}

TEST(SnapshotCodecTest, TooManyWorkersAreRejected) {
  SnapshotLimits limits;
  limits.max_workers = 1;
  const Result<IndexSnapshot> back = decode(encode_snapshot(sample()), limits);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(back.status().message().find("workers 2"), std::string::npos)
      << back.status().message();
}

TEST(SnapshotCodecTest, TooManyBlocksAreRejectedPerWorkerAndInTotal) {
  IndexSnapshot s = sample();
  s.workers[1].stream.dump.gpu = {{7, 8, 1}, {9, 10, 1}};
  s.workers[1].stream.stale = false;
  const std::string bytes = encode_snapshot(s);
  SnapshotLimits per_worker;
  per_worker.max_blocks_per_worker = 5;  // worker a holds 6
  EXPECT_EQ(decode(bytes, per_worker).status().code(), StatusCode::kResourceExhausted);
  SnapshotLimits total;
  total.max_total_blocks = 7;  // 6 + 2
  EXPECT_EQ(decode(bytes, total).status().code(), StatusCode::kResourceExhausted);
  total.max_total_blocks = 8;
  EXPECT_TRUE(decode(bytes, total).ok());
}

TEST(SnapshotCodecTest, TooManyRanksAndLongNamesAreRejected) {
  SnapshotLimits ranks;
  ranks.max_ranks = 1;
  EXPECT_EQ(decode(encode_snapshot(sample()), ranks).status().code(),
            StatusCode::kResourceExhausted);
  SnapshotLimits names;
  names.max_name_bytes = 4;
  EXPECT_EQ(decode(encode_snapshot(sample()), names).status().code(),
            StatusCode::kResourceExhausted);
}

TEST(SnapshotCodecTest, DuplicatesAreRejected) {
  IndexSnapshot s = sample();
  s.workers[1].name = s.workers[0].name;
  EXPECT_EQ(decode(encode_snapshot(s)).status().code(), StatusCode::kDataLoss);
  s = sample();
  s.workers[0].stream.ranks[1].dp_rank = 0;
  EXPECT_EQ(decode(encode_snapshot(s)).status().code(), StatusCode::kDataLoss);
}

TEST(SnapshotCodecTest, UnknownKeysAreSkippedAtEveryLevel) {
  std::string bytes;
  MsgpackWriter w(bytes);
  w.map(5);
  w.str("future");
  w.map(1);
  w.str("nested");
  w.array(2);
  w.uint(1);
  w.nil();
  w.str("version");
  w.uint(1);
  w.uint(42);  // a key that is not even a string
  w.str("value");
  w.str("block_size");
  w.uint(16);
  w.str("workers");
  w.array(1);
  w.map(4);
  w.str("stale");
  w.boolean(false);
  w.str("extra");
  w.float64(1.5);
  w.str("name");
  w.str("w");
  w.str("ranks");
  w.array(1);
  w.map(3);
  w.str("dp_rank");
  w.sint(-2);
  w.str("hint");
  w.bin(std::vector<uint8_t>{1, 2});
  w.str("last");
  w.uint(9);
  const Result<IndexSnapshot> back = decode(bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->workers.size(), 1u);
  EXPECT_EQ(back->workers[0].name, "w");
  ASSERT_EQ(back->workers[0].stream.ranks.size(), 1u);
  EXPECT_EQ(back->workers[0].stream.ranks[0].dp_rank, -2);
  EXPECT_EQ(back->workers[0].stream.ranks[0].last, 9u);
  EXPECT_FALSE(back->workers[0].stream.ranks[0].has_id);
}

TEST(SnapshotCodecTest, MissingRequiredFieldsAreRejected) {
  const std::string no_stale = handmade([](MsgpackWriter& w) {
    w.map(1);
    w.str("name");
    w.str("w");
  });
  EXPECT_EQ(decode(no_stale).status().code(), StatusCode::kDataLoss);
  std::string no_workers;
  MsgpackWriter w(no_workers);
  w.map(2);
  w.str("version");
  w.uint(1);
  w.str("block_size");
  w.uint(16);
  EXPECT_EQ(decode(no_workers).status().code(), StatusCode::kDataLoss);
}

// --- end to end: a ready replica's stream -> snapshot -> bytes -> a booting replica ---

constexpr uint32_t kBs = 4;
constexpr kv::WorkerId kWorker = 3;

std::string be64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return s;
}

// A batch storing block `b` of one prompt on GPU (chained on b - 1) and offloading it to CPU.
std::string batch_storing(uint64_t b) {
  events::BlockStored gpu;
  gpu.block_hashes = {500 + b};
  if (b > 0) gpu.parent_block_hash = 500 + b - 1;
  for (uint32_t i = 0; i < kBs; ++i) gpu.token_ids.push_back(static_cast<uint32_t>(b * kBs + i));
  gpu.block_size = kBs;
  gpu.medium = "GPU";
  events::BlockStored cpu;
  cpu.block_hashes = {500 + b};
  cpu.medium = "CPU";
  events::EventBatch batch;
  batch.ts = 1.0;
  batch.dp_rank = 0;
  batch.events = {gpu, cpu};
  return events::encode_batch(batch);
}

struct Replica {
  kv::KvIndex index{kv::KvIndex::Options{kBs, 16}};
  events::WorkerStream stream{index, stream_options(), nullptr};

  static events::StreamOptions stream_options() {
    events::StreamOptions o;
    o.worker = kWorker;
    o.worker_name = "10.0.0.1:8000";
    return o;
  }
  void deliver(uint64_t seq) {
    const std::string frame = be64(seq);
    stream.on_message(byte_span(frame), byte_span(batch_storing(seq)));
  }
  // GPU hits, lower-tier hits after them, and block counts on GPU and CPU.
  std::array<uint64_t, 4> answer(size_t blocks) const {
    std::vector<uint32_t> tokens;
    for (uint32_t t = 0; t < blocks * kBs; ++t) tokens.push_back(t);
    std::vector<uint32_t> gpu, lower;
    index.find_overlaps(kv::seq_hashes(tokens, kBs), gpu, &lower);
    return {gpu.at(kWorker), lower.at(kWorker), index.block_count(kWorker),
            index.block_count(kWorker, kv::Medium::kCpu)};
  }
};

TEST(SnapshotEndToEndTest, ABootingReplicaSeededFromTheBytesAnswersLikeItsSibling) {
  Replica ready;
  for (uint64_t seq = 0; seq < 6; ++seq) ready.deliver(seq);
  ready.stream.on_message(byte_span(be64(6)), byte_span(batch_storing(2)));  // a second copy
  IndexSnapshot snap;
  snap.router_id = "ready";
  snap.block_size = kBs;
  snap.workers.push_back({"10.0.0.1:8000", ready.stream.snapshot()});
  const std::string bytes = encode_snapshot(snap);

  const Result<IndexSnapshot> got = decode_snapshot(byte_span(bytes));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->workers.size(), 1u);
  Replica booting;
  ASSERT_TRUE(booting.stream.seed(got->workers[0].stream));
  EXPECT_EQ(booting.answer(8), ready.answer(8));
  EXPECT_EQ(booting.answer(8), (std::array<uint64_t, 4>{6, 0, 6, 6}));

  // Both then follow the same live stream: evictions of the duplicated block need two removes.
  events::BlockRemoved removed;
  removed.block_hashes = {502};
  removed.medium = "GPU";
  events::EventBatch batch;
  batch.dp_rank = 0;
  batch.events = {removed};
  const std::string payload = events::encode_batch(batch);
  for (Replica* r : {&ready, &booting}) {
    r->stream.on_message(byte_span(be64(7)), byte_span(payload));
  }
  EXPECT_EQ(booting.answer(8), ready.answer(8));
  EXPECT_EQ(booting.answer(8)[0], 6u);
  for (Replica* r : {&ready, &booting}) {
    r->stream.on_message(byte_span(be64(8)), byte_span(payload));
  }
  EXPECT_EQ(booting.answer(8), ready.answer(8));
  EXPECT_EQ(booting.answer(8)[0], 2u);  // a hole at block 2; blocks 2-5 are on CPU after it
  EXPECT_EQ(booting.answer(8)[1], 4u);
  EXPECT_EQ(booting.stream.stats().restarts, 0u);
}

}  // namespace
}  // namespace infera::replica
