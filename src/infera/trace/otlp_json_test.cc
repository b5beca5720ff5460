#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "infera/trace/span.h"

namespace infera::trace {
namespace {

namespace json = boost::json;

Span sample_span() {
  Span s;
  s.trace_id = {0x4bf92f3577b34da6ULL, 0xa3ce929d0e0e4736ULL};
  s.span_id = 0x1122334455667788ULL;
  s.parent_span_id = 0x00f067aa0ba902b7ULL;
  s.trace_state = "vendor=a";
  s.name = "POST /v1/chat/completions";
  s.start_unix_ns = 1'700'000'000'000'000'123;
  s.end_unix_ns = 1'700'000'000'500'000'000;
  s.attributes = {{"gen_ai.request.model", std::string("m\"1")},
                  {"infera.retries", int64_t{2}},
                  {"infera.score_s", 1.5e-5},
                  {"infera.nan", std::numeric_limits<double>::quiet_NaN()},
                  {"infera.ok", true}};
  s.events.push_back({"retry", s.start_unix_ns + 10, {{"worker", std::string("w1")}}});
  s.error = true;
  s.status_message = "upstream failed";
  return s;
}

// The attribute `key` of `attrs` (an OTLP KeyValue list).
json::object value_of(const json::array& attrs, std::string_view key) {
  for (const json::value& kv : attrs) {
    if (kv.at("key").as_string() == key) return kv.at("value").as_object();
  }
  ADD_FAILURE() << "no attribute " << key;
  return {};
}

TEST(OtlpJsonTest, EncodesTheProtobufJsonMapping) {
  const Span s = sample_span();
  const json::value doc = json::parse(otlp_json({&s, 1}, {.service_name = "infera", .service_version = "0.3.0"}));
  const json::object& rs = doc.at("resourceSpans").as_array().at(0).as_object();
  EXPECT_EQ(value_of(rs.at("resource").at("attributes").as_array(), "service.name").at("stringValue"), "infera");
  const json::object& scope = rs.at("scopeSpans").as_array().at(0).as_object();
  EXPECT_EQ(scope.at("scope").at("name"), "infera");
  const json::object& span = scope.at("spans").as_array().at(0).as_object();
  EXPECT_EQ(span.at("traceId"), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(span.at("spanId"), "1122334455667788");
  EXPECT_EQ(span.at("parentSpanId"), "00f067aa0ba902b7");
  EXPECT_EQ(span.at("traceState"), "vendor=a");
  EXPECT_EQ(span.at("kind"), 2);
  EXPECT_EQ(span.at("startTimeUnixNano"), "1700000000000000123");  // 64-bit ints as strings
  EXPECT_EQ(span.at("endTimeUnixNano"), "1700000000500000000");
  const json::array& attrs = span.at("attributes").as_array();
  EXPECT_EQ(value_of(attrs, "gen_ai.request.model").at("stringValue"), "m\"1");
  EXPECT_EQ(value_of(attrs, "infera.retries").at("intValue"), "2");
  EXPECT_DOUBLE_EQ(value_of(attrs, "infera.score_s").at("doubleValue").to_number<double>(), 1.5e-5);
  EXPECT_EQ(value_of(attrs, "infera.nan").at("doubleValue").to_number<double>(), 0.0);
  EXPECT_EQ(value_of(attrs, "infera.ok").at("boolValue"), true);
  EXPECT_EQ(span.at("events").as_array().at(0).at("name"), "retry");
  EXPECT_EQ(span.at("status").at("code"), 2);
  EXPECT_EQ(span.at("status").at("message"), "upstream failed");
}

TEST(OtlpJsonTest, ARootSpanHasNoParentAndAnUnsetStatus) {
  Span s = sample_span();
  s.parent_span_id = 0;
  s.trace_state.clear();
  s.error = false;
  const json::value doc = json::parse(otlp_json({&s, 1}, {}));
  const json::object& span =
      doc.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0).as_object();
  EXPECT_FALSE(span.contains("parentSpanId"));
  EXPECT_FALSE(span.contains("traceState"));
  EXPECT_TRUE(span.at("status").as_object().empty());
}

TEST(OtlpJsonTest, UntrustedBytesStayValidJson) {
  Span s = sample_span();
  s.name = std::string("bad \xff\xfe utf8 \x01 and \"quotes\"");
  s.attributes.push_back({"k", std::string("\xc3\n\x7f")});
  EXPECT_NO_THROW(json::parse(otlp_json({&s, 1}, {})));
}

}  // namespace
}  // namespace infera::trace
