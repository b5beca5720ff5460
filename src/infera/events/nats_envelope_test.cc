#include "infera/events/nats_envelope.h"

#include <gtest/gtest.h>

#include "infera/events/msgpack.h"

namespace infera::events {
namespace {

TEST(NatsEnvelope, RoundTripsWithAndWithoutAPublisherId) {
  const std::string batch = "\x93\xcb\x00\x00\x00\x00\x00\x00\x00\x00\x90\xc0";
  uint8_t seq8[8] = {0, 0, 0, 0, 0, 0, 1, 2};
  const std::string a = encode_envelope("10.0.0.7:8000", seq8, "kv-events", byte_span(batch));
  auto e = decode_envelope(byte_span(a));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->worker_id, "10.0.0.7:8000");
  EXPECT_EQ(e->seq, 258u);
  EXPECT_EQ(e->topic, "kv-events");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(e->batch.data()), e->batch.size()), batch);
  EXPECT_FALSE(e->has_publisher_id);
  EXPECT_EQ(e->seq_frame_size(), 8u);
  EXPECT_EQ(e->seq_frame()[7], 2);

  uint8_t seq24[24] = {};
  seq24[7] = 9;
  for (int i = 8; i < 24; ++i) seq24[i] = static_cast<uint8_t>(i);
  auto b = decode_envelope(byte_span(encode_envelope("w", seq24, "", byte_span(batch))));
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->has_publisher_id);
  EXPECT_EQ(b->seq_frame_size(), 24u);
  EXPECT_EQ(b->seq_frame()[23], 23);
  EXPECT_EQ(b->seq, 9u);
}

TEST(NatsEnvelope, TheEndMarkerAndUnknownKeys) {
  auto end = decode_envelope(byte_span(encode_replay_end()));
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(end->end);
  std::string extra;
  MsgpackWriter w(extra);
  w.map(5);
  w.str("future");
  w.array(1);
  w.uint(1);
  w.str("worker_id");
  w.str("w");
  w.str("seq");
  w.uint(3);
  w.str("topic");
  w.str("t");
  w.str("batch");
  const uint8_t b[] = {0x90};
  w.bin(b);
  auto e = decode_envelope(byte_span(extra));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->seq, 3u);
}

TEST(NatsEnvelope, MalformedEnvelopesAreErrors) {
  const std::string cases[] = {"", "\xc1", "\x90", "\x81\xa3seq\xff", "\x81\xa3seq\xa1x",
                               "\x82\xa9worker_id\xa1w\xa3seq\x01",  // no batch
                               "\x81\xa5" "batch\xc4\x05\x01"};         // truncated bin
  for (const std::string& c : cases) EXPECT_FALSE(decode_envelope(byte_span(c)).ok()) << c.size();
}

TEST(NatsReplayRequest, RoundTripsAndRejectsBadInput) {
  auto r = decode_replay_request(byte_span(encode_replay_request({42, 0})));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->from_seq, 42u);
  auto ranked = decode_replay_request(byte_span(encode_replay_request({7, 3})));
  ASSERT_TRUE(ranked.ok());
  EXPECT_EQ(ranked->dp_rank, 3);
  EXPECT_FALSE(decode_replay_request(byte_span(std::string("\x80"))).ok());
  EXPECT_FALSE(decode_replay_request(byte_span(std::string("\x81\xa8" "from_seq\xff"))).ok());
  EXPECT_FALSE(decode_replay_request(byte_span(std::string("junk"))).ok());
}

}  // namespace
}  // namespace infera::events
