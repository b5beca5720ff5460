// The mock engine in-process on real loopback sockets (ephemeral ports): the OpenAI API as
// vLLM serves it, prefix-cache hits in usage, bad input, /metrics, /tokenize, KV events on a
// real ZMQ SUB socket, and client disconnects aborting requests in the core.
#include "infera/mock/mock_server.h"

#include "infera/mock/mock_test_support.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "infera/common/metrics.h"
#include "infera/events/decoder.h"
#include "infera/http/sse.h"
#include "infera/http/test_support.h"
#include "infera/tokenizer/tokenizer.h"

namespace infera::mock {
namespace {

namespace json = boost::json;
using http::testing::RawConn;
using http::testing::RawResponse;
using http::testing::wait_until;
using std::chrono::milliseconds;

const std::string kModelsDir = INFERA_MODELS_DIR;

using testing::call;
using testing::object_of;
using testing::request_text;
using testing::start_engine;
using testing::usage_of;

// Splits an SSE body into its JSON events; `done` says whether [DONE] ended it.
std::vector<json::object> sse_events(const std::string& body, bool* done) {
  http::SseParser parser;
  parser.feed(body);
  http::SseEvent ev;
  std::vector<json::object> out;
  *done = false;
  while (parser.next(ev)) {
    EXPECT_FALSE(*done) << "an event after [DONE]";
    if (ev.done()) {
      *done = true;
      continue;
    }
    out.push_back(object_of(ev.data));
  }
  EXPECT_TRUE(parser.idle());
  return out;
}

std::string ids_json(size_t n, uint32_t first) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) s += ',';
    s += std::to_string(first + i);
  }
  return s + "]";
}

int64_t cached_of(const json::object& o) {
  return o.at("usage").at("prompt_tokens_details").at("cached_tokens").as_int64();
}

TEST(MockServerTest, CompletionNonStreamShape) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  RawResponse r = call(engine->port(), "POST", "/v1/completions",
                       R"({"model":"mock","prompt":"the quick brown fox","max_tokens":5,)"
                       R"("ignore_eos":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.header("content-type").find("application/json"), std::string::npos);
  json::object o = object_of(r.body);
  EXPECT_TRUE(o.at("id").as_string().starts_with("cmpl-"));
  EXPECT_EQ(o.at("object").as_string(), "text_completion");
  EXPECT_EQ(o.at("model").as_string(), "mock");
  EXPECT_GT(o.at("created").as_int64(), 1600000000);
  const json::object& c = o.at("choices").at(0).as_object();
  EXPECT_EQ(c.at("index").as_int64(), 0);
  EXPECT_EQ(c.at("finish_reason").as_string(), "length");
  const std::string text(c.at("text").as_string());
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(usage_of(o, "prompt_tokens"), 4);  // the synthetic codec: one id per word
  EXPECT_EQ(usage_of(o, "completion_tokens"), 5);
  EXPECT_EQ(usage_of(o, "total_tokens"), 9);
  EXPECT_EQ(cached_of(o), 0);
}

TEST(MockServerTest, OutputIsDeterministicAndStreamCarriesTheSameText) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  const std::string body = R"({"prompt":"once upon a time","max_tokens":12,"ignore_eos":true})";
  json::object a = object_of(call(engine->port(), "POST", "/v1/completions", body).body);
  json::object b = object_of(call(engine->port(), "POST", "/v1/completions", body).body);
  const std::string text(a.at("choices").at(0).at("text").as_string());
  EXPECT_EQ(text, b.at("choices").at(0).at("text").as_string());
  EXPECT_NE(a.at("id").as_string(), b.at("id").as_string());

  RawResponse s = call(engine->port(), "POST", "/v1/completions",
                       R"({"prompt":"once upon a time","max_tokens":12,"ignore_eos":true,)"
                       R"("stream":true})");
  ASSERT_EQ(s.status, 200);
  bool done = false;
  auto events = sse_events(s.body, &done);
  EXPECT_TRUE(done);
  std::string streamed;
  for (const auto& e : events) streamed += e.at("choices").at(0).at("text").as_string();
  EXPECT_EQ(streamed, text);

  // Another prompt gives another text.
  json::object c = object_of(call(engine->port(), "POST", "/v1/completions",
                                  R"({"prompt":"a different prompt","max_tokens":12,)"
                                  R"("ignore_eos":true})")
                                 .body);
  EXPECT_NE(c.at("choices").at(0).at("text").as_string(), text);
}

