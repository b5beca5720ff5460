#include "infera/nats/protocol.h"

#include <gtest/gtest.h>

#include "infera/nats/url.h"

namespace infera::nats {
namespace {

std::vector<Frame> all(Parser& p, Parser::Next* last = nullptr) {
  std::vector<Frame> out;
  Frame f;
  for (;;) {
    Parser::Next n = p.next(f);
    if (last) *last = n;
    if (n != Parser::Next::kFrame) return out;
    out.push_back(f);
  }
}

TEST(NatsParser, ReadsEachServerOperationIncludingLowerCase) {
  Parser p;
  p.feed("INFO {\"max_payload\":1024}\r\nPING\r\npong\r\n+OK\r\n-ERR 'Authorization Violation'\r\n");
  Parser::Next last;
  auto frames = all(p, &last);
  EXPECT_EQ(last, Parser::Next::kNeedMore);
  ASSERT_EQ(frames.size(), 5u);
  EXPECT_EQ(frames[0].kind, FrameKind::kInfo);
  EXPECT_EQ(frames[0].payload, "{\"max_payload\":1024}");
  EXPECT_EQ(frames[1].kind, FrameKind::kPing);
  EXPECT_EQ(frames[2].kind, FrameKind::kPong);
  EXPECT_EQ(frames[3].kind, FrameKind::kOk);
  EXPECT_EQ(frames[4].kind, FrameKind::kErr);
  EXPECT_EQ(frames[4].payload, "Authorization Violation");
}

TEST(NatsParser, MessagesSplitAtEveryByteParseTheSame) {
  const std::string stream =
      "MSG a.b 7 5\r\nhello\r\nMSG a.c 8 _INBOX.x.1 0\r\n\r\n"
      "HMSG _INBOX.x.2 9 22 24\r\nNATS/1.0 503\r\nK: v\r\n\r\nhi\r\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    Parser p;
    p.feed(stream.substr(0, cut));
    auto frames = all(p);
    p.feed(stream.substr(cut));
    auto rest = all(p);
    frames.insert(frames.end(), rest.begin(), rest.end());
    ASSERT_EQ(frames.size(), 3u) << cut;
    // (views of earlier frames may be moved by the second feed: check only the last batch's)
  }
  Parser p;
  p.feed(stream);
  auto frames = all(p);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].subject, "a.b");
  EXPECT_EQ(frames[0].sid, 7u);
  EXPECT_EQ(frames[0].reply, "");
  EXPECT_EQ(frames[0].payload, "hello");
  EXPECT_EQ(frames[1].reply, "_INBOX.x.1");
  EXPECT_EQ(frames[1].payload, "");
  EXPECT_EQ(frames[2].headers, "NATS/1.0 503\r\nK: v\r\n\r\n");
  EXPECT_EQ(frames[2].payload, "hi");
  auto h = parse_headers(frames[2].headers);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(h->get("k"), "v");
}

TEST(NatsParser, PayloadMayHoldCrLfAndBinary) {
  Parser p;
  const std::string body("a\r\nb\0c", 6);
  p.feed("MSG s 1 6\r\n" + body + "\r\n");
  auto frames = all(p);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].payload, body);
}

TEST(NatsParser, MalformedFramesFailAndStayFailed) {
  const char* bad[] = {
      "MSG a 1\r\n",                  // no size
      "MSG a x 3\r\nabc\r\n",         // bad sid
      "MSG a 1 -3\r\nabc\r\n",        // negative size
      "MSG a 1 3\r\nabcXY",           // not ended by CRLF
      "HMSG a 1 9 3\r\nabc\r\n",      // header size above total
      "MSG a 1 b c d 3\r\n",          // too many arguments
      "BOGUS\r\n",                    // unknown operation
      "MSG a 1 99999999999999999999\r\n",  // size not a u64
  };
  for (const char* input : bad) {
    Parser p;
    p.feed(input);
    Parser::Next last;
    all(p, &last);
    EXPECT_EQ(last, Parser::Next::kError) << input;
    EXPECT_FALSE(p.error().empty());
    p.feed("PING\r\n");
    Frame f;
    EXPECT_EQ(p.next(f), Parser::Next::kError);
  }
}

TEST(NatsParser, LimitsAreCheckedBeforeBuffering) {
  Parser p(ParserLimits{.max_control_line = 32, .max_payload = 100});
  p.feed(std::string(40, 'x'));
  Frame f;
  EXPECT_EQ(p.next(f), Parser::Next::kError);
  Parser q(ParserLimits{.max_control_line = 32, .max_payload = 100});
  q.feed("MSG a 1 101\r\n");
  EXPECT_EQ(q.next(f), Parser::Next::kError);
  EXPECT_NE(q.error().find("payload limit"), std::string::npos);
}

