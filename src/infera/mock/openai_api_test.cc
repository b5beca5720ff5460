#include "infera/mock/openai_api.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <string>

namespace infera::mock {

using engine::FinishReason;
using engine::TokenId;

namespace {

namespace json = boost::json;

Result<GenerateRequest> completions(std::string_view body, std::string* param = nullptr) {
  return parse_generate_request(ApiKind::kCompletions, body, param);
}
Result<GenerateRequest> chat(std::string_view body, std::string* param = nullptr) {
  return parse_generate_request(ApiKind::kChat, body, param);
}

TEST(OpenAiRequestTest, CompletionsPromptForms) {
  auto text = completions(R"({"model":"m","prompt":"hello"})");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  ASSERT_EQ(text->prompts.size(), 1u);
  EXPECT_EQ(text->prompts[0].text.value_or(""), "hello");
  EXPECT_EQ(text->model, "m");
  EXPECT_FALSE(text->max_tokens.has_value());

  auto ids = completions(R"({"prompt":[1,2,3]})");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->prompts.size(), 1u);
  EXPECT_FALSE(ids->prompts[0].text.has_value());
  EXPECT_EQ(ids->prompts[0].ids, (std::vector<TokenId>{1, 2, 3}));

  auto texts = completions(R"({"prompt":["a","b"]})");
  ASSERT_TRUE(texts.ok());
  EXPECT_EQ(texts->prompts.size(), 2u);

