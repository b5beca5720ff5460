// The mock engine's /v1/responses and /v1/embeddings in-process on real loopback sockets: the
// Responses API's whole answer, previous_response_id turns through the engine's own store (and
// the prefix cache they hit), store=false, the errors vLLM answers; embeddings as floats and
// base64, dimensions, token-id inputs, bad input.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "infera/common/base64.h"
#include "infera/http/test_support.h"
#include "infera/mock/mock_server.h"
#include "infera/mock/mock_test_support.h"

namespace infera::mock {
namespace {

namespace json = boost::json;
using http::testing::RawResponse;

using testing::object_of;
using testing::start_engine;
using testing::usage_of;

RawResponse post(uint16_t port, std::string_view target, std::string_view body) {
  return testing::call(port, "POST", target, body);
}

std::string output_text(const json::object& o) {
  return std::string(o.at("output").at(0).at("content").at(0).at("text").as_string());
}

// The error object of a 4xx answer, checked for OpenAI's shape.
json::object error_of(const RawResponse& r, int status) {
  EXPECT_EQ(r.status, status) << r.body;
  json::object e = object_of(r.body);
  if (!e.contains("error")) {
    ADD_FAILURE() << r.body;
    return {};
  }
  return e.at("error").as_object();
}

// A user message of `words` synthetic words (one token each).
std::string long_text(int words) {
  std::string s;
  for (int i = 0; i < words; ++i) s += "word" + std::to_string(i) + " ";
  return s;
}

TEST(MockResponsesTest, WholeAnswerShapeAndTheChatPathsText) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  RawResponse r = post(engine->port(), "/v1/responses",
                       R"({"model":"mock","input":"hello there","instructions":"be brief",)"
                       R"("max_output_tokens":5,"ignore_eos":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  json::object o = object_of(r.body);
  EXPECT_TRUE(o.at("id").as_string().starts_with("resp_"));
  EXPECT_EQ(o.at("object").as_string(), "response");
  EXPECT_GT(o.at("created_at").as_int64(), 1600000000);
  EXPECT_EQ(o.at("model").as_string(), "mock");
  EXPECT_EQ(o.at("status").as_string(), "completed");
  EXPECT_TRUE(o.at("previous_response_id").is_null());
  EXPECT_TRUE(o.at("store").as_bool());
  EXPECT_EQ(o.at("instructions").as_string(), "be brief");
  const json::array& output = o.at("output").as_array();
  ASSERT_EQ(output.size(), 1u);
  const json::object& msg = output[0].as_object();
  EXPECT_EQ(msg.at("type").as_string(), "message");
  EXPECT_TRUE(msg.at("id").as_string().starts_with("msg_"));
  EXPECT_EQ(msg.at("status").as_string(), "completed");
  EXPECT_EQ(msg.at("role").as_string(), "assistant");
  const json::object& part = msg.at("content").at(0).as_object();
  EXPECT_EQ(part.at("type").as_string(), "output_text");
  EXPECT_TRUE(part.at("annotations").as_array().empty());
  const json::object& usage = o.at("usage").as_object();
  EXPECT_EQ(usage.at("output_tokens").as_int64(), 5);
  EXPECT_EQ(usage.at("total_tokens").as_int64(),
            usage.at("input_tokens").as_int64() + usage.at("output_tokens").as_int64());
  EXPECT_EQ(usage.at("input_tokens_details").at("cached_tokens").as_int64(), 0);
  EXPECT_EQ(usage.at("output_tokens_details").at("reasoning_tokens").as_int64(), 0);

  // The chat path with the same messages: the same prompt, the same text.
  RawResponse chat =
      post(engine->port(), "/v1/chat/completions",
           R"({"model":"mock","messages":[{"role":"system","content":"be brief"},)"
           R"({"role":"user","content":"hello there"}],"max_tokens":5,"ignore_eos":true})");
  ASSERT_EQ(chat.status, 200) << chat.body;
  json::object c = object_of(chat.body);
  EXPECT_EQ(output_text(o), c.at("choices").at(0).at("message").at("content").as_string());
  EXPECT_EQ(usage.at("input_tokens").as_int64(), usage_of(c, "prompt_tokens"));
}

TEST(MockResponsesTest, MessageItemsAndUnknownFieldsAreRead) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  RawResponse r = post(engine->port(), "/v1/responses",
                       R"({"model":"mock","input":[{"type":"message","role":"user","content":)"
                       R"([{"type":"input_text","text":"hi"}]}],"max_output_tokens":3,)"
                       R"("reasoning":{"effort":"low"},"temperature":0.2,"truncation":"auto",)"
                       R"("metadata":{"k":"v"},"text":{"format":{"type":"text"}}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(object_of(r.body).at("usage").at("output_tokens").as_int64(), 3);
}

TEST(MockResponsesTest, SecondTurnHasTheFirstAsItsPrefix) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  const std::string first_input = long_text(80);
  json::object first = object_of(post(engine->port(), "/v1/responses",
                                      R"({"model":"mock","input":")" + first_input +
                                          R"(","max_output_tokens":4,"ignore_eos":true})")
                                     .body);
  ASSERT_TRUE(first.contains("id"));
  const std::string first_id(first.at("id").as_string());
  RawResponse r = post(engine->port(), "/v1/responses",
                       R"({"model":"mock","input":"and then?","previous_response_id":")" +
                           first_id + R"(","max_output_tokens":4,"ignore_eos":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  json::object second = object_of(r.body);
  EXPECT_EQ(second.at("previous_response_id").as_string(), first_id);
  const json::object& u1 = first.at("usage").as_object();
  const json::object& u2 = second.at("usage").as_object();
  EXPECT_GT(u2.at("input_tokens").as_int64(), u1.at("input_tokens").as_int64() + 4);
  // The first turn's prompt (80 words and the template: 5 full blocks of 16) is cached.
  EXPECT_GE(u2.at("input_tokens_details").at("cached_tokens").as_int64(), 80);

  // Its prompt is the whole conversation, as the chat path renders it.
  json::array messages{json::object{{"role", "user"}, {"content", first_input}},
                       json::object{{"role", "assistant"}, {"content", output_text(first)}},
                       json::object{{"role", "user"}, {"content", "and then?"}}};
  json::object chat_body{
      {"model", "mock"}, {"messages", messages}, {"max_tokens", 4}, {"ignore_eos", true}};
  json::object chat =
      object_of(post(engine->port(), "/v1/chat/completions", json::serialize(chat_body)).body);
  EXPECT_EQ(u2.at("input_tokens").as_int64(), usage_of(chat, "prompt_tokens"));
  EXPECT_EQ(output_text(second), chat.at("choices").at(0).at("message").at("content").as_string());

  // A third turn chains through the second.
  RawResponse third = post(engine->port(), "/v1/responses",
                           R"({"input":"more","max_output_tokens":2,"previous_response_id":)" +
                               json::serialize(second.at("id")) + "}");
  ASSERT_EQ(third.status, 200) << third.body;
  EXPECT_GT(object_of(third.body).at("usage").at("input_tokens").as_int64(),
            u2.at("input_tokens").as_int64());
}

