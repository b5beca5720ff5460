#include "infera/events/decoder.h"

#include <gtest/gtest.h>

#include "infera/events/encoder.h"
#include "infera/events/msgpack.h"

namespace infera::events {
namespace {

DecodeResult decode(const std::string& payload, EventBatch& out, const DecodeLimits& limits = {}) {
  return decode_batch(byte_span(payload), out, limits);
}

DecodeError error_of(const std::string& payload, const DecodeLimits& limits = {}) {
  EventBatch out;
  return decode(payload, out, limits).error;
}

// [1.5, [event], 0] around an event the test writes.
template <typename Fn>
std::string batch_with(Fn&& write_event) {
  std::string out;
  MsgpackWriter w(out);
  w.array(3);
  w.float64(1.5);
  w.array(1);
  write_event(w);
  w.uint(0);
  return out;
}

BlockStored rich_stored() {
  BlockStored s;
  s.block_hashes = {11, ~0ull};
  s.parent_block_hash = 10;
  s.token_ids = {1, 2, 3, 4};
  s.block_size = 2;
  s.lora_id = 7;
  s.medium = "GPU";
  s.lora_name = "adapter";
  s.extra_keys_count = 2;
  s.group_idx = 0;
  s.kv_cache_spec_kind = "full_attention";
  s.kv_cache_spec_sliding_window = 4096;
  s.locality = "LOCAL";
  s.ownership = "kvcr";
  s.session_id = "session";
  return s;
}

TEST(DecoderTest, MapEventWithTypeNotFirst) {
  const std::string payload = batch_with([](MsgpackWriter& w) {
    w.map(3);
    w.str("block_hashes");
    w.array(1);
    w.uint(42);
    w.str("medium");
    w.str("CPU");
    w.str("type");
    w.str("BlockRemoved");
  });
  EventBatch out;
  ASSERT_TRUE(decode(payload, out).ok());
  ASSERT_EQ(out.events.size(), 1u);
  const auto& r = std::get<BlockRemoved>(out.events[0]);
  EXPECT_EQ(r.block_hashes, std::vector<uint64_t>{42});
  EXPECT_EQ(r.medium, "CPU");
}

TEST(DecoderTest, UnknownEventTypesAreSkippedAndCounted) {
  std::string payload;
  MsgpackWriter w(payload);
  w.array(2);
  w.float64(2.0);
  w.array(4);
  w.map(2);  // a future map event
  w.str("type");
  w.str("BlockMoved");
  w.str("block_hashes");
  w.array(1);
  w.uint(1);
  w.array(3);  // a future array event
  w.str("BlockPinned");
  w.uint(5);
  w.array(0);
  w.array(1);
  w.str("AllBlocksCleared");
  w.map(1);
  w.str("type");
  w.str("AllBlocksCleared");
  EventBatch out;
  const DecodeResult r = decode(payload, out);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.unknown_events, 2u);
  ASSERT_EQ(out.events.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(out.events[0]));
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(out.events[1]));
  EXPECT_FALSE(out.dp_rank.has_value());  // 2-element batch
}

TEST(DecoderTest, MapBatchIsTolerated) {
  std::string payload;
  MsgpackWriter w(payload);
  w.map(4);
  w.str("ts");
  w.float64(3.25);
  w.str("future");
  w.array(2);
  w.nil();
  w.nil();
  w.str("events");
  w.array(1);
  w.array(1);
  w.str("AllBlocksCleared");
  w.str("dp_rank");
  w.uint(3);
  EventBatch out;
  ASSERT_TRUE(decode(payload, out).ok());
  EXPECT_EQ(out.ts, 3.25);
  EXPECT_EQ(out.dp_rank, 3);
  EXPECT_EQ(out.events.size(), 1u);
}

TEST(DecoderTest, HashesOfEveryWidthAndForm) {
  const std::string payload = batch_with([](MsgpackWriter& w) {
    w.array(3);
    w.str("BlockRemoved");
    w.array(6);
    w.uint(5);                       // fixint
    w.uint(300);                     // uint16
    w.sint(-1);                      // negative: the int64 bit pattern
    w.sint(INT64_MIN);               // int64
    const uint8_t digest[32] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
    w.bin(digest);                   // vLLM bytes: last 8 bytes, big-endian
    const uint8_t shorter[2] = {0xab, 0xcd};
    w.bin(shorter);                  // fewer than 8 bytes: zero-extended
    w.nil();
  });
  EventBatch out;
  ASSERT_TRUE(decode(payload, out).ok());
  const auto& r = std::get<BlockRemoved>(out.events[0]);
  EXPECT_EQ(r.block_hashes, (std::vector<uint64_t>{5, 300, ~0ull, 0x8000000000000000ull,
                                                   0x0102030405060708ull, 0xabcdull}));
  EXPECT_FALSE(r.medium.has_value());
}