TEST(MockServerTest, CompletionStreamShapeWithUsage) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  RawResponse r = call(engine->port(), "POST", "/v1/completions",
                       R"({"prompt":[11,12,13,14,15],"max_tokens":7,"ignore_eos":true,)"
                       R"("stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), "text/event-stream");
  EXPECT_TRUE(r.chunked);
  bool done = false;
  auto events = sse_events(r.body, &done);
  ASSERT_TRUE(done);
  ASSERT_EQ(events.size(), 8u);  // 7 tokens + the usage chunk
  const std::string id(events[0].at("id").as_string());
  for (size_t i = 0; i < 7; ++i) {
    const json::object& e = events[i];
    EXPECT_EQ(e.at("id").as_string(), id);
    EXPECT_EQ(e.at("object").as_string(), "text_completion");
    EXPECT_TRUE(e.at("usage").is_null());
    const json::value& finish = e.at("choices").at(0).at("finish_reason");
    if (i < 6) {
      EXPECT_TRUE(finish.is_null());
    } else {
      EXPECT_EQ(finish.as_string(), "length");
    }
  }
  const json::object& usage_chunk = events.back();
  EXPECT_TRUE(usage_chunk.at("choices").as_array().empty());
  EXPECT_EQ(usage_of(usage_chunk, "prompt_tokens"), 5);
  EXPECT_EQ(usage_of(usage_chunk, "completion_tokens"), 7);
  EXPECT_EQ(cached_of(usage_chunk), 0);
}

TEST(MockServerTest, NaturalStopAndMinTokens) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  // Without ignore_eos the output ends with EOS at the prompt's natural length (16..512).
  json::object o = object_of(call(engine->port(), "POST", "/v1/completions",
                                  R"({"prompt":"tell me a story","max_tokens":2000})")
                                 .body);
  EXPECT_EQ(o.at("choices").at(0).at("finish_reason").as_string(), "stop");
  const int64_t n = usage_of(o, "completion_tokens");
  EXPECT_GE(n, 16);
  EXPECT_LE(n, 512);
  // min_tokens holds EOS back.
  json::object longer = object_of(call(engine->port(), "POST", "/v1/completions",
                                       R"({"prompt":"tell me a story","max_tokens":2000,)"
                                       R"("min_tokens":600})")
                                      .body);
  EXPECT_EQ(usage_of(longer, "completion_tokens"), 601);  // EOS comes right at min_tokens
}

TEST(MockServerTest, ListOfPromptsAndN) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  json::object o = object_of(call(engine->port(), "POST", "/v1/completions",
                                  R"({"prompt":["first prompt","second one here"],"n":2,)"
                                  R"("max_tokens":3,"ignore_eos":true})")
                                 .body);
  const json::array& choices = o.at("choices").as_array();
  ASSERT_EQ(choices.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(choices[i].at("index").as_int64(), int64_t(i));
  EXPECT_EQ(choices[0].at("text"), choices[1].at("text"));  // same prompt, same output
  EXPECT_NE(choices[0].at("text"), choices[2].at("text"));
  EXPECT_EQ(usage_of(o, "prompt_tokens"), 2 + 3);
  EXPECT_EQ(usage_of(o, "completion_tokens"), 12);
}

TEST(MockServerTest, RepeatedPromptReportsCachedFullBlocks) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  const std::string body = R"({"prompt":)" + ids_json(100, 1000) + R"(,"max_tokens":2,"ignore_eos":true})";
  json::object first = object_of(call(engine->port(), "POST", "/v1/completions", body).body);
  EXPECT_EQ(cached_of(first), 0);
  json::object second = object_of(call(engine->port(), "POST", "/v1/completions", body).body);
  EXPECT_EQ(cached_of(second), 96);  // 6 full blocks of 16; the 7th is partial
  // The streamed usage reports it too.
  RawResponse s = call(engine->port(), "POST", "/v1/completions",
                       R"({"prompt":)" + ids_json(100, 1000) +
                           R"(,"max_tokens":2,"ignore_eos":true,"stream":true,)"
                           R"("stream_options":{"include_usage":true}})");
  bool done = false;
  auto events = sse_events(s.body, &done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(cached_of(events.back()), 96);
}