TEST(MockResponsesTest, UnknownPreviousResponseIsA404) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  RawResponse r = post(engine->port(), "/v1/responses",
                       R"({"model":"mock","input":"x","previous_response_id":"resp_nope"})");
  json::object err = error_of(r, 404);
  EXPECT_EQ(err.at("message").as_string(), "Response with id 'resp_nope' not found.");
  EXPECT_EQ(err.at("type").as_string(), "invalid_request_error");
  EXPECT_EQ(err.at("param").as_string(), "previous_response_id");
}

TEST(MockResponsesTest, StoreFalseIsNotFoundLater) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  RawResponse r = post(engine->port(), "/v1/responses",
                       R"({"model":"mock","input":"x","store":false,"max_output_tokens":2})");
  ASSERT_EQ(r.status, 200) << r.body;
  json::object o = object_of(r.body);
  EXPECT_FALSE(o.at("store").as_bool());
  RawResponse later = post(
      engine->port(), "/v1/responses",
      R"({"model":"mock","input":"y","previous_response_id":)" + json::serialize(o.at("id")) + "}");
  EXPECT_EQ(error_of(later, 404).at("param").as_string(), "previous_response_id");
}

TEST(MockResponsesTest, BadRequestsAre400sAndUnknownModels404) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  struct Case {
    std::string body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"model":"mock","input":"x","stream":true})", "stream"},
      {R"({"model":"mock"})", "input"},
      {R"({"model":"mock","input":5})", "input"},
      {R"({"model":"mock","input":"x","max_output_tokens":0})", "max_output_tokens"},
      {R"({"model":"mock","input":"x","store":"yes"})", "store"},
      {R"({"model":"mock","input":"x","tools":[{"type":"function","name":"f"}]})", "input"},
      {R"({"model":"mock","input":[{"type":"function_call_output","call_id":"c","output":"1"}]})",
       "input"},
      {R"({"model":"mock","input":"x","max_output_tokens":100000000})", "max_output_tokens"},
  };
  for (const Case& c : cases) {
    RawResponse r = post(engine->port(), "/v1/responses", c.body);
    json::object err = error_of(r, 400);
    EXPECT_EQ(err.at("type").as_string(), "invalid_request_error") << c.body;
    EXPECT_EQ(err.at("param").as_string(), c.param) << c.body << " -> " << r.body;
  }
  RawResponse stream =
      post(engine->port(), "/v1/responses", R"({"model":"mock","input":"x","stream":true})");
  EXPECT_EQ(error_of(stream, 400).at("message").as_string(),
            "streaming responses are not supported by the mock engine");
  RawResponse model = post(engine->port(), "/v1/responses", R"({"model":"other","input":"x"})");
  EXPECT_EQ(error_of(model, 404).at("code").as_string(), "model_not_found");
}