TEST(DecoderTest, TrailingFieldsAndUnknownKeysAreIgnored) {
  BlockStored s = rich_stored();
  std::string payload;
  MsgpackWriter w(payload);
  w.array(4);
  w.float64(1.0);
  w.array(1);
  w.array(15);  // 11 known positional fields + 3 from a future schema
  w.str("BlockStored");
  w.array(1);
  w.uint(9);
  w.nil();
  w.array(2);
  w.uint(1);
  w.uint(2);
  w.uint(2);
  w.nil();
  w.str("GPU");
  w.nil();
  w.nil();
  w.uint(1);
  w.str("sliding_window");
  w.uint(128);
  w.str("future");
  w.map(0);
  w.array(0);
  w.uint(1);   // dp rank
  w.str("x");  // trailing batch element
  EventBatch out;
  ASSERT_TRUE(decode(payload, out).ok());
  const auto& got = std::get<BlockStored>(out.events[0]);
  EXPECT_EQ(got.block_hashes, std::vector<uint64_t>{9});
  EXPECT_EQ(got.group_idx, 1);
  EXPECT_EQ(got.kv_cache_spec_kind, "sliding_window");
  EXPECT_EQ(got.kv_cache_spec_sliding_window, 128);
  EXPECT_EQ(out.dp_rank, 1);
}

TEST(DecoderTest, SglangMetadataMapAfterMediumIsTolerated) {
  // SGLang's salted stores: the 7-element positional BlockStored plus a metadata map.
  const std::string payload = batch_with([](MsgpackWriter& w) {
    w.array(8);
    w.str("BlockStored");
    w.array(1);
    w.sint(-5);
    w.nil();
    w.array(2);
    w.uint(1);
    w.uint(2);
    w.uint(2);
    w.nil();
    w.str("GPU");
    w.map(1);
    w.str("cache_salt");
    w.str("salt-A");
  });
  EventBatch out;
  ASSERT_TRUE(decode(payload, out).ok());
  const auto& s = std::get<BlockStored>(out.events[0]);
  EXPECT_EQ(s.block_hashes, std::vector<uint64_t>{static_cast<uint64_t>(-5)});
  EXPECT_FALSE(s.lora_name.has_value());
}

TEST(DecoderTest, ReusedStorageGivesTheSameResultAsAFreshBatch) {
  EventBatch rich;
  rich.ts = 1;
  rich.dp_rank = 2;
  rich.events = {rich_stored(), BlockRemoved{{1, 2}, "CPU", 3, "REMOTE", "x"}, AllBlocksCleared{}};
  rich.events.push_back(rich_stored());
  EventBatch minimal;
  minimal.ts = 2;
  BlockStored bare;
  bare.block_hashes = {5};
  minimal.events = {bare, BlockRemoved{{7}, std::nullopt, std::nullopt, std::nullopt, std::nullopt}};

  EventBatch reused;
  for (const WireFormat f : {WireFormat::kVllmMap, WireFormat::kVllmArray}) {
    ASSERT_TRUE(decode(encode_batch(rich, f), reused).ok());
    ASSERT_TRUE(decode(encode_batch(minimal, f), reused).ok());
    auto fresh = decode_batch(byte_span(encode_batch(minimal, f)));
    ASSERT_TRUE(fresh.ok());
    EXPECT_EQ(reused, *fresh) << wire_format_name(f);
  }
}

TEST(DecoderTest, ScratchKeepsBuffersAcrossEventTypeChanges) {
  EventBatch stores;
  stores.events = {rich_stored(), rich_stored()};
  EventBatch removes;
  removes.events = {BlockRemoved{{1, 2, 3}, "GPU", 0, std::nullopt, std::nullopt}, AllBlocksCleared{},
                    BlockRemoved{{4}, std::nullopt, std::nullopt, "LOCAL", std::nullopt}};
  const std::string a = encode_batch(stores);
  const std::string b = encode_batch(removes);
  EventBatch out;
  DecodeScratch scratch;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(decode_batch(byte_span(a), out, {}, &scratch).ok());
    EXPECT_EQ(out, *decode_batch(byte_span(a)));
    const uint32_t* tokens = std::get<BlockStored>(out.events[0]).token_ids.data();
    ASSERT_TRUE(decode_batch(byte_span(b), out, {}, &scratch).ok());
    EXPECT_EQ(out, *decode_batch(byte_span(b)));
    EXPECT_EQ(scratch.stored.size(), 2u);  // both stores wait with their buffers
    ASSERT_TRUE(decode_batch(byte_span(a), out, {}, &scratch).ok());
    // The token buffer came back from the scratch rather than a new allocation.
    const uint32_t* again = std::get<BlockStored>(out.events[0]).token_ids.data();
    const uint32_t* other = std::get<BlockStored>(out.events[1]).token_ids.data();
    EXPECT_TRUE(again == tokens || other == tokens);
  }
}