// SGLang-style disaggregation: the same body (max_tokens and all) goes to a prefill and a decode
// engine at once. The prefill engine computes the prompt and one token and hands the blocks
// over; the decode engine generates the answer. (Before: the prefill engine generated all of
// max_tokens before letting the blocks go, so the decode's first token waited for a whole
// answer: 2.3 s for 400 tokens at speedup 1.)
TEST(MockServerTest, SglangPrefillEngineComputesThePromptAndOneToken) {
  auto prefill = start_engine({"--role", "prefill", "--pd-protocol", "sglang",
                               "--disaggregation-bootstrap-port", "0"});
  auto decode = start_engine({"--role", "decode", "--pd-protocol", "sglang"});
  ASSERT_TRUE(prefill && decode);
  ASSERT_NE(prefill->worker().bootstrap_port, 0u);
  const std::string body = R"({"prompt":)" + ids_json(64, 100) +
                           R"(,"max_tokens":50,"ignore_eos":true,"bootstrap_host":"127.0.0.1",)" +
                           R"("bootstrap_port":)" + std::to_string(prefill->worker().bootstrap_port) +
                           R"(,"bootstrap_room":7})";
  auto prefill_answer = std::async(std::launch::async, [&] {
    return call(prefill->port(), "POST", "/v1/completions", body);
  });
  const RawResponse d = call(decode->port(), "POST", "/v1/completions", body);
  const RawResponse p = prefill_answer.get();
  ASSERT_EQ(p.status, 200) << p.body;
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(usage_of(object_of(p.body), "completion_tokens"), 1);
  EXPECT_EQ(usage_of(object_of(d.body), "completion_tokens"), 50);
}

