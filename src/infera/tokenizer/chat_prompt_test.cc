#include "infera/tokenizer/chat_prompt.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <string>

namespace infera::tokenizer {
namespace {

namespace json = boost::json;

Result<ChatPrompt> parse(std::string_view body, std::string* param = nullptr,
                         uint32_t max_messages = 100) {
  return parse_chat_prompt(json::parse(body).as_object(), max_messages, param);
}

TEST(ChatPromptTest, ReadsEveryFieldAndIgnoresTheRest) {
  auto c = parse(R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],
                    "tools":[{"type":"function"}],"add_generation_prompt":false,
                    "chat_template_kwargs":{"enable_thinking":false},"add_special_tokens":true,
                    "whatever":1})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->messages.size(), 1u);
  ASSERT_TRUE(c->tools.has_value());
  EXPECT_EQ(c->tools->size(), 1u);
  EXPECT_FALSE(c->add_generation_prompt);
  EXPECT_FALSE(c->continue_final_message);
  EXPECT_FALSE(c->chat_template_kwargs.at("enable_thinking").as_bool());
  EXPECT_TRUE(c->add_special_tokens);
}

TEST(ChatPromptTest, DefaultsAreVllmsAndNullIsAbsent) {
  auto c = parse(R"({"messages":[{"role":"user","content":null}],"tools":null,
                    "add_generation_prompt":null,"continue_final_message":null,
                    "chat_template_kwargs":null,"add_special_tokens":null})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_FALSE(c->tools.has_value());
  EXPECT_TRUE(c->add_generation_prompt);
  EXPECT_FALSE(c->continue_final_message);
  EXPECT_TRUE(c->chat_template_kwargs.empty());
  EXPECT_FALSE(c->add_special_tokens);
}

TEST(ChatPromptTest, ContinueFinalMessageTurnsTheGenerationPromptOff) {
  auto c = parse(R"({"messages":[{"role":"user","content":"hi"}],"continue_final_message":true})");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->continue_final_message);
  EXPECT_FALSE(c->add_generation_prompt);
  auto both_false = parse(R"({"messages":[{"role":"user","content":"hi"}],)"
                          R"("continue_final_message":true,"add_generation_prompt":false})");
  ASSERT_TRUE(both_false.ok());
  EXPECT_FALSE(both_false->add_generation_prompt);
  std::string param;
  auto both = parse(R"({"messages":[{"role":"user","content":"hi"}],)"
                    R"("continue_final_message":true,"add_generation_prompt":true})",
                    &param);
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(param, "continue_final_message");
}

TEST(ChatPromptTest, BadFieldsAreInvalidArgumentNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "messages"},
      {R"({"messages":null})", "messages"},
      {R"({"messages":"hi"})", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[1]})", "messages[0]"},
      {R"({"messages":[{"role":"user"},{"content":"x"}]})", "messages[1].role"},
      {R"({"messages":[{"role":7}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":{}}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user"}],"tools":{}})", "tools"},
      {R"({"messages":[{"role":"user"}],"add_generation_prompt":1})", "add_generation_prompt"},
      {R"({"messages":[{"role":"user"}],"continue_final_message":"yes"})",
       "continue_final_message"},
      {R"({"messages":[{"role":"user"}],"chat_template_kwargs":[]})", "chat_template_kwargs"},
      {R"({"messages":[{"role":"user"}],"add_special_tokens":"no"})", "add_special_tokens"},
  };
  for (const auto& [body, field] : cases) {
    std::string param;
    auto c = parse(body, &param);
    ASSERT_FALSE(c.ok()) << body;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(param, field) << body << ": " << c.status().message();
  }
  std::string param;
  auto too_many = parse(R"({"messages":[{"role":"a"},{"role":"b"},{"role":"c"}]})", &param, 2);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(param, "messages");
}

Result<ResponsesPrompt> responses(std::string_view body, std::string* param = nullptr) {
  return parse_responses_prompt(json::parse(body).as_object(), 4, param);
}

TEST(ResponsesPromptTest, InstructionsAndInputBecomeChatMessagesAsVllmBuildsThem) {
  auto r = responses(R"({"model":"m","instructions":"be brief","input":"hi","store":true})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->chat.has_value());
  EXPECT_EQ(json::serialize(r->chat->messages),
            R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])");
  EXPECT_TRUE(r->chat->add_generation_prompt);
  r = responses(R"({"input":[{"role":"user","content":[{"type":"input_text","text":"a"},
                 {"type":"input_image","image_url":"data:image/png;base64,AA"}]},
                 {"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]}]})");
  ASSERT_TRUE(r.ok() && r->chat.has_value());
  EXPECT_EQ(json::serialize(r->chat->messages),
            R"([{"role":"user","content":[{"type":"text","text":"a"},)"
            R"({"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}}]},)"
            R"({"role":"assistant","content":[{"type":"text","text":"b"}]}])");
}