TEST(DecoderTest, MalformedInputIsAnErrorOfTheRightKind) {
  EXPECT_EQ(error_of(""), DecodeError::kTruncated);
  EXPECT_EQ(error_of("\xc1"), DecodeError::kInvalidByte);
  EXPECT_EQ(error_of("\xa3" "abc"), DecodeError::kWrongType);  // a string, not a batch
  EXPECT_EQ(error_of(std::string("\x91\xcb\0\0\0\0\0\0\0\0", 10)), DecodeError::kMissingField);
  // Trailing bytes after a complete batch.
  EventBatch b;
  b.events = {AllBlocksCleared{}};
  EXPECT_EQ(error_of(encode_batch(b) + "x"), DecodeError::kTrailingBytes);
  // block_hashes as a string.
  EXPECT_EQ(error_of(batch_with([](MsgpackWriter& w) {
              w.map(2);
              w.str("type");
              w.str("BlockRemoved");
              w.str("block_hashes");
              w.str("oops");
            })),
            DecodeError::kWrongType);
  // An event without its hashes.
  EXPECT_EQ(error_of(batch_with([](MsgpackWriter& w) {
              w.map(2);
              w.str("type");
              w.str("BlockStored");
              w.str("token_ids");
              w.array(0);
            })),
            DecodeError::kMissingField);
  // A map event without a type.
  EXPECT_EQ(error_of(batch_with([](MsgpackWriter& w) {
              w.map(1);
              w.str("block_hashes");
              w.array(0);
            })),
            DecodeError::kMissingField);
  // Token ids must be u32.
  for (const int64_t bad : {int64_t{-1}, int64_t{1} << 32}) {
    EXPECT_EQ(error_of(batch_with([&](MsgpackWriter& w) {
                w.array(5);
                w.str("BlockStored");
                w.array(1);
                w.uint(1);
                w.nil();
                w.array(1);
                w.sint(bad);
                w.uint(1);
              })),
              DecodeError::kBadValue);
  }
  // A negative block size.
  EXPECT_EQ(error_of(batch_with([](MsgpackWriter& w) {
              w.array(5);
              w.str("BlockStored");
              w.array(0);
              w.nil();
              w.array(0);
              w.sint(-16);
            })),
            DecodeError::kBadValue);
  // ts as a string.
  EXPECT_EQ(error_of("\x92\xa1x\x90"), DecodeError::kWrongType);
}

TEST(DecoderTest, HugeDeclaredLengthsAndLimits) {
  // An events list declaring 2^32-1 entries in a 20-byte payload.
  EXPECT_EQ(error_of(std::string("\x92\xcb\0\0\0\0\0\0\0\0\xdd\xff\xff\xff\xff\x90", 16)),
            DecodeError::kTooLarge);
  // Token ids declaring 65535 entries with 3 present: truncated, nothing reserved for them.
  std::string payload = batch_with([](MsgpackWriter& w) {
    w.array(5);
    w.str("BlockStored");
    w.array(0);
    w.nil();
    w.array(65535);
    w.uint(1);
    w.uint(2);
    w.uint(3);
  });
  EXPECT_EQ(error_of(payload), DecodeError::kTruncated);
  // Configured limits.
  BlockStored s;
  s.block_hashes.assign(100, 1);
  EventBatch b;
  b.events = {s};
  DecodeLimits limits;
  limits.max_blocks = 99;
  EXPECT_EQ(error_of(encode_batch(b), limits), DecodeError::kTooLarge);
  limits = {};
  limits.max_payload_bytes = 10;
  EXPECT_EQ(error_of(encode_batch(b), limits), DecodeError::kTooLarge);
}

TEST(DecoderTest, DeepNestingInsideAnUnknownFieldIsAnError) {
  const std::string payload = batch_with([](MsgpackWriter& w) {
    w.map(3);
    w.str("type");
    w.str("BlockRemoved");
    w.str("block_hashes");
    w.array(0);
    w.str("future");
    for (int i = 0; i < 5000; ++i) w.array(1);
    w.nil();
  });
  EXPECT_EQ(error_of(payload), DecodeError::kTooDeep);
}

TEST(DecoderTest, EveryTruncationOfARealPayloadFails) {
  EventBatch b;
  b.ts = 1700000000.5;
  b.dp_rank = 0;
  b.events = {rich_stored(), BlockRemoved{{11}, "GPU", 0, std::nullopt, std::nullopt},
              AllBlocksCleared{}};
  for (const WireFormat f : {WireFormat::kVllmMap, WireFormat::kVllmArray, WireFormat::kSglangArray}) {
    const std::string full = encode_batch(b, f);
    for (size_t n = 0; n < full.size(); ++n) {
      EventBatch out;
      EXPECT_FALSE(decode(full.substr(0, n), out).ok()) << wire_format_name(f) << " prefix " << n;
    }
  }
}

TEST(DecoderTest, ConvenienceOverloadNamesTheError) {
  const auto r = decode_batch(byte_span(std::string("\x92\xa1x\x90", 4)));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("wrong_type"), std::string::npos);
}

}  // namespace
}  // namespace infera::events