// LoRA adapters as vLLM serves them: listed after the base model with it as `parent`, answered
// under their own name; a model that is neither is a 404.
TEST(MockServerTest, LoraAdaptersAreListedAndServedUnderTheirNames) {
  auto engine = start_engine({"--enable-lora", "--lora-modules", "sql-lora=/adapters/sql"});
  ASSERT_TRUE(engine);
  const json::object models = object_of(call(engine->port(), "GET", "/v1/models").body);
  const json::array& data = models.at("data").as_array();
  ASSERT_EQ(data.size(), 2u);
  EXPECT_TRUE(data[0].at("parent").is_null());
  EXPECT_EQ(data[1].at("id").as_string(), "sql-lora");
  EXPECT_EQ(data[1].at("parent").as_string(), "mock");
  EXPECT_EQ(data[1].at("root").as_string(), "/adapters/sql");
  const std::string body = R"({"model":"sql-lora","prompt":)" + ids_json(40, 7) + R"(,"max_tokens":2})";
  const RawResponse r = call(engine->port(), "POST", "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(object_of(r.body).at("model").as_string(), "sql-lora");
  EXPECT_EQ(call(engine->port(), "POST", "/v1/completions",
                 R"({"model":"other-lora","prompt":[1,2,3],"max_tokens":2})").status,
            404);
}

TEST(MockServerTest, ModelsHealthAndPing) {
  auto engine = start_engine({"--served-model-name", "served", "--num-gpu-blocks", "101"});
  ASSERT_TRUE(engine);
  RawResponse h = call(engine->port(), "GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_TRUE(h.body.empty());
  EXPECT_EQ(call(engine->port(), "GET", "/ping").status, 200);
  json::object m = object_of(call(engine->port(), "GET", "/v1/models").body);
  EXPECT_EQ(m.at("object").as_string(), "list");
  EXPECT_EQ(m.at("data").at(0).at("id").as_string(), "served");
  EXPECT_EQ(m.at("data").at(0).at("root").as_string(), "mock");
  EXPECT_EQ(m.at("data").at(0).at("max_model_len").as_int64(), 100 * 16);
  // The served name is the one the API accepts.
  EXPECT_EQ(call(engine->port(), "POST", "/v1/completions", R"({"model":"served","prompt":"x"})")
                .status,
            200);
  RawResponse wrong =
      call(engine->port(), "POST", "/v1/completions", R"({"model":"mock","prompt":"x"})");
  EXPECT_EQ(wrong.status, 404);
  EXPECT_EQ(object_of(wrong.body).at("error").at("code").as_string(), "model_not_found");
}

TEST(MockServerTest, BadInputIsAnOpenAiStyle400AndTheEngineKeepsServing) {
  auto engine = start_engine({"--num-gpu-blocks", "65"});  // 1024 tokens of cache
  ASSERT_TRUE(engine);
  struct Case {
    const char* path;
    std::string body;
    const char* param;  // "" for null
  };
  const Case cases[] = {
      {"/v1/completions", "{\"prompt\": ", ""},
      {"/v1/completions", "[]", ""},
      {"/v1/completions", R"({"prompt":5})", "prompt"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":"many"})", "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","stream":1})", "stream"},
      {"/v1/completions", R"({"prompt":""})", "prompt"},
      {"/v1/completions", R"({"prompt":[]})", "prompt"},
      {"/v1/completions", R"({"prompt":"   "})", ""},  // whitespace: one synthetic token, fine
      {"/v1/completions", R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":-1})", "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","surprise":true})", "surprise"},
      {"/v1/completions", R"({"prompt":[1,2,99999999]})", "prompt"},
      {"/v1/completions", R"({"prompt":)" + ids_json(2000, 1) + "}", "prompt"},
      {"/v1/completions", R"({"prompt":)" + ids_json(1000, 1) + R"(,"max_tokens":100})",
       "max_tokens"},
      {"/v1/completions", R"({"prompt":["a","b","c","d","e","f","g","h","i"],"n":128})", "n"},
      {"/v1/chat/completions", R"({"messages":[]})", "messages"},
      // The gateway's chat-prompt parser (tokenizer::parse_chat_prompt) names the message.
      {"/v1/chat/completions", R"({"messages":[{"role":1,"content":"x"}]})", "messages[0].role"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"n":"2"})", "n"},
      {"/tokenize", R"({"prompt":7})", "prompt"},
      {"/detokenize", R"({"tokens":[99999999]})", "tokens"},
  };
  for (const Case& c : cases) {
    RawResponse r = call(engine->port(), "POST", c.path, c.body);
    if (std::string_view(c.body) == R"({"prompt":"   "})") {
      EXPECT_EQ(r.status, 200) << r.body;
      continue;
    }
    ASSERT_EQ(r.status, 400) << c.body << " -> " << r.body;
    json::object e = object_of(r.body);
    const json::object& err = e.at("error").as_object();
    EXPECT_EQ(err.at("type").as_string(), "invalid_request_error") << r.body;
    EXPECT_FALSE(err.at("message").as_string().empty());
    if (*c.param == '\0') {
      EXPECT_TRUE(err.at("param").is_null()) << r.body;
    } else {
      EXPECT_EQ(err.at("param").as_string(), c.param) << r.body;
    }
  }
  EXPECT_EQ(call(engine->port(), "GET", "/health").status, 200);
  RawResponse good = call(engine->port(), "POST", "/v1/completions",
                          R"({"prompt":)" + ids_json(1000, 1) + R"(,"max_tokens":24})");
  EXPECT_EQ(good.status, 200) << good.body;
  EXPECT_EQ(call(engine->port(), "GET", "/nope").status, 404);
  EXPECT_EQ(call(engine->port(), "GET", "/v1/completions").status, 405);
}