TEST(ResponsesPromptTest, WhatTheRouterCannotKnowIsRoutedByLoad) {
  auto r = responses(R"({"input":"more","previous_response_id":"resp_1"})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->chat.has_value());
  EXPECT_EQ(r->previous_response_id, "resp_1");
  for (const char* body : {R"({"input":"x","tools":[{"type":"function","name":"f"}]})",
                           R"({"input":[{"type":"function_call_output","call_id":"c","output":"1"}]})",
                           R"({"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]})"}) {
    r = responses(body);
    ASSERT_TRUE(r.ok()) << body;
    EXPECT_FALSE(r->chat.has_value()) << body;
  }
}

TEST(ResponsesPromptTest, BadInputIsInvalidArgumentNamingTheField) {
  std::string param;
  for (const char* body : {R"({"model":"m"})", R"({"input":7})", R"({"input":[]})",
                           R"({"input":[1,2,3,4,5]})", R"({"input":"x","instructions":3})",
                           R"({"input":"x","previous_response_id":5})"}) {
    auto r = responses(body, &param);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_FALSE(param.empty()) << body;
  }
}

TEST(ChatPromptTest, FlattenJoinsTextPartsAndDropsTheOthers) {
  const std::string body =
      R"([{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},)"
      R"({"type":"text","text":"b"}]},{"role":"assistant","content":"c"},)"
      R"({"role":"assistant","content":null},{"role":"user","content":[]}])";
  const json::array messages = json::parse(body).as_array();
  const json::array flat = flatten_content(messages);
  ASSERT_EQ(flat.size(), 4u);
  EXPECT_EQ(flat[0].at("content").as_string(), "a\nb");
  EXPECT_EQ(flat[1].at("content").as_string(), "c");
  EXPECT_TRUE(flat[2].at("content").is_null());
  EXPECT_EQ(flat[3].at("content").as_string(), "");
}

TEST(ChatPromptTest, MediaPartsAreEveryNonTextPartFromTheFirstMessageWithOne) {
  const auto parse = [](std::string_view body) { return json::parse(body).as_array(); };
  EXPECT_EQ(media_parts(parse(R"([{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]}])")).bytes,
            "");
  const std::string with_a =
      R"([{"role":"system","content":"s"},{"role":"user","content":"q"},)"
      R"({"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:A"}}]}])";
  const MediaParts a = media_parts(parse(with_a));
  EXPECT_EQ(a.first_message, 2u);
  EXPECT_EQ(a.bytes, R"({"type":"image_url","image_url":{"url":"data:A"}})" "\n");
  std::string with_b = with_a;
  with_b.replace(with_b.find("data:A"), 6, "data:B");
  EXPECT_NE(media_parts(parse(with_b)).bytes, a.bytes);  // another image, other bytes
  // Audio, parts of unknown types and parts that are not objects count; their order too.
  const MediaParts mixed = media_parts(parse(
      R"([{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x"}},7,{"type":"video_url"}]}])"));
  EXPECT_EQ(mixed.first_message, 0u);
  EXPECT_EQ(mixed.bytes, R"({"type":"input_audio","input_audio":{"data":"x"}})" "\n7\n" R"({"type":"video_url"})" "\n");
}

json::array conversation(std::string_view final_content_json) {
  return json::parse(R"([{"role":"user","content":"hi"},{"role":"assistant","content":)" +
                     std::string(final_content_json) + "}]")
      .as_array();
}

TEST(ChatPromptTest, CutEndsRightAfterTheFinalMessage) {
  auto cut = cut_after_final_message("<|user|>hi<|end|><|assistant|>The answer is<|end|>\n",
                                     conversation(R"("The answer is")"));
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(*cut, "<|user|>hi<|end|><|assistant|>The answer is");
  EXPECT_FALSE(cut_after_final_message("nothing here", conversation(R"("The answer is")")).ok());
}

// transformers keeps the message's trailing whitespace when the template kept it, and cuts at
// the stripped text when the template dropped it.
TEST(ChatPromptTest, CutKeepsTrailingWhitespaceOnlyWhereTheTemplateKeptIt) {
  auto kept =
      cut_after_final_message("<a>The answer is <end>", conversation(R"("The answer is ")"));
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, "<a>The answer is ");
  auto trimmed =
      cut_after_final_message("<a>The answer is<end>", conversation(R"("The answer is ")"));
  ASSERT_TRUE(trimmed.ok());
  EXPECT_EQ(*trimmed, "<a>The answer is");
  auto leading = cut_after_final_message("<a>\n Answer \n<end>", conversation(R"("\n Answer \n")"));
  ASSERT_TRUE(leading.ok());
  EXPECT_EQ(*leading, "<a>\n Answer");
}

TEST(ChatPromptTest, CutUsesTheLastTextPartAndNeedsOne) {
  auto cut = cut_after_final_message(
      "<a>one two<end>",
      conversation(R"([{"type":"text","text":"one"},{"type":"text","text":"two"}])"));
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(*cut, "<a>one two");
  EXPECT_FALSE(cut_after_final_message("<a><end>", conversation(R"([{"type":"image_url"}])")).ok());
  // Nothing to continue: the prompt stays as rendered.
  auto empty = cut_after_final_message("<a><end>", conversation("null"));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "<a><end>");
}

}  // namespace
}  // namespace infera::tokenizer
