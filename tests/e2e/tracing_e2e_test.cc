// Distributed tracing end to end (docs/metrics.md, "Traces"): the real `infera server` in
// front of a real `infera engine mock`, exporting to an OTLP/HTTP collector run by the test.
//   - The OpenTelemetry SDK for Node (npm @opentelemetry/sdk-trace-node) as the client: its span
//     is the router span's parent, and the router span is the parent the worker's call carries.
//   - A malformed traceparent starts a new trace; a caller's unsampled trace records nothing.
//   - A collector that is down costs no request: the spans are dropped and counted.
//   - What the worker generated, counted off the relayed bytes (tokens, inter-token gaps).
#include "tests/e2e/e2e_support.h"

#include "infera/trace/test_collector.h"

namespace infera::e2e {
namespace {

using trace::testing::attribute;
using trace::testing::Collector;

const json::object* span_with(const std::vector<json::object>& spans, std::string_view key,
                              std::string_view value) {
  for (const json::object& s : spans) {
    if (attribute(s, key) == value) return &s;
  }
  return nullptr;
}

// The traceparent the engine logged for the request `request_id` (its debug line), or "".
std::string engine_traceparent(const InferaProcess& engine, const std::string& request_id) {
  std::istringstream lines(engine.log());
  for (std::string line; std::getline(lines, line);) {
    if (line.find("request_id=" + request_id) == std::string::npos) continue;
    const size_t at = line.find("traceparent=");
    if (at != std::string::npos) return line.substr(at + 12, 55);
  }
  return "";
}

http::testing::RawResponse completion(uint16_t server, const std::string& request_id, const std::string& trace_headers) {
  const std::string body = completion_body(token_ids(request_id.size(), 48), 2);
  http::testing::RawConn c(server);
  EXPECT_TRUE(c.send_all("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                         "X-Request-Id: " + request_id + "\r\n" + trace_headers +
                         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
  return c.read_response(Ms(20'000));
}

TEST(TracingE2eTest, TheRouterSpanSitsBetweenTheClientsSpanAndTheWorkersCall) {
  Collector collector;
  auto e0 = start_engine("trace_e0", {"--speedup-ratio", "100", "--log-level", "debug"});
  ASSERT_TRUE(e0->ready());
  auto server = start_server("trace_server", {"--worker", e0->worker_flag(), "--otlp-traces-endpoint",
                                              collector.url()});
  ASSERT_TRUE(server->ready()) << server->log();
  const uint16_t s = server->port();
  ASSERT_TRUE(eventually([&] { return fleet_is(s, {e0->id()}); })) << server->log();

  // 1. The Node SDK's span is the router span's parent.
  const fs::path log = server->dir() / "node.log";
  auto rc = run_process({INFERA_NODE, std::string(INFERA_SOURCE_DIR) + "/tests/tools/gateway/otel_client.mjs",
                         server->url(), std::string(kModel)},
                        Ms(120'000), log.string());
  ASSERT_TRUE(rc.ok()) << rc.status().to_string();
  const std::string out = read_text(log);
  ASSERT_EQ(*rc, 0) << out << "\nserver log:\n" << server->log();
  const json::value client = parse_json(out.substr(out.find('{')));
  const std::string trace_id = string_at(client, "trace_id");
  const std::string client_span = string_at(client, "span_id");
  ASSERT_EQ(trace_id.size(), 32u) << out;
  ASSERT_TRUE(collector.wait_for([&](const auto& spans) {
    for (const auto& sp : spans) {
      if (sp.at("traceId").as_string() == trace_id) return true;
    }
    return false;
  })) << server->log();
  json::object router;
  for (const json::object& sp : collector.spans()) {
    if (sp.at("traceId").as_string() == trace_id) router = sp;
  }
  EXPECT_EQ(router.at("parentSpanId").as_string(), client_span);
  EXPECT_EQ(router.at("name").as_string(), "POST /v1/chat/completions");
  EXPECT_EQ(router.at("kind").as_int64(), 2);  // SERVER
  EXPECT_EQ(attribute(router, "gen_ai.request.model"), std::string(kModel));
  EXPECT_EQ(attribute(router, "infera.worker"), e0->id());
  EXPECT_EQ(attribute(router, "http.response.status_code"), "200");
  EXPECT_EQ(attribute(router, "infera.retries"), "0");
  EXPECT_FALSE(attribute(router, "infera.ttft_s").empty());
  // ... and the worker's call carries the router span as its parent.
  const std::string request_id = attribute(router, "infera.request_id");
  EXPECT_EQ(engine_traceparent(*e0, request_id),
            "00-" + trace_id + "-" + std::string(router.at("spanId").as_string()) + "-01")
      << e0->log();

  // 2. A malformed traceparent: a new trace, started (and recorded) by the router.
  ASSERT_EQ(completion(s, "trace-bad", "traceparent: 00-XYZ-nonsense-01\r\ntracestate: a=b\r\n").status, 200);
  ASSERT_TRUE(collector.wait_for([](const auto& spans) { return span_with(spans, "infera.request_id", "trace-bad"); }));
  const json::object bad = *span_with(collector.spans(), "infera.request_id", "trace-bad");
  EXPECT_FALSE(bad.contains("parentSpanId"));
  EXPECT_EQ(bad.at("traceId").as_string().size(), 32u);
  EXPECT_EQ(engine_traceparent(*e0, "trace-bad"),
            "00-" + std::string(bad.at("traceId").as_string()) + "-" +
                std::string(bad.at("spanId").as_string()) + "-01");
  EXPECT_EQ(e0->log().find("tracestate=a=b"), std::string::npos) << "a new trace carries no tracestate";

  // 3. A caller's unsampled trace: the worker hears of it (flag 00), nothing is recorded. The
  // next request's span arriving shows the exporter is past it (spans go in order).
  const std::string unsampled = "4bf92f3577b34da6a3ce929d0e0e4736";
  ASSERT_EQ(completion(s, "trace-off", "traceparent: 00-" + unsampled + "-00f067aa0ba902b7-00\r\n").status, 200);
  ASSERT_EQ(completion(s, "trace-after", "").status, 200);
  ASSERT_TRUE(collector.wait_for([](const auto& spans) { return span_with(spans, "infera.request_id", "trace-after"); }));
  EXPECT_EQ(span_with(collector.spans(), "infera.request_id", "trace-off"), nullptr);
  const std::string off = engine_traceparent(*e0, "trace-off");
  EXPECT_EQ(off.substr(0, 36), "00-" + unsampled + "-");
  EXPECT_EQ(off.substr(53), "00");
  EXPECT_NE(off.substr(36, 16), "00f067aa0ba902b7");  // the router's span id, not the caller's

  // 4. What the workers generated: the stream's 3 output events (no usage chunk asked for),
  // then 2 tokens by usage for each of the 3 whole completions; 2 gaps in the one stream.
  const std::string metrics = get(s, "/metrics").body;
  EXPECT_EQ(metric_sum(metrics, "infera_generation_tokens_total"), 3 + 3 * 2) << metrics;
  EXPECT_EQ(metric_sum(metrics, "infera_inter_token_latency_seconds_count"), 2) << metrics;
  EXPECT_EQ(attribute(router, "gen_ai.usage.output_tokens"), "3");
}

TEST(TracingE2eTest, ACollectorThatIsDownCostsNoRequest) {
  std::string dead;
  {
    Collector gone;
    dead = gone.url();
  }
  auto e0 = start_engine("trace_down_e0", {"--speedup-ratio", "100"});
  ASSERT_TRUE(e0->ready());
  auto server = start_server("trace_down_server", {"--worker", e0->worker_flag(), "--otlp-traces-endpoint",
                                                   dead, "--otlp-sample-ratio", "1"});
  ASSERT_TRUE(server->ready()) << server->log();
  const uint16_t s = server->port();
  ASSERT_TRUE(eventually([&] { return fleet_is(s, {e0->id()}); })) << server->log();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(completion(s, "down-" + std::to_string(i), "").status, 200);
  EXPECT_TRUE(eventually([&] {
    return metric_sum(get(s, "/metrics").body, "infera_otlp_spans_dropped_total") >= 5;
  })) << get(s, "/metrics").body;
}

TEST(TracingE2eTest, ABadEndpointOrRatioIsOneStartupLine) {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--otlp-traces-endpoint", "grpc://collector:4317"},
        std::vector<std::string>{"--otlp-traces-endpoint", "http://127.0.0.1:4318", "--otlp-sample-ratio", "2"},
        std::vector<std::string>{"--otlp-sample-ratio", "0.5"}}) {
    std::vector<std::string> argv = {kBinary, "server", "--port", "0", "--worker", "http://127.0.0.1:9"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv = infera::testing::with_dev_transports(std::move(argv));
    const fs::path log = fs::temp_directory_path() / ("infera_trace_e2e_" + std::to_string(::getpid()) + "_bad");
    auto rc = run_process(argv, Ms(30'000), log.string());
    ASSERT_TRUE(rc.ok());
    const std::string text = read_text(log);
    fs::remove(log);
    EXPECT_NE(*rc, 0) << text;
    EXPECT_NE(text.find("--otlp-"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace infera::e2e