TEST(MockServerTest, MetricsUseVllmNames) {
  auto engine = start_engine({"--block-size", "32"});
  ASSERT_TRUE(engine);
  const std::string body = R"({"prompt":)" + ids_json(70, 5) + R"(,"max_tokens":3,"ignore_eos":true})";
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(call(engine->port(), "POST", "/v1/completions", body).status, 200);
  }
  RawResponse r = call(engine->port(), "GET", "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.header("content-type").find("text/plain"), std::string::npos);
  auto samples = metrics::parse_text(r.body);
  ASSERT_TRUE(samples.ok()) << samples.status().to_string();
  using metrics::sum_of;
  const metrics::Labels mine = {{"model_name", "mock"}};
  // Three requests of 70 tokens: each queried 70; the 2nd and 3rd hit 2 blocks of 32.
  EXPECT_EQ(sum_of(*samples, "vllm:prefix_cache_queries_total", mine), 210);
  EXPECT_EQ(sum_of(*samples, "vllm:prefix_cache_hits_total", mine), 128);
  EXPECT_EQ(sum_of(*samples, "vllm:num_requests_running", mine), 0);
  EXPECT_EQ(sum_of(*samples, "vllm:num_requests_waiting", mine), 0);
  EXPECT_EQ(sum_of(*samples, "vllm:kv_cache_usage_perc", mine), 0);
  EXPECT_EQ(sum_of(*samples, "vllm:generation_tokens_total", mine), 9);
  EXPECT_EQ(sum_of(*samples, "vllm:request_success_total", {{"finished_reason", "length"}}), 3);
  EXPECT_EQ(sum_of(*samples, "vllm:time_to_first_token_seconds_count", mine), 3);
  EXPECT_EQ(sum_of(*samples, "vllm:e2e_request_latency_seconds_count", mine), 3);
  EXPECT_EQ(sum_of(*samples, "vllm:inter_token_latency_seconds_count", mine), 6);
  bool info = false;
  for (const auto& s : *samples) {
    if (s.name == "vllm:cache_config_info") {
      info = true;
      EXPECT_EQ(s.label("block_size"), "32");
      EXPECT_EQ(s.label("enable_prefix_caching"), "True");
    }
  }
  EXPECT_TRUE(info);
}

TEST(MockServerTest, TokenizeAndDetokenizeSynthetic) {
  auto engine = start_engine();
  ASSERT_TRUE(engine);
  json::object t = object_of(call(engine->port(), "POST", "/tokenize",
                                  R"({"model":"mock","prompt":"alpha beta gamma",)"
                                  R"("return_token_strs":true})")
                                 .body);
  EXPECT_EQ(t.at("count").as_int64(), 3);
  EXPECT_EQ(t.at("tokens").as_array().size(), 3u);
  EXPECT_EQ(t.at("token_strs").as_array().size(), 3u);
  EXPECT_EQ(t.at("max_model_len").as_int64(), (16384 - 1) * 16);
  // The completions endpoint sees the same ids: its prompt_tokens match.
  json::object c = object_of(call(engine->port(), "POST", "/v1/completions",
                                  R"({"prompt":"alpha beta gamma","max_tokens":1})")
                                 .body);
  EXPECT_EQ(usage_of(c, "prompt_tokens"), 3);
  json::object d = object_of(
      call(engine->port(), "POST", "/detokenize", R"({"tokens":[0,1]})").body);
  EXPECT_EQ(d.at("prompt").as_string(), " the of");
}