  auto id_lists = completions(R"({"prompt":[[1,2],[3]]})");
  ASSERT_TRUE(id_lists.ok());
  ASSERT_EQ(id_lists->prompts.size(), 2u);
  EXPECT_EQ(id_lists->prompts[1].ids, (std::vector<TokenId>{3}));
}

TEST(OpenAiRequestTest, SamplingAndStreamFields) {
  auto r = completions(
      R"({"prompt":"x","max_tokens":5,"min_tokens":2,"ignore_eos":true,"n":3,"stream":true,)"
      R"("stream_options":{"include_usage":true,"continuous_usage_stats":true},"temperature":0.7,)"
      R"("top_p":1,"seed":1,"stop":["\n"],"logprobs":null,"user":"u","echo":false})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->max_tokens.value_or(0), 5u);
  EXPECT_EQ(r->min_tokens, 2u);
  EXPECT_TRUE(r->ignore_eos);
  EXPECT_EQ(r->n, 3u);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->continuous_usage_stats);
  auto integral_double = completions(R"({"prompt":"x","max_tokens":5.0})");
  ASSERT_TRUE(integral_double.ok());
  EXPECT_EQ(integral_double->max_tokens.value_or(0), 5u);
}

TEST(OpenAiRequestTest, ChatFields) {
  auto r = chat(R"({"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":4,)"
                R"("chat_template_kwargs":{"enable_thinking":false},"tools":[],)"
                R"("add_generation_prompt":true,"kv_transfer_params":{"do_remote_decode":true}})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->chat.messages.size(), 1u);
  EXPECT_EQ(r->max_tokens.value_or(0), 4u);
  EXPECT_TRUE(r->chat.chat_template_kwargs.contains("enable_thinking"));
  EXPECT_TRUE(r->chat.tools.has_value());
  EXPECT_TRUE(r->chat.add_generation_prompt);
  EXPECT_FALSE(r->chat.add_special_tokens);
  EXPECT_TRUE(r->do_remote_decode);
  auto cont = chat(R"({"messages":[{"role":"user","content":"hi"}],"continue_final_message":true})");
  ASSERT_TRUE(cont.ok());
  EXPECT_TRUE(cont->chat.continue_final_message);
  EXPECT_FALSE(cont->chat.add_generation_prompt);
  // A chat prompt's add_special_tokens is the chat's (default false), a completion's its own.
  auto special = chat(R"({"messages":[{"role":"user","content":"hi"}],"add_special_tokens":true})");
  ASSERT_TRUE(special.ok());
  EXPECT_TRUE(special->chat.add_special_tokens);
  auto plain = completions(R"({"prompt":"x","add_special_tokens":false})");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->add_special_tokens);
}

struct BadCase {
  ApiKind kind;
  const char* body;
  const char* param;
};

TEST(OpenAiRequestTest, BadInputIsInvalidArgumentNamingTheField) {
  const BadCase cases[] = {
      {ApiKind::kCompletions, "{not json", ""},
      {ApiKind::kCompletions, "[1,2]", ""},
      {ApiKind::kCompletions, R"({"model":"m"})", "prompt"},
      {ApiKind::kCompletions, R"({"prompt":""})", "prompt"},
      {ApiKind::kCompletions, R"({"prompt":[]})", "prompt"},
      {ApiKind::kCompletions, R"({"prompt":[[]]})", "prompt"},
      {ApiKind::kCompletions, R"({"prompt":["a",""]})", "prompt"},
      {ApiKind::kCompletions, R"({"prompt":5})", "prompt"},
      {ApiKind::kCompletions, R"({"prompt":[1,-2]})", "prompt"},
      {ApiKind::kCompletions, R"({"prompt":[1,"a"]})", "prompt"},
      {ApiKind::kCompletions, R"({"prompt":[1.5]})", "prompt"},
      {ApiKind::kCompletions, R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {ApiKind::kCompletions, R"({"prompt":"x","max_tokens":-3})", "max_tokens"},
      {ApiKind::kCompletions, R"({"prompt":"x","max_tokens":"16"})", "max_tokens"},
      {ApiKind::kCompletions, R"({"prompt":"x","max_tokens":1.5})", "max_tokens"},
      {ApiKind::kCompletions, R"({"prompt":"x","stream":"yes"})", "stream"},
      {ApiKind::kCompletions, R"({"prompt":"x","model":7})", "model"},
      {ApiKind::kCompletions, R"({"prompt":"x","n":0})", "n"},
      {ApiKind::kCompletions, R"({"prompt":"x","min_tokens":-1})", "min_tokens"},
      {ApiKind::kCompletions, R"({"prompt":"x","max_tokens":2,"min_tokens":3})", "min_tokens"},
      {ApiKind::kCompletions, R"({"prompt":"x","temperature":"hot"})", "temperature"},
      {ApiKind::kCompletions, R"({"prompt":"x","stream_options":{"include_usage":true}})",
       "stream_options"},
      {ApiKind::kCompletions, R"({"prompt":"x","stream":true,"stream_options":{"x":1}})",
       "stream_options"},
      {ApiKind::kCompletions, R"({"prompt":"x","bogus_field":1})", "bogus_field"},
      {ApiKind::kCompletions, R"({"prompt":"x","messages":[]})", "messages"},
      {ApiKind::kChat, R"({"model":"m"})", "messages"},
      {ApiKind::kChat, R"({"messages":[]})", "messages"},
      {ApiKind::kChat, R"({"messages":"hi"})", "messages"},
      // A bad message names its index: the chat prompt is read by the gateway's parser
      // (tokenizer::parse_chat_prompt), which says which message and field.
      {ApiKind::kChat, R"({"messages":[{"content":"hi"}]})", "messages[0].role"},
      {ApiKind::kChat, R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {ApiKind::kChat, R"({"messages":[{"role":"user","content":"x"}],"tools":{}})", "tools"},
      {ApiKind::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"continue_final_message":"yes"})",
       "continue_final_message"},
      {ApiKind::kChat, R"({"messages":[{"role":"user","content":"x"}],"prompt":"x"})", "prompt"},
      {ApiKind::kChat, R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":3})",
       "chat_template_kwargs"},
      {ApiKind::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":true,)"
       R"("continue_final_message":true})",
       "continue_final_message"},
  };
  for (const BadCase& c : cases) {
    std::string param = "unset";
    auto r = parse_generate_request(c.kind, c.body, &param);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_EQ(param, c.param) << c.body << ": " << r.status().message();
    EXPECT_FALSE(r.status().message().empty());
  }
}

TEST(OpenAiRequestTest, DeeplyNestedJsonIsRejected) {
  std::string deep = R"({"prompt":"x","user":)";
  for (int i = 0; i < 200; ++i) deep += '[';
  for (int i = 0; i < 200; ++i) deep += ']';
  deep += '}';
  EXPECT_FALSE(completions(deep).ok());
}

TEST(OpenAiRequestTest, TokenizeForms) {
  auto p = parse_tokenize_request(R"({"model":"m","prompt":"hi","add_special_tokens":false})");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->prompt.value_or(""), "hi");
  EXPECT_FALSE(p->add_special_tokens);
  auto m = parse_tokenize_request(
      R"({"messages":[{"role":"user","content":"hi"}],"return_token_strs":true,)"
      R"("continue_final_message":true})");
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->prompt.has_value());
  EXPECT_TRUE(m->return_token_strs);
  EXPECT_EQ(m->chat.messages.size(), 1u);
  EXPECT_TRUE(m->chat.continue_final_message);
  EXPECT_FALSE(m->chat.add_generation_prompt);
  EXPECT_FALSE(parse_tokenize_request(R"({"model":"m"})").ok());
  EXPECT_FALSE(parse_tokenize_request(R"({"prompt":"a","messages":[{"role":"u"}]})").ok());
  EXPECT_FALSE(parse_tokenize_request(R"({"prompt":1})").ok());
  EXPECT_FALSE(parse_tokenize_request(R"({"prompt":"a","what":1})").ok());
  auto d = parse_detokenize_request(R"({"model":"m","tokens":[4,5]})");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (std::vector<TokenId>{4, 5}));
  EXPECT_FALSE(parse_detokenize_request(R"({"tokens":"a"})").ok());
}

