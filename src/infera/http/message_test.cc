#include "infera/http/message.h"

#include <gtest/gtest.h>

#include "infera/http/client.h"

namespace infera::http {
namespace {

TEST(MessageTest, HeaderLookupIgnoresCase) {
  Request r;
  r.headers = {{"Content-Type", "application/json"}, {"X-Request-Id", "abc"}};
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_EQ(r.header("X-REQUEST-ID"), "abc");
  EXPECT_EQ(r.header("missing"), "");
}

TEST(MessageTest, PathAndQuerySplitAtQuestionMark) {
  Request r;
  r.target = "/v1/admin/cache-view/w1?verbose=1&x=2";
  EXPECT_EQ(r.path(), "/v1/admin/cache-view/w1");
  EXPECT_EQ(r.query(), "verbose=1&x=2");
  r.target = "/health";
  EXPECT_EQ(r.path(), "/health");
  EXPECT_EQ(r.query(), "");
}

TEST(MessageTest, ResponseHelpersSetContentType) {
  EXPECT_EQ(Response::json(201, "{}").header("Content-Type"), "application/json");
  EXPECT_EQ(Response::text(200, "ok").header("content-type"), "text/plain; charset=utf-8");
  EXPECT_EQ(Response::json(201, "{}").status, 201);
}

TEST(EndpointTest, ParsesUrlsAndHostPorts) {
  auto a = parse_endpoint("http://127.0.0.1:30000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 30000);
  EXPECT_EQ(a->key(), "127.0.0.1:30000");
  auto b = parse_endpoint("worker-3:8000/v1/ignored");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "worker-3");
  auto c = parse_endpoint("http://[::1]:9000");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->key(), "[::1]:9000");
  EXPECT_FALSE(c->tls);
  auto d = parse_endpoint("https://gpu-7.example:8443/");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->host, "gpu-7.example");
  EXPECT_EQ(d->port, 8443);
  EXPECT_TRUE(d->tls);
}

TEST(EndpointTest, RejectsMalformedInput) {
  for (const char* bad : {"", "host", "host:", ":80", "host:0", "host:65536", "host:8x",
                          "ftp://host:21", "https://host", "[::1]9000", "host:123456"}) {
    EXPECT_FALSE(parse_endpoint(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace infera::http