TEST(MockServerTest, ChatWithTheRealTokenizerAndTemplate) {
  const std::string dir = kModelsDir + "/qwen3";
  auto engine = start_engine({"--tokenizer", dir, "--model", "qwen"});
  ASSERT_TRUE(engine);
  auto tok = tokenizer::Tokenizer::from_file(dir + "/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  const std::string messages = R"([{"role":"system","content":"You are terse."},)"
                               R"({"role":"user","content":"What is a KV cache?"}])";
  // /tokenize renders the template exactly like the completion path.
  json::object t = object_of(
      call(engine->port(), "POST", "/tokenize", R"({"messages":)" + messages + "}").body);
  const int64_t prompt_tokens = t.at("count").as_int64();
  EXPECT_GT(prompt_tokens, 10);
  // The rendered Qwen3 prompt, tokenized by the tokenizer module: the same ids.
  const std::string rendered =
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is a KV "
      "cache?<|im_end|>\n<|im_start|>assistant\n";
  const auto expected = (*tok)->encode(rendered, false);
  ASSERT_EQ(t.at("tokens").as_array().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(t.at("tokens").at(i).as_int64(), int64_t(expected[i]));
  }
  // chat_template_kwargs reach the template (Qwen3 adds an empty think block).
  json::object no_think = object_of(call(engine->port(), "POST", "/tokenize",
                                         R"({"messages":)" + messages +
                                             R"(,"chat_template_kwargs":{"enable_thinking":false}})")
                                        .body);
  EXPECT_GT(no_think.at("count").as_int64(), prompt_tokens);

  RawResponse r = call(engine->port(), "POST", "/v1/chat/completions",
                       R"({"model":"qwen","messages":)" + messages +
                           R"(,"max_tokens":8,"ignore_eos":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  json::object o = object_of(r.body);
  EXPECT_TRUE(o.at("id").as_string().starts_with("chatcmpl-"));
  EXPECT_EQ(o.at("object").as_string(), "chat.completion");
  const json::object& msg = o.at("choices").at(0).at("message").as_object();
  EXPECT_EQ(msg.at("role").as_string(), "assistant");
  const std::string content(msg.at("content").as_string());
  EXPECT_EQ(usage_of(o, "prompt_tokens"), prompt_tokens);
  EXPECT_EQ(usage_of(o, "completion_tokens"), 8);

  RawResponse s = call(engine->port(), "POST", "/v1/chat/completions",
                       R"({"model":"qwen","messages":)" + messages +
                           R"(,"max_tokens":8,"ignore_eos":true,"stream":true,)"
                           R"("stream_options":{"include_usage":true}})");
  ASSERT_EQ(s.status, 200);
  bool done = false;
  auto events = sse_events(s.body, &done);
  ASSERT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0].at("choices").at(0).at("delta").at("role").as_string(), "assistant");
  std::string streamed;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i].at("object").as_string(), "chat.completion.chunk");
    streamed += events[i].at("choices").at(0).at("delta").at("content").as_string();
  }
  EXPECT_EQ(streamed, content);  // incremental detokenization gives the whole text
  EXPECT_EQ(events[events.size() - 2].at("choices").at(0).at("finish_reason").as_string(),
            "length");
  EXPECT_EQ(usage_of(events.back(), "completion_tokens"), 8);
  // The second identical chat hit the cache on the full blocks of the first.
  EXPECT_EQ(cached_of(events.back()), (prompt_tokens - 1) / 16 * 16);
}

TEST(MockServerTest, ChatWithoutTokenizerRendersChatMl) {
  auto engine = start_engine();  // synthetic codec renders ChatML
  ASSERT_TRUE(engine);
  RawResponse ok = call(engine->port(), "POST", "/v1/chat/completions",
                        R"({"messages":[{"role":"user","content":"hi there"}],"max_tokens":2})");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// Reads ZMQ messages until `pred` accepts a decoded batch or the deadline passes.
template <typename Pred>
bool receive_until(zmq::socket_t& sub, milliseconds deadline, Pred pred,
                   std::vector<uint64_t>* sequences = nullptr) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    std::vector<zmq::message_t> frames;
    auto n = zmq::recv_multipart(sub, std::back_inserter(frames));
    if (!n) continue;  // timeout slice
    EXPECT_EQ(frames.size(), 3u);
    if (frames.size() != 3) continue;
    EXPECT_EQ(frames[1].size(), 8u);
    uint64_t seq = 0;
    for (size_t i = 0; i < 8; ++i) seq = (seq << 8) | frames[1].data<uint8_t>()[i];
    if (sequences) sequences->push_back(seq);
    auto batch = events::decode_batch(
        std::span<const uint8_t>(frames[2].data<uint8_t>(), frames[2].size()));
    EXPECT_TRUE(batch.ok()) << batch.status().to_string();
    if (batch.ok() && pred(*batch)) return true;
  }
  return false;
}

