#include "infera/events/encoder.h"

#include <gtest/gtest.h>

#include "infera/events/decoder.h"
#include "infera/events/msgpack.h"

namespace infera::events {
namespace {

EventBatch rich_batch() {
  BlockStored s;
  s.block_hashes = {1, 0x8000000000000000ull, ~0ull};
  s.parent_block_hash = 0xdeadbeefcafef00dull;
  for (uint32_t i = 0; i < 48; ++i) s.token_ids.push_back(i * 40000u);
  s.block_size = 16;
  s.lora_id = 3;
  s.medium = "GPU";
  s.lora_name = "my-lora";
  s.extra_keys_count = 3;
  s.group_idx = 1;
  s.kv_cache_spec_kind = "sliding_window";
  s.kv_cache_spec_sliding_window = 4096;
  s.locality = "LOCAL";
  s.ownership = "owner";
  s.session_id = "sess";
  BlockRemoved r;
  r.block_hashes = {1, ~0ull};
  r.medium = "CPU_TIER2";
  r.group_idx = 1;
  r.locality = "REMOTE";
  r.ownership = "o";
  EventBatch b;
  b.ts = 1700000003.75;
  b.dp_rank = 7;
  b.events = {s, r, AllBlocksCleared{}};
  return b;
}

EventBatch decoded(const std::string& payload) {
  auto r = decode_batch(byte_span(payload));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : EventBatch{};
}

TEST(EncoderTest, MapFormatRoundTripsEveryField) {
  const EventBatch b = rich_batch();
  EXPECT_EQ(decoded(encode_batch(b, WireFormat::kVllmMap)), b);
}

TEST(EncoderTest, NonNilExtraKeysAreKeptVerbatim) {
  EventBatch b = rich_batch();
  auto& s = std::get<BlockStored>(b.events[0]);
  MsgpackWriter w(s.extra_keys_msgpack);
  w.array(3);
  w.array(1);
  w.str("my-lora");
  w.nil();
  w.array(2);
  w.str("mm");
  w.uint(0);
  EXPECT_EQ(decoded(encode_batch(b, WireFormat::kVllmMap)), b);
  EXPECT_EQ(decoded(encode_batch(b, WireFormat::kVllmArray)).events.size(), 3u);
}

TEST(EncoderTest, ArrayFormatsCarryWhatTheirSchemaHas) {
  const EventBatch b = rich_batch();
  // Last positional schema: everything but locality/ownership/session_id.
  EventBatch want = b;
  auto& s = std::get<BlockStored>(want.events[0]);
  s.locality.reset();
  s.ownership.reset();
  s.session_id.reset();
  auto& r = std::get<BlockRemoved>(want.events[1]);
  r.locality.reset();
  r.ownership.reset();
  EXPECT_EQ(decoded(encode_batch(b, WireFormat::kVllmArray)), want);

  // v0.10: BlockStored ends at medium, BlockRemoved at medium.
  s.lora_name.reset();
  s.extra_keys_count = 0;
  s.group_idx.reset();
  s.kv_cache_spec_kind.reset();
  s.kv_cache_spec_sliding_window.reset();
  r.group_idx.reset();
  EXPECT_EQ(decoded(encode_batch(b, WireFormat::kVllmArrayV010)), want);
  // SGLang: the same fields, hashes as signed int64 on the wire, same bits after decoding.
  EXPECT_EQ(decoded(encode_batch(b, WireFormat::kSglangArray)), want);
  const std::string sg = encode_batch(b, WireFormat::kSglangArray);
  EXPECT_NE(sg.find("\xd3\x80\x00\x00\x00\x00\x00\x00\x00", 0, 9), std::string::npos);

  // v0.9: no medium, no dp rank.
  s.medium.reset();
  r.medium.reset();
  want.dp_rank.reset();
  EXPECT_EQ(decoded(encode_batch(b, WireFormat::kVllmArrayV09)), want);
}

TEST(EncoderTest, TrailingDefaultsAreTrimmedInArrays) {
  EventBatch b;
  b.ts = 1;
  BlockStored s;
  s.block_hashes = {1};
  s.token_ids = {1, 2};
  s.block_size = 2;
  s.medium = "GPU";
  s.group_idx = 0;  // forces extra_keys (nil) as a placeholder before it
  b.events = {s};
  const std::string payload = encode_batch(b, WireFormat::kVllmArray);
  MsgpackReader r(byte_span(payload));
  uint32_t n = 0;
  ASSERT_TRUE(r.read_array(n));
  EXPECT_EQ(n, 2u);  // no dp rank
  double ts = 0;
  ASSERT_TRUE(r.read_number(ts));
  ASSERT_TRUE(r.read_array(n));
  ASSERT_TRUE(r.read_array(n));
  EXPECT_EQ(n, 10u);  // tag + 9 fields, up to group_idx
  EXPECT_EQ(decoded(payload), b);
}

TEST(EncoderTest, WireFormatNamesParse) {
  for (const WireFormat f : {WireFormat::kVllmMap, WireFormat::kVllmArray, WireFormat::kVllmArrayV010,
                             WireFormat::kVllmArrayV09, WireFormat::kSglangArray}) {
    auto parsed = parse_wire_format(wire_format_name(f));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_FALSE(parse_wire_format("protobuf").ok());
}

}  // namespace
}  // namespace infera::events
