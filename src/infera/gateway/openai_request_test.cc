#include "infera/gateway/openai_request.h"

#include <gtest/gtest.h>

namespace infera::gateway {
namespace {

Result<OpenAiRequest> chat(std::string_view body, std::string* param = nullptr) {
  return parse_openai_request(ApiKind::kChatCompletions, body, {}, param);
}
Result<OpenAiRequest> completion(std::string_view body, std::string* param = nullptr) {
  return parse_openai_request(ApiKind::kCompletions, body, {}, param);
}

TEST(OpenAiRequestTest, ParsesChat) {
  auto r = chat(R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],
                   "chat_template_kwargs":{"enable_thinking":false},"tools":[]})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "m");
  EXPECT_TRUE(r->stream);
  EXPECT_EQ(r->messages.size(), 1u);
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_FALSE(r->add_special_tokens);
  EXPECT_TRUE(r->tools.has_value());
  EXPECT_EQ(r->chat_template_kwargs.at("enable_thinking").as_bool(), false);
}

TEST(OpenAiRequestTest, ParsesEveryCompletionsPromptShape) {
  auto text = completion(R"({"prompt":"hello"})");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text->prompt_text, "hello");
  EXPECT_TRUE(text->add_special_tokens);
  auto ids = completion(R"({"prompt":[1,2,3]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->prompt_ids, (std::vector<uint32_t>{1, 2, 3}));
  auto texts = completion(R"({"prompt":["a","b"]})");
  ASSERT_TRUE(texts.ok());
  EXPECT_EQ(*texts->prompt_text, "a");
  EXPECT_EQ(texts->num_prompts, 2u);
  auto id_lists = completion(R"({"prompt":[[5,6],[7]]})");
  ASSERT_TRUE(id_lists.ok());
  EXPECT_EQ(id_lists->prompt_ids, (std::vector<uint32_t>{5, 6}));
  EXPECT_EQ(id_lists->num_prompts, 2u);
}

TEST(OpenAiRequestTest, RejectsMalformedBodiesWithTheField) {
  std::string param;
  EXPECT_FALSE(chat("not json").ok());
  EXPECT_FALSE(chat("[1,2]").ok());
  auto missing = chat(R"({"model":"m"})", &param);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(param, "messages");
  EXPECT_FALSE(chat(R"({"messages":"hi"})").ok());
  EXPECT_FALSE(chat(R"({"messages":[]})").ok());
  auto bad_role = chat(R"({"messages":[{"content":"x"}]})", &param);
  ASSERT_FALSE(bad_role.ok());
  EXPECT_EQ(param, "messages[0].role");
  EXPECT_FALSE(chat(R"({"messages":[{"role":"user","content":5}]})").ok());
  EXPECT_FALSE(chat(R"({"model":7,"messages":[{"role":"user","content":"x"}]})").ok());
  EXPECT_FALSE(chat(R"({"stream":"yes","messages":[{"role":"user","content":"x"}]})").ok());
  EXPECT_FALSE(completion(R"({})").ok());
  EXPECT_FALSE(completion(R"({"prompt":[-1]})").ok());
  EXPECT_FALSE(completion(R"({"prompt":[4294967296]})").ok());
  EXPECT_FALSE(completion(R"({"prompt":["a",1]})").ok());
  EXPECT_FALSE(completion(R"({"prompt":""})").ok());
  EXPECT_FALSE(completion(R"({"prompt":{}})").ok());
}

TEST(OpenAiRequestTest, EnforcesLimits) {
  RequestLimits limits;
  limits.max_json_depth = 8;
  limits.max_messages = 2;
  limits.max_prompt_tokens = 3;
  std::string deep = R"({"prompt":"x","extra":)" + std::string(20, '[') + std::string(20, ']') + "}";
  auto too_deep = parse_openai_request(ApiKind::kCompletions, deep, limits);
  ASSERT_FALSE(too_deep.ok());
  EXPECT_NE(too_deep.status().message().find("deeper"), std::string::npos);
  EXPECT_FALSE(parse_openai_request(ApiKind::kCompletions, R"({"prompt":[1,2,3,4]})", limits).ok());
  EXPECT_FALSE(parse_openai_request(
                   ApiKind::kChatCompletions,
                   R"({"messages":[{"role":"user"},{"role":"user"},{"role":"user"}]})", limits)
                   .ok());
}

}  // namespace
}  // namespace infera::gateway