TEST(MockServerTest, KvEventsAndResetPrefixCacheEmitsAllBlocksCleared) {
  auto engine = start_engine(
      {"--kv-events-config",
       R"({"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:*",)"
       R"("replay_endpoint":"tcp://127.0.0.1:*","topic":"kv-test"})"});
  ASSERT_TRUE(engine);
  const discovery::WorkerInfo& w = engine->worker();
  ASSERT_TRUE(w.kv_endpoint.starts_with("tcp://127.0.0.1:")) << w.kv_endpoint;
  ASSERT_TRUE(w.replay_endpoint.starts_with("tcp://127.0.0.1:")) << w.replay_endpoint;
  EXPECT_EQ(w.topic, "kv-test");

  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "kv-test");
  sub.set(zmq::sockopt::rcvtimeo, 100);
  sub.connect(w.kv_endpoint);

  // ZeroMQ subscriptions propagate asynchronously: send new prompts until their events arrive
  // (a repeated prompt would hit the cache and store nothing new).
  bool stored = false;
  for (uint32_t attempt = 0; attempt < 100 && !stored; ++attempt) {
    const uint32_t first = 7 + 1000 * attempt;
    const std::string fresh = R"({"prompt":)" + ids_json(40, first) + R"(,"max_tokens":1})";
    ASSERT_EQ(call(engine->port(), "POST", "/v1/completions", fresh).status, 200);
    stored = receive_until(sub, milliseconds(100), [&](const events::EventBatch& b) {
      for (const auto& e : b.events) {
        const auto* s = std::get_if<events::BlockStored>(&e);
        if (s == nullptr || s->token_ids.empty() || s->token_ids[0] != first) continue;
        EXPECT_EQ(s->block_size, 16u);
        EXPECT_EQ(s->medium.value_or(""), "GPU");
        EXPECT_FALSE(s->parent_block_hash.has_value());  // block 0 of the prompt
        EXPECT_EQ(s->block_hashes.size(), 2u);           // 40 tokens: two full blocks
        EXPECT_EQ(s->token_ids.size(), 32u);
        return true;
      }
      return false;
    });
  }
  ASSERT_TRUE(stored);

  RawResponse reset = call(engine->port(), "POST", "/reset_prefix_cache");
  EXPECT_EQ(reset.status, 200) << reset.body;
  std::vector<uint64_t> seqs;
  EXPECT_TRUE(receive_until(
      sub, milliseconds(5000),
      [](const events::EventBatch& b) {
        for (const auto& e : b.events) {
          if (std::holds_alternative<events::AllBlocksCleared>(e)) return true;
        }
        return false;
      },
      &seqs));
  for (size_t i = 1; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], seqs[i - 1] + 1);
  // The cache is empty now: a prompt stored before hits nothing.
  const std::string body = R"({"prompt":)" + ids_json(40, 7) + R"(,"max_tokens":1})";
  json::object again = object_of(call(engine->port(), "POST", "/v1/completions", body).body);
  EXPECT_EQ(cached_of(again), 0);
  EXPECT_GT(engine->snapshot().kv_event_batches, 0u);
}