// ---------------------------------------------------------------------------------------------
// /v1/embeddings

std::vector<float> floats_of(const json::value& v) {
  std::vector<float> out;
  for (const json::value& x : v.as_array())
    out.push_back(static_cast<float>(x.to_number<double>()));
  return out;
}

std::vector<float> floats_of_base64(const json::value& v) {
  auto bytes = base64_decode(v.as_string());
  EXPECT_TRUE(bytes.ok());
  if (!bytes.ok()) return {};
  EXPECT_EQ(bytes->size() % 4, 0u);
  std::vector<float> out(bytes->size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t u = 0;
    for (size_t b = 0; b < 4; ++b) {
      u |= uint32_t{static_cast<unsigned char>((*bytes)[i * 4 + b])} << (8 * b);  // little-endian
    }
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

double norm_of(const std::vector<float>& v) {
  double n = 0;
  for (const float x : v) n += static_cast<double>(x) * static_cast<double>(x);
  return std::sqrt(n);
}

TEST(MockEmbeddingsTest, FloatAnswerShapeUnitLengthAndDeterminism) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  RawResponse r = post(engine->port(), "/v1/embeddings",
                       R"({"model":"mock","input":["the quick fox","jumps","the quick fox"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  json::object o = object_of(r.body);
  EXPECT_EQ(o.at("object").as_string(), "list");
  EXPECT_EQ(o.at("model").as_string(), "mock");
  const json::array& data = o.at("data").as_array();
  ASSERT_EQ(data.size(), 3u);
  std::vector<std::vector<float>> v;
  for (size_t i = 0; i < data.size(); ++i) {
    EXPECT_EQ(data[i].at("object").as_string(), "embedding");
    EXPECT_EQ(data[i].at("index").as_int64(), static_cast<int64_t>(i));
    v.push_back(floats_of(data[i].at("embedding")));
    EXPECT_EQ(v.back().size(), 16u);
    EXPECT_NEAR(norm_of(v.back()), 1.0, 1e-5);
  }
  EXPECT_EQ(v[0], v[2]);
  EXPECT_NE(v[0], v[1]);
  EXPECT_EQ(usage_of(o, "prompt_tokens"), 7);  // synthetic codec: one token per word
  EXPECT_EQ(usage_of(o, "total_tokens"), 7);
}

TEST(MockEmbeddingsTest, Base64CarriesTheSameFloats) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  json::object f = object_of(
      post(engine->port(), "/v1/embeddings", R"({"model":"mock","input":"a b c","dimensions":64})")
          .body);
  json::object b = object_of(post(engine->port(), "/v1/embeddings",
                                  R"({"model":"mock","input":"a b c","dimensions":64,)"
                                  R"("encoding_format":"base64"})")
                                 .body);
  ASSERT_TRUE(f.contains("data") && b.contains("data"));
  const std::vector<float> floats = floats_of(f.at("data").at(0).at("embedding"));
  const std::vector<float> decoded = floats_of_base64(b.at("data").at(0).at("embedding"));
  EXPECT_EQ(floats.size(), 64u);
  EXPECT_EQ(floats, decoded);
}

TEST(MockEmbeddingsTest, TokenIdInputsEmbedLikeTheirText) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  json::object tok =
      object_of(post(engine->port(), "/tokenize", R"({"model":"mock","prompt":"a b c"})").body);
  const std::string ids = json::serialize(tok.at("tokens"));
  json::object by_text =
      object_of(post(engine->port(), "/v1/embeddings", R"({"input":"a b c"})").body);
  json::object by_ids =
      object_of(post(engine->port(), "/v1/embeddings", R"({"input":[)" + ids + R"(,[1,2]]})").body);
  ASSERT_TRUE(by_ids.contains("data")) << json::serialize(by_ids);
  ASSERT_EQ(by_ids.at("data").as_array().size(), 2u);
  EXPECT_EQ(floats_of(by_ids.at("data").at(0).at("embedding")),
            floats_of(by_text.at("data").at(0).at("embedding")));
  EXPECT_EQ(usage_of(by_ids, "prompt_tokens"), 5);
  json::object one = object_of(post(engine->port(), "/v1/embeddings", R"({"input":[7,8,9]})").body);
  ASSERT_TRUE(one.contains("data"));
  EXPECT_EQ(one.at("data").as_array().size(), 1u);
  EXPECT_EQ(usage_of(one, "prompt_tokens"), 3);
}

