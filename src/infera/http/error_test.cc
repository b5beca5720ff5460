#include "infera/http/error.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "infera/http/sse.h"

namespace infera::http {
namespace {

namespace json = boost::json;

json::object parse_error_body(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  EXPECT_FALSE(ec) << body;
  EXPECT_TRUE(v.is_object()) << body;
  const json::value* err = v.as_object().if_contains("error");
  EXPECT_NE(err, nullptr) << body;
  return err->as_object();
}

struct Case {
  Status status;
  ErrorOrigin origin;
  int http;
  std::string_view type;
  bool retry_after;
};

TEST(ErrorMappingTest, MapsEveryCodeAndOrigin) {
  const Case cases[] = {
      {invalid_argument("x"), ErrorOrigin::kServer, 400, "invalid_request_error", false},
      {out_of_range("x"), ErrorOrigin::kServer, 400, "invalid_request_error", false},
      {failed_precondition("x"), ErrorOrigin::kServer, 400, "invalid_request_error", false},
      {not_found("x"), ErrorOrigin::kServer, 404, "invalid_request_error", false},
      {resource_exhausted("x"), ErrorOrigin::kRequestBody, 413, "invalid_request_error", false},
      {resource_exhausted("x"), ErrorOrigin::kRequestHeader, 431, "invalid_request_error", false},
      {resource_exhausted("x"), ErrorOrigin::kServer, 429, "rate_limit_error", true},
      {unavailable("x"), ErrorOrigin::kServer, 503, "server_error", true},
      {deadline_exceeded("x"), ErrorOrigin::kServer, 504, "timeout_error", false},
      {deadline_exceeded("x"), ErrorOrigin::kRequestBody, 408, "invalid_request_error", false},
      {cancelled("x"), ErrorOrigin::kServer, 499, "cancelled", false},
      {unimplemented("x"), ErrorOrigin::kServer, 501, "invalid_request_error", false},
      {unimplemented("x"), ErrorOrigin::kRequestHeader, 405, "invalid_request_error", false},
      {unauthenticated("x"), ErrorOrigin::kServer, 401, "authentication_error", false},
      {permission_denied("x"), ErrorOrigin::kServer, 403, "permission_error", false},
      {data_loss("x"), ErrorOrigin::kRequestBody, 400, "invalid_request_error", false},
      {data_loss("x"), ErrorOrigin::kServer, 500, "server_error", false},
      {internal_error("x"), ErrorOrigin::kServer, 500, "server_error", false},
      {unavailable("x"), ErrorOrigin::kUpstream, 502, "upstream_error", false},
      {data_loss("x"), ErrorOrigin::kUpstream, 502, "upstream_error", false},
      {internal_error("x"), ErrorOrigin::kUpstream, 502, "upstream_error", false},
      {resource_exhausted("x"), ErrorOrigin::kUpstream, 502, "upstream_error", false},
      {deadline_exceeded("x"), ErrorOrigin::kUpstream, 504, "timeout_error", false},
      {cancelled("x"), ErrorOrigin::kUpstream, 499, "cancelled", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.status.to_string() + " origin " + std::to_string(static_cast<int>(c.origin)));
    const Response r = error_response(c.status, {.origin = c.origin});
    EXPECT_EQ(r.status, c.http);
    EXPECT_EQ(r.header("Content-Type"), "application/json");
    EXPECT_EQ(!r.header("Retry-After").empty(), c.retry_after);
    // RFC 9110: a 401 names the scheme the client should use; nothing else does.
    EXPECT_EQ(r.header("WWW-Authenticate"), c.http == 401 ? "Bearer" : "");
    const json::object err = parse_error_body(r.body);
    EXPECT_EQ(err.at("type").as_string(), c.type);
    EXPECT_EQ(err.at("message").as_string(), "x");
  }
}

TEST(ErrorMappingTest, BodyHasOpenAiShape) {
  const Response r = error_response(not_found("The model 'gpt-x' does not exist"),
                                    {.param = "model", .code = "model_not_found"});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(
      r.body,
      R"({"error":{"message":"The model 'gpt-x' does not exist","type":"invalid_request_error",)"
      R"("param":"model","code":"model_not_found"}})");
}

TEST(ErrorMappingTest, AbsentParamAndCodeAreNull) {
  const json::object err = parse_error_body(error_body(invalid_argument("bad")));
  EXPECT_TRUE(err.at("param").is_null());
  EXPECT_TRUE(err.at("code").is_null());
}

TEST(ErrorMappingTest, EmptyMessageGetsADefault) {
  const json::object err = parse_error_body(error_body(Status(StatusCode::kUnavailable, "")));
  EXPECT_EQ(err.at("message").as_string(), "service unavailable");
}

TEST(ErrorMappingTest, RetryAfterIsConfigurable) {
  const Response r =
      error_response(resource_exhausted("queue full"), {.retry_after = std::chrono::seconds(7)});
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.header("Retry-After"), "7");
}

TEST(ErrorMappingTest, SseErrorEventCarriesTheSameBody) {
  const Status s = unavailable("worker 10.0.0.1:8000 closed the stream");
  const std::string event = sse_error_event(s, {.origin = ErrorOrigin::kUpstream});
  SseParser p;
  p.feed(event);
  SseEvent ev;
  ASSERT_TRUE(p.next(ev));
  EXPECT_EQ(ev.data, error_body(s, {.origin = ErrorOrigin::kUpstream}));
  const json::object err = parse_error_body(ev.data);
  EXPECT_EQ(err.at("type").as_string(), "upstream_error");
}

TEST(JsonStringTest, EscapesControlAndQuoteCharacters) {
  std::string out;
  append_json_string(out, std::string("a\"b\\c\n\t\x01\x7f\0", 10));
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\n\\t\\u0001\\u007f\\u0000\"");
}

TEST(JsonStringTest, ReplacesInvalidUtf8AndKeepsValidUtf8) {
  const std::string valid = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";
  const std::string invalid[] = {
      "\xC3",              // truncated
      "\xC0\xAF",          // overlong
      "\xED\xA0\x80",      // surrogate
      "\xF4\x90\x80\x80",  // above U+10FFFF
      "\xFF",
  };
  std::string out;
  append_json_string(out, valid);
  EXPECT_EQ(out, "\"" + valid + "\"");
  for (const std::string& bad : invalid) {
    std::string s;
    append_json_string(s, "x" + bad + "y");
    boost::system::error_code ec;
    json::value v = json::parse(s, ec);  // Boost.JSON rejects invalid UTF-8
    ASSERT_FALSE(ec) << s;
    EXPECT_NE(v.as_string().find("\xEF\xBF\xBD"), json::string::npos);
  }
}

}  // namespace
}  // namespace infera::http