// Every response document must be valid JSON with OpenAI's fields.
json::object parse_object(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  EXPECT_FALSE(ec) << text;
  EXPECT_TRUE(v.is_object()) << text;
  return v.is_object() ? v.get_object() : json::object{};
}

TEST(OpenAiResponseTest, CompletionShape) {
  ResponseMeta meta{ApiKind::kCompletions, "cmpl-1", 1700000000, "m"};
  Usage usage{10, 3, 8};
  std::vector<ChoiceResult> choices = {{" a \"quoted\"\n", FinishReason::kLength}};
  json::object o = parse_object(completion_response(meta, choices, usage));
  EXPECT_EQ(o.at("id").as_string(), "cmpl-1");
  EXPECT_EQ(o.at("object").as_string(), "text_completion");
  EXPECT_EQ(o.at("created").as_int64(), 1700000000);
  EXPECT_EQ(o.at("model").as_string(), "m");
  const json::object& c = o.at("choices").as_array().at(0).as_object();
  EXPECT_EQ(c.at("index").as_int64(), 0);
  EXPECT_EQ(c.at("text").as_string(), " a \"quoted\"\n");
  EXPECT_EQ(c.at("finish_reason").as_string(), "length");
  const json::object& u = o.at("usage").as_object();
  EXPECT_EQ(u.at("prompt_tokens").as_int64(), 10);
  EXPECT_EQ(u.at("completion_tokens").as_int64(), 3);
  EXPECT_EQ(u.at("total_tokens").as_int64(), 13);
  EXPECT_EQ(u.at("prompt_tokens_details").at("cached_tokens").as_int64(), 8);
  EXPECT_TRUE(o.at("kv_transfer_params").is_null());
}

TEST(OpenAiResponseTest, ChatShape) {
  ResponseMeta meta{ApiKind::kChat, "chatcmpl-1", 1, "m"};
  json::object o = parse_object(
      completion_response(meta, {{"hello", FinishReason::kStop}}, Usage{1, 1, 0},
                          R"({"do_remote_prefill":true})"));
  EXPECT_EQ(o.at("object").as_string(), "chat.completion");
  const json::object& c = o.at("choices").as_array().at(0).as_object();
  EXPECT_EQ(c.at("message").at("role").as_string(), "assistant");
  EXPECT_EQ(c.at("message").at("content").as_string(), "hello");
  EXPECT_EQ(c.at("finish_reason").as_string(), "stop");
  EXPECT_TRUE(o.at("kv_transfer_params").at("do_remote_prefill").as_bool());
}