TEST(MockServerTest, ResetWhileRunningIsRefusedUnlessAsked) {
  auto engine = start_engine({"--speedup-ratio", "1"});
  ASSERT_TRUE(engine);
  RawConn stream(engine->port());
  ASSERT_TRUE(stream.send_all(request_text(
      "POST", "/v1/completions",
      R"({"prompt":"long one","max_tokens":100000,"ignore_eos":true,"stream":true})")));
  ASSERT_TRUE(stream.read_until("data: ", milliseconds(10'000)));
  RawResponse refused = call(engine->port(), "POST", "/reset_prefix_cache");
  EXPECT_EQ(refused.status, 400) << refused.body;
  RawResponse forced =
      call(engine->port(), "POST", "/reset_prefix_cache?reset_running_requests=true");
  EXPECT_EQ(forced.status, 200) << forced.body;
  // The preempted request resumes and keeps streaming.
  const size_t before = stream.pending().size();
  EXPECT_TRUE(wait_until([&] {
    stream.read_some(milliseconds(50));
    return stream.pending().size() > before + 1000;
  }, milliseconds(10'000)));
}

TEST(MockServerTest, ClientDisconnectAbortsTheRequest) {
  auto engine = start_engine({"--speedup-ratio", "1"});
  ASSERT_TRUE(engine);
  {
    RawConn c(engine->port());
    ASSERT_TRUE(c.send_all(request_text(
        "POST", "/v1/completions",
        R"({"prompt":"never ending","max_tokens":100000,"ignore_eos":true,"stream":true})")));
    ASSERT_TRUE(c.read_until("data: ", milliseconds(10'000)));
    EXPECT_TRUE(wait_until([&] { return engine->snapshot().engine.num_running == 1; }));
  }  // closed mid-stream
  EXPECT_TRUE(wait_until(
      [&] {
        const auto m = engine->snapshot().engine;
        return m.num_running == 0 && m.requests_aborted == 1;
      },
      milliseconds(10'000)));
  {
    RawConn c(engine->port());
    ASSERT_TRUE(c.send_all(request_text(
        "POST", "/v1/completions",
        R"({"prompt":"never ending","max_tokens":100000,"ignore_eos":true})")));
    EXPECT_TRUE(wait_until([&] { return engine->snapshot().engine.num_running == 1; }));
    c.reset();
  }
  EXPECT_TRUE(wait_until(
      [&] {
        const auto m = engine->snapshot().engine;
        return m.num_running == 0 && m.requests_aborted == 2;
      },
      milliseconds(10'000)));
  EXPECT_EQ(call(engine->port(), "GET", "/health").status, 200);
}

TEST(MockServerTest, ManyConcurrentStreams) {
  auto engine = start_engine({"--speedup-ratio", "100"});
  ASSERT_TRUE(engine);
  constexpr int kStreams = 64;
  std::vector<RawConn> conns;
  for (int i = 0; i < kStreams; ++i) {
    conns.emplace_back(engine->port());
    ASSERT_TRUE(conns.back().send_all(request_text(
        "POST", "/v1/completions",
        R"({"prompt":"shared system prompt then question )" + std::to_string(i) +
            R"(","max_tokens":40,"ignore_eos":true,"stream":true})")));
  }
  for (auto& c : conns) {
    RawResponse r = c.read_response(milliseconds(30'000));
    ASSERT_TRUE(r.complete);
    bool done = false;
    auto events = sse_events(r.body, &done);
    EXPECT_TRUE(done);
    EXPECT_EQ(events.size(), 40u);
  }
}

TEST(MockServerTest, StartupFailsCleanlyOnABadTokenizerOrBusyPort) {
  bool help = false;
  std::string text;
  std::vector<std::string> args = {"--host", "127.0.0.1", "--port", "0", "--tokenizer",
                                   "/nonexistent/dir"};
  auto bad = MockEngine::start(*parse_mock_flags(infera::testing::with_dev_transports(args), &help, &text));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--tokenizer"), std::string::npos);
  auto first = start_engine();
  ASSERT_TRUE(first);
  std::vector<std::string> same = {"--host", "127.0.0.1", "--port",
                                   std::to_string(first->port())};
  auto second = MockEngine::start(*parse_mock_flags(infera::testing::with_dev_transports(same), &help, &text));
  EXPECT_FALSE(second.ok());
}

TEST(MockServerTest, GracefulShutdownLetsAStreamFinish) {
  auto engine = start_engine({"--speedup-ratio", "10"});
  ASSERT_TRUE(engine);
  const uint16_t port = engine->port();
  RawConn c(port);
  ASSERT_TRUE(c.send_all(request_text(
      "POST", "/v1/completions",
      R"({"prompt":"finish me","max_tokens":300,"ignore_eos":true,"stream":true})")));
  ASSERT_TRUE(c.read_until("data: ", milliseconds(10'000)));
  std::thread stopper([&] { engine->shutdown(milliseconds(20'000)); });
  RawResponse r = c.read_response(milliseconds(20'000));
  stopper.join();
  ASSERT_TRUE(r.complete);
  bool done = false;
  auto events = sse_events(r.body, &done);
  EXPECT_TRUE(done);
  EXPECT_EQ(events.size(), 300u);
  EXPECT_FALSE(RawConn(port).ok());  // no longer accepting
}

}  // namespace
}  // namespace infera::mock