TEST(MockEmbeddingsTest, BadInputIsA400) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  std::string many = "[";
  for (int i = 0; i < 2049; ++i) many += i == 0 ? "\"x\"" : ",\"x\"";
  many += "]";
  struct Case {
    std::string body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"model":"mock"})", "input"},
      {R"({"input":5})", "input"},
      {R"({"input":[]})", "input"},
      {R"({"input":[""]})", "input"},
      {R"({"input":[[1,2],[]]})", "input"},
      {R"({"input":[99999999]})", "input"},
      {R"({"input":[-1]})", "input"},
      {R"({"input":)" + many + "}", "input"},
      {R"({"input":"x","dimensions":0})", "dimensions"},
      {R"({"input":"x","dimensions":5000})", "dimensions"},
      {R"({"input":"x","encoding_format":"hex"})", "encoding_format"},
  };
  for (const Case& c : cases) {
    RawResponse r = post(engine->port(), "/v1/embeddings", c.body);
    json::object err = error_of(r, 400);
    EXPECT_EQ(err.at("type").as_string(), "invalid_request_error") << c.body;
    EXPECT_EQ(err.at("param").as_string(), c.param) << c.body << " -> " << r.body;
  }
  RawResponse model = post(engine->port(), "/v1/embeddings", R"({"model":"other","input":"x"})");
  EXPECT_EQ(error_of(model, 404).at("code").as_string(), "model_not_found");
}

}  // namespace
}  // namespace infera::mock