TEST(NatsWriters, FramesAreWhatTheProtocolSays) {
  std::string out;
  append_pub(out, "a.b", "", "hi");
  append_pub(out, "a.b", "_INBOX.1", "");
  append_hpub(out, "a", "r", "NATS/1.0\r\n\r\n", "xy");
  append_sub(out, "a.*", "", 3);
  append_sub(out, "a.>", "workers", 4);
  append_unsub(out, 3);
  EXPECT_EQ(out,
            "PUB a.b 2\r\nhi\r\nPUB a.b _INBOX.1 0\r\n\r\n"
            "HPUB a r 12 14\r\nNATS/1.0\r\n\r\nxy\r\n"
            "SUB a.* 3\r\nSUB a.> workers 4\r\nUNSUB 3\r\n");
  const std::pair<std::string, std::string> fields[] = {{"Nats-Seq", "7"}};
  EXPECT_EQ(header_block(fields), "NATS/1.0\r\nNats-Seq: 7\r\n\r\n");
}

TEST(NatsWriters, ConnectEscapesCredentials) {
  ConnectOptions o;
  o.user = "u\"1";
  o.password = "p\\w";
  const std::string line = connect_line(o);
  EXPECT_NE(line.find("\"user\":\"u\\\"1\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"pass\":\"p\\\\w\""), std::string::npos) << line;
  EXPECT_TRUE(line.ends_with("}\r\n"));
}

TEST(NatsInfo, ReadsTheFieldsAClientActsOn) {
  auto info = parse_info(
      R"({"server_id":"S","version":"2.9.10","max_payload":2048,"headers":true,)"
      R"("tls_required":true,"connect_urls":["10.0.0.2:4222"],"extra":{"x":1}})");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->max_payload, 2048u);
  EXPECT_TRUE(info->headers);
  EXPECT_TRUE(info->tls_required);
  ASSERT_EQ(info->connect_urls.size(), 1u);
  EXPECT_FALSE(parse_info("not json").ok());
  EXPECT_FALSE(parse_info("[1]").ok());
}

TEST(NatsSubjects, ValidityAndWorkerTokens) {
  EXPECT_TRUE(valid_subject("infera.kv-events.10_0_0_7_8000"));
  EXPECT_FALSE(valid_subject("a..b"));
  EXPECT_FALSE(valid_subject("a b"));
  EXPECT_FALSE(valid_subject(""));
  EXPECT_FALSE(valid_subject("a.*"));
  EXPECT_TRUE(valid_subject("a.*", true));
  EXPECT_TRUE(valid_subject("a.>", true));
  EXPECT_FALSE(valid_subject("a.>.b", true));
  EXPECT_FALSE(valid_subject("a.b*", true));
  EXPECT_EQ(subject_token("10.0.0.7:8000"), "10_0_0_7_8000");
  EXPECT_EQ(subject_token("[::1]:80"), "[__1]_80");
  EXPECT_EQ(subject_token("a*b>c d\te"), "a_b_c_d_e");
  EXPECT_TRUE(valid_subject("infera.requests." + subject_token("a.b:1 *>")));
}

TEST(NatsUrls, ParsesTheFormsTheFlagTakes) {
  auto one = parse_server_urls("nats://localhost:4222");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)[0].host, "localhost");
  EXPECT_EQ((*one)[0].port, 4222);
  auto many = parse_server_urls("nats://u:p@10.0.0.1:4223, tls://tok@[::1]:4224,nats://h");
  ASSERT_TRUE(many.ok()) << many.status().to_string();
  ASSERT_EQ(many->size(), 3u);
  EXPECT_EQ((*many)[0].user, "u");
  EXPECT_EQ((*many)[0].password, "p");
  EXPECT_EQ((*many)[1].token, "tok");
  EXPECT_TRUE((*many)[1].tls);
  EXPECT_EQ((*many)[1].host, "::1");
  EXPECT_EQ((*many)[1].display(), "tls://[::1]:4224");
  EXPECT_EQ((*many)[2].port, 4222);
  for (const char* bad : {"localhost:4222", "http://h:1", "nats://h:0", "nats://h:99999",
                          "nats://:4222", "nats://h:1,", "nats://h:1/x", "nats://@h:1"}) {
    auto r = parse_server_urls(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("--nats-server"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace infera::nats
