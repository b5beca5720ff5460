#include "infera/http/request_parser.h"

#include <gtest/gtest.h>

namespace infera::http {
namespace {

TEST(RequestParserTest, ParsesAGet) {
  auto r = parse_request("GET /health?x=1 HTTP/1.1\r\nHost: a\r\nX-Id: 7\r\n\r\n", {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->method, Method::kGet);
  EXPECT_EQ(r->path(), "/health");
  EXPECT_EQ(r->query(), "x=1");
  EXPECT_EQ(r->header("x-id"), "7");
  EXPECT_EQ(r->body, "");
}

TEST(RequestParserTest, ParsesContentLengthAndChunkedBodies) {
  auto a = parse_request(
      "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", {});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->method, Method::kPost);
  EXPECT_EQ(a->body, "hello");
  auto b = parse_request(
      "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: "
      "chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n",
      {});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->body, "hello");
}

TEST(RequestParserTest, LimitsAreResourceExhausted) {
  const RequestLimits limits{.max_header_bytes = 64, .max_body_bytes = 4};
  auto big_header = parse_request(
      "GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(100, 'y') + "\r\n\r\n", limits);
  EXPECT_EQ(big_header.status().code(), StatusCode::kResourceExhausted);
  auto big_body =
      parse_request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", limits);
  EXPECT_EQ(big_body.status().code(), StatusCode::kResourceExhausted);
  auto big_chunks = parse_request(
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: "
      "chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n",
      limits);
  EXPECT_EQ(big_chunks.status().code(), StatusCode::kResourceExhausted);
}

TEST(RequestParserTest, HeaderLimitCountsTheWholeHeader) {
  // Request line + fields + blank line, exactly at the limit and one byte over.
  const std::string head = "GET / HTTP/1.1\r\nX: ";
  const RequestLimits limits{.max_header_bytes = 100, .max_body_bytes = 0};
  const std::string fits = head + std::string(100 - head.size() - 4, 'y') + "\r\n\r\n";
  ASSERT_EQ(fits.size(), 100u);
  EXPECT_TRUE(parse_request(fits, limits).ok());
  const std::string over = head + std::string(100 - head.size() - 3, 'y') + "\r\n\r\n";
  EXPECT_EQ(parse_request(over, limits).status().code(), StatusCode::kResourceExhausted);
}

TEST(RequestParserTest, MalformedRequestsAreInvalidArgument) {
  for (const char* bad : {
           "GARBAGE\r\n\r\n",
           "GET / HTTP/9.9\r\n\r\n",
           "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
           "POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
           "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
           "GET http://evil/ HTTP/1.1\r\nHost: a\r\n\r\n",
           "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
       }) {
    auto r = parse_request(bad, {});
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument)
        << bad << " -> " << r.status().to_string();
  }
}

TEST(RequestParserTest, IncompleteRequestsAreDataLoss) {
  for (const char* cut :
       {"", "GET / HTTP/1.1\r\nHost: a\r\n", "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"}) {
    EXPECT_EQ(parse_request(cut, {}).status().code(), StatusCode::kDataLoss) << cut;
  }
}

}  // namespace
}  // namespace infera::http