// Splits "data: {...}\n\n" events.
std::vector<json::object> events_of(const std::string& sse) {
  std::vector<json::object> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    EXPECT_EQ(sse.compare(pos, 6, "data: "), 0) << sse.substr(pos);
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    out.push_back(parse_object(std::string_view(sse).substr(pos + 6, end - pos - 6)));
    pos = end + 2;
  }
  return out;
}

TEST(OpenAiResponseTest, StreamChunkShapes) {
  ResponseMeta chat_meta{ApiKind::kChat, "chatcmpl-2", 5, "m"};
  const StreamChunks chat_chunks(chat_meta);
  std::string sse;
  chat_chunks.append_role(sse, 0, true);
  chat_chunks.append_delta(sse, 0, "Hi", FinishReason::kNone, true);
  chat_chunks.append_delta(sse, 0, "!", FinishReason::kStop, true);
  chat_chunks.append_usage(sse, Usage{4, 2, 0});
  auto ev = events_of(sse);
  ASSERT_EQ(ev.size(), 4u);
  for (const auto& e : ev) EXPECT_EQ(e.at("object").as_string(), "chat.completion.chunk");
  EXPECT_EQ(ev[0].at("choices").at(0).at("delta").at("role").as_string(), "assistant");
  EXPECT_TRUE(ev[0].at("usage").is_null());
  EXPECT_EQ(ev[1].at("choices").at(0).at("delta").at("content").as_string(), "Hi");
  EXPECT_TRUE(ev[1].at("choices").at(0).at("finish_reason").is_null());
  EXPECT_EQ(ev[2].at("choices").at(0).at("finish_reason").as_string(), "stop");
  EXPECT_TRUE(ev[3].at("choices").as_array().empty());
  EXPECT_EQ(ev[3].at("usage").at("total_tokens").as_int64(), 6);

  ResponseMeta meta{ApiKind::kCompletions, "cmpl-2", 5, "m"};
  std::string plain;
  Usage running{3, 1, 0};
  StreamChunks(meta).append_delta(plain, 1, "x", FinishReason::kLength, false, &running);
  auto p = events_of(plain);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].at("object").as_string(), "text_completion");
  EXPECT_EQ(p[0].at("choices").at(0).at("index").as_int64(), 1);
  EXPECT_EQ(p[0].at("choices").at(0).at("text").as_string(), "x");
  EXPECT_EQ(p[0].at("usage").at("prompt_tokens").as_int64(), 3);
}

TEST(OpenAiResponseTest, ModelsAndTokenizeShapes) {
  json::object m = parse_object(models_response("served", "root", 4096, 9));
  EXPECT_EQ(m.at("object").as_string(), "list");
  const json::object& d = m.at("data").at(0).as_object();
  EXPECT_EQ(d.at("id").as_string(), "served");
  EXPECT_EQ(d.at("object").as_string(), "model");
  EXPECT_EQ(d.at("max_model_len").as_int64(), 4096);
  json::object t = parse_object(tokenize_response({1, 2}, 100, nullptr));
  EXPECT_EQ(t.at("count").as_int64(), 2);
  EXPECT_EQ(t.at("max_model_len").as_int64(), 100);
  EXPECT_EQ(t.at("tokens").as_array().size(), 2u);
  EXPECT_TRUE(t.at("token_strs").is_null());
  std::vector<std::string> strs = {"a", "b"};
  json::object s = parse_object(tokenize_response({1, 2}, 100, &strs));
  EXPECT_EQ(s.at("token_strs").at(1).as_string(), "b");
}

}  // namespace
}  // namespace infera::mock
