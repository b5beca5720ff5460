#include "infera/proxy/bodies.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "infera/proxy/forward.h"

namespace infera::proxy {
namespace {

boost::json::object parsed(const std::string& body) {
  return boost::json::parse(body).as_object();
}

TEST(PrefillBodyTest, AsksForOneTokenNoStreamAndKvKeptForARemoteDecode) {
  const std::string body =
      prefill_body(R"({"model":"m","prompt":"hi","max_tokens":200,"stream":true,)"
                   R"("stream_options":{"include_usage":true},"min_tokens":5,"temperature":0.5})");
  const boost::json::object o = parsed(body);
  EXPECT_EQ(o.at("max_tokens").as_int64(), 1);
  EXPECT_FALSE(o.at("stream").as_bool());
  EXPECT_FALSE(o.contains("stream_options"));
  EXPECT_FALSE(o.contains("min_tokens"));
  EXPECT_FALSE(o.contains("max_completion_tokens"));  // not added when the client had none
  EXPECT_EQ(o.at("temperature").as_double(), 0.5);    // everything else kept
  EXPECT_EQ(o.at("prompt").as_string(), "hi");
  const boost::json::object& p = o.at("kv_transfer_params").as_object();
  EXPECT_TRUE(p.at("do_remote_decode").as_bool());
  EXPECT_FALSE(p.at("do_remote_prefill").as_bool());
  for (const char* k : {"remote_engine_id", "remote_block_ids", "remote_host", "remote_port"}) {
    EXPECT_TRUE(p.at(k).is_null()) << k;
  }
}

TEST(PrefillBodyTest, CapsMaxCompletionTokensWhenTheClientSetIt) {
  const boost::json::object o = parsed(
      prefill_body(R"({"messages":[],"max_completion_tokens":64,"min_completion_tokens":2})"));
  EXPECT_EQ(o.at("max_completion_tokens").as_int64(), 1);
  EXPECT_FALSE(o.contains("min_completion_tokens"));
}

TEST(PrefillBodyTest, ABodyThatIsNoObjectComesBackUnchanged) {
  EXPECT_EQ(prefill_body("[1,2]"), "[1,2]");
  EXPECT_EQ(prefill_body("{not json"), "{not json");
}

TEST(WithFieldsTest, AppendsBeforeTheClosingBraceKeepingTheClientsBytes) {
  // The client's spelling of numbers and its whitespace survive: the body is not re-serialized.
  const std::string client = R"({"prompt": "x", "temperature": 1.0e0 } )";
  EXPECT_EQ(with_fields(client, {{"a", "1"}, {"b", R"({"c":null})"}}),
            R"({"prompt": "x", "temperature": 1.0e0 ,"a":1,"b":{"c":null}} )");
}

TEST(WithFieldsTest, AnEmptyObjectGetsNoLeadingComma) {
  EXPECT_EQ(with_fields("{}", {{"a", "true"}}), R"({"a":true})");
}

TEST(WithFieldsTest, AFieldTheClientSetIsReplacedNotDuplicated) {
  const boost::json::object o =
      parsed(with_fields(R"({"bootstrap_room":7,"prompt":"x"})", {{"bootstrap_room", "9"}}));
  EXPECT_EQ(o.at("bootstrap_room").as_int64(), 9);
  EXPECT_EQ(o.at("prompt").as_string(), "x");
  EXPECT_EQ(o.size(), 2u);
}

TEST(DecodeBodyTest, CarriesThePrefillAnswersParams) {
  const boost::json::object o =
      parsed(decode_body(R"({"prompt":"x","stream":true})", R"({"remote_engine_id":"e1"})"));
  EXPECT_EQ(o.at("kv_transfer_params").at("remote_engine_id").as_string(), "e1");
  EXPECT_TRUE(o.at("stream").as_bool());
}

TEST(BootstrapBodyTest, NamesThePrefillWorkersBootstrapServerAndTheRoom) {
  const boost::json::object o =
      parsed(bootstrap_body(R"({"prompt":"x"})", "10.0.0.7", 8998, (uint64_t{1} << 62) + 3));
  EXPECT_EQ(o.at("bootstrap_host").as_string(), "10.0.0.7");
  EXPECT_EQ(o.at("bootstrap_port").as_int64(), 8998);
  EXPECT_EQ(o.at("bootstrap_room").as_int64(), (int64_t{1} << 62) + 3);
}

TEST(BootstrapBodyTest, AWorkerWithoutABootstrapPortSendsNull) {
  const boost::json::object o = parsed(bootstrap_body(R"({"prompt":"x"})", "h", 0, 1));
  EXPECT_TRUE(o.at("bootstrap_port").is_null());
}

TEST(BootstrapHostTest, IsTheWorkerIdsHostIpv6Bracketed) {
  EXPECT_EQ(bootstrap_host("10.0.0.1:30000"), "10.0.0.1");
  EXPECT_EQ(bootstrap_host("[::1]:30000"), "[::1]");
  EXPECT_EQ(bootstrap_host("prefill-0.svc:8000"), "prefill-0.svc");
}

TEST(TransferParamsTest, OnlyAnObjectCounts) {
  EXPECT_EQ(transfer_params(R"({"id":"x","kv_transfer_params":{"remote_block_ids":[1,2]}})"),
            R"({"remote_block_ids":[1,2]})");
  EXPECT_EQ(transfer_params(R"({"kv_transfer_params":null})"), std::nullopt);
  EXPECT_EQ(transfer_params(R"({"kv_transfer_params":"x"})"), std::nullopt);
  EXPECT_EQ(transfer_params(R"({"choices":[]})"), std::nullopt);
  EXPECT_EQ(transfer_params("data: {}\n\n"), std::nullopt);
  EXPECT_EQ(transfer_params(""), std::nullopt);
}

TEST(CheckPrefillAnswerTest, GoodIs2xxWithoutAnErrorEvent) {
  EXPECT_TRUE(check_prefill_answer(http::Response::json(200, "{}")).ok());
  EXPECT_EQ(check_prefill_answer(http::Response::json(503, "{}")).code(), StatusCode::kUnavailable);
  EXPECT_EQ(check_prefill_answer(http::Response::json(400, "{}")).code(), StatusCode::kUnavailable);

  http::Response sse;
  sse.headers.push_back({"Content-Type", "text/event-stream"});
  sse.body = "data: {\"choices\":[]}\n\ndata: [DONE]\n\n";
  EXPECT_TRUE(check_prefill_answer(sse).ok());
  sse.body = "data: {\"choices\":[]}\n\ndata: {\"error\":{\"message\":\"oom\"}}\n\n";
  const Status s = check_prefill_answer(sse);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("oom"), std::string::npos);
}

TEST(UpstreamRequestTest, ForwardsEndToEndHeadersOnlyWithTheGatewaysRequestId) {
  http::Request client;
  client.method = http::Method::kPost;
  client.target = "/v1/completions?x=1";
  client.body = "{}";
  client.headers = {{"Host", "gateway"},           {"Connection", "keep-alive"},
                    {"Content-Length", "2"},       {"Transfer-Encoding", "chunked"},
                    {"Authorization", "Bearer k"}, {"x-request-id", "client-given"},
                    {"Proxy-Authorization", "p"},  {"TE", "trailers"},
                    {"Traceparent", "00-abc-01"},  {"Content-Type", "application/json"}};
  const http::Request up = upstream_request(client, "infera-1", R"({"a":1})");
  EXPECT_EQ(up.method, http::Method::kPost);
  EXPECT_EQ(up.target, "/v1/completions?x=1");
  EXPECT_EQ(up.body, R"({"a":1})");
  std::vector<std::string> names;
  for (const http::Header& h : up.headers) names.push_back(h.name);
  EXPECT_EQ(names, (std::vector<std::string>{"Authorization", "Traceparent", "Content-Type",
                                             "X-Request-Id"}));
  EXPECT_EQ(up.header("X-Request-Id"), "infera-1");
  for (std::string_view h : {"connection", "Keep-Alive", "proxy-connection", "upgrade", "trailer",
                             "Proxy-Authenticate"}) {
    EXPECT_TRUE(hop_by_hop(h)) << h;
  }
  EXPECT_FALSE(hop_by_hop("authorization"));
  EXPECT_FALSE(hop_by_hop("x-request-id"));  // end to end; replaced by upstream_request
}

TEST(UpstreamRequestTest, ATracingGatewaySendsItsOwnTraceContext) {
  http::Request client;
  client.headers = {{"Traceparent", "00-client-01"}, {"tracestate", "vendor=x"}, {"Accept", "*/*"}};
  // Tracing: the router's context replaces the client's, tracestate as given.
  http::Request up = upstream_request(client, "id", "{}", {"00-router-01", "vendor=x"});
  std::vector<std::string> pairs;
  for (const http::Header& h : up.headers) pairs.push_back(h.name + "=" + h.value);
  EXPECT_EQ(pairs, (std::vector<std::string>{"Accept=*/*", "X-Request-Id=id",
                                             "traceparent=00-router-01", "tracestate=vendor=x"}));
  // A trace the router started: no tracestate.
  up = upstream_request(client, "id", "{}", {"00-router-01", ""});
  EXPECT_EQ(up.header("tracestate"), "");
  EXPECT_EQ(up.header("traceparent"), "00-router-01");
}

}  // namespace
}  // namespace infera::proxy
