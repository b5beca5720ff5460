#include "infera/nats/request_wire.h"

#include <gtest/gtest.h>

namespace infera::nats {
namespace {

http::Request post(std::string body) {
  http::Request r;
  r.method = http::Method::kPost;
  r.target = "/v1/chat/completions?x=1";
  r.headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer t"}};
  r.body = std::move(body);
  return r;
}

TEST(RequestWire, ARequestRoundTripsInOnePart) {
  const http::Request r = post("{\"a\":1}");  // the parts are views into its body
  auto parts = encode_request(r, "_INBOX.x.1", 8, 1 << 20);
  ASSERT_TRUE(parts.ok());
  ASSERT_EQ(parts->size(), 1u);
  EXPECT_EQ((*parts)[0].payload, "{\"a\":1}");
  auto head = decode_request((*parts)[0].headers);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  EXPECT_FALSE(head->continuation);
  EXPECT_EQ(head->method, http::Method::kPost);
  EXPECT_EQ(head->target, "/v1/chat/completions?x=1");
  EXPECT_EQ(head->window, 8u);
  EXPECT_EQ(head->body_length, 7u);
  EXPECT_EQ(http::find_header(head->headers, "authorization"), "Bearer t");
  EXPECT_EQ(http::find_header(head->headers, "Content-Type"), "application/json");
}

TEST(RequestWire, ABodyAboveMaxPayloadIsCutIntoNumberedParts) {
  const size_t max = 8192;
  std::string body(50000, 'x');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + i % 26);
  const http::Request r = post(body);  // the parts are views into its body
  auto parts = encode_request(r, "_INBOX.x.2", 64, max);
  ASSERT_TRUE(parts.ok());
  ASSERT_GT(parts->size(), 5u);
  std::string joined;
  for (size_t i = 0; i < parts->size(); ++i) {
    const RequestPart& p = (*parts)[i];
    EXPECT_LE(p.headers.size() + p.payload.size(), max);
    auto h = decode_request(p.headers);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->continuation, i > 0);
    if (i > 0) {
      EXPECT_EQ(h->inbox, "_INBOX.x.2");
      EXPECT_EQ(h->part, i);
    }
    joined += p.payload;
  }
  EXPECT_TRUE(joined == body);
}

TEST(RequestWire, WhatTheWireCannotCarryIsRefused) {
  http::Request r = post("{}");
  r.headers.push_back({"X-Bad", "a\r\nInfera-Window: 1"});
  EXPECT_FALSE(encode_request(r, "i", 8, 1 << 20).ok());
  EXPECT_FALSE(encode_request(post("{}"), "i", 8, 4096).ok());  // max_payload too small
  for (const char* bad : {"NATS/1.0\r\n\r\n",
                          "NATS/1.0\r\nInfera-Method: POST\r\nInfera-Target: x\r\nInfera-Window: 8\r\nInfera-Body-Length: 1\r\n\r\n",
                          "NATS/1.0\r\nInfera-Method: BREW\r\nInfera-Target: /\r\nInfera-Window: 8\r\nInfera-Body-Length: 1\r\n\r\n",
                          "NATS/1.0\r\nInfera-Method: GET\r\nInfera-Target: /\r\nInfera-Window: 0\r\nInfera-Body-Length: 1\r\n\r\n",
                          "NATS/1.0\r\nInfera-Method: GET\r\nInfera-Target: /\r\nInfera-Window: 8\r\nInfera-Body-Length: -1\r\n\r\n",
                          "NATS/1.0\r\nInfera-Continue: i\r\nInfera-Part: 0\r\n\r\n", "garbage"}) {
    EXPECT_FALSE(decode_request(bad).ok()) << bad;
  }
}

TEST(RequestWire, ReplyFramesAndControl) {
  const http::Headers h = {{"Content-Type", "text/event-stream"}};
  auto head = decode_reply(reply_head(0, 200, h, "_INBOX.r.9"));
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->kind, ReplyKind::kHead);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->control, "_INBOX.r.9");
  EXPECT_EQ(http::find_header(head->headers, "content-type"), "text/event-stream");
  auto data = decode_reply(reply_data(5));
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(data->kind, ReplyKind::kData);
  EXPECT_EQ(data->seq, 5u);
  EXPECT_EQ(decode_reply(reply_end(6))->kind, ReplyKind::kEnd);
  auto err = decode_reply(reply_error(7, "engine\r\ndied"));
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->error, "engine  died");
  EXPECT_FALSE(decode_reply("NATS/1.0\r\nInfera-Kind: data\r\n\r\n").ok());  // no seq
  EXPECT_FALSE(decode_reply("NATS/1.0\r\nInfera-Seq: 1\r\nInfera-Kind: what\r\n\r\n").ok());
  EXPECT_FALSE(decode_reply(reply_head(0, 200, h, "bad subject")).ok());
  // Infera-Last: a head or data frame that also ends the answer; not on frames that end anyway.
  EXPECT_FALSE(head->last);
  EXPECT_FALSE(data->last);
  EXPECT_TRUE(decode_reply(reply_head(0, 200, h, "_INBOX.r.9", /*last=*/true))->last);
  EXPECT_TRUE(decode_reply(reply_data(5, /*last=*/true))->last);
  EXPECT_FALSE(decode_reply("NATS/1.0\r\nInfera-Seq: 1\r\nInfera-Kind: data\r\nInfera-Last: yes\r\n\r\n").ok());
  EXPECT_FALSE(decode_reply("NATS/1.0\r\nInfera-Seq: 1\r\nInfera-Kind: end\r\nInfera-Last: 1\r\n\r\n").ok());
  EXPECT_EQ(*decode_control(control_ack(41))->ack, 41u);
  EXPECT_TRUE(decode_control(control_cancel())->cancel);
  EXPECT_FALSE(decode_control("NATS/1.0\r\nInfera-Ack: x\r\n\r\n").ok());
}

}  // namespace
}  // namespace infera::nats
