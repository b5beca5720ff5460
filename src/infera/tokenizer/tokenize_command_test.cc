// `infera tokenize`'s line protocol on the real Qwen3 files: text and chat lines give the
// PromptEncoder's ids (and the rendered prompt for chat); a bad line gives an error line, the
// following lines still work, and the exit status says something failed.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdio>
#include <sstream>
#include <string>

#include "infera/tokenizer/prompt_encoder.h"
#include "infera/tokenizer/tokenize_command.h"

namespace infera::tokenizer {
namespace {

namespace json = boost::json;

std::vector<json::object> run(const PromptEncoder& enc, bool special, const std::string& input,
                              int* rc) {
  std::FILE* in = fmemopen(const_cast<char*>(input.data()), input.size(), "r");
  std::FILE* out = std::tmpfile();
  *rc = tokenize_lines(enc, special, in, out);
  std::fclose(in);
  std::rewind(out);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, out)) > 0) text.append(buf, n);
  std::fclose(out);
  std::vector<json::object> lines;
  std::istringstream s(text);
  std::string line;
  while (std::getline(s, line)) lines.push_back(json::parse(line).as_object());
  return lines;
}

std::vector<TokenId> ids_of(const json::object& o) {
  std::vector<TokenId> ids;
  for (const auto& v : o.at("ids").as_array()) ids.push_back(static_cast<TokenId>(v.as_int64()));
  return ids;
}

TEST(TokenizeCommandTest, TextAndChatLinesMatchThePromptEncoder) {
  auto enc = PromptEncoder::load(std::string(INFERA_MODELS_DIR) + "/qwen3");
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  const std::string input =
      R"({"text": "Hello world, this is infera."})"
      "\n\n"
      R"({"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": {"enable_thinking": false}})"
      "\n";
  int rc = -1;
  auto lines = run(**enc, false, input, &rc);
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(lines.size(), 2u);  // the blank line is skipped
  EXPECT_EQ(ids_of(lines[0]), (*enc)->encode_text("Hello world, this is infera.", false)->ids);
  EXPECT_FALSE(lines[0].contains("prompt"));

  ChatPrompt prompt;
  prompt.messages = json::array{json::object{{"role", "user"}, {"content", "Hi"}}};
  prompt.chat_template_kwargs = json::object{{"enable_thinking", false}};
  auto chat = (*enc)->encode_chat(prompt);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(ids_of(lines[1]), chat->ids);
  EXPECT_EQ(lines[1].at("prompt").as_string(), chat->rendered);
  EXPECT_NE(chat->rendered.find("<|im_start|>user\nHi<|im_end|>"), std::string::npos);
}

TEST(TokenizeCommandTest, BadLinesGiveErrorsAndTheRestStillWorks) {
  auto enc = PromptEncoder::load(std::string(INFERA_MODELS_DIR) + "/qwen3");
  ASSERT_TRUE(enc.ok());
  const std::string input = "not json\n{\"text\": 5}\n{\"other\": 1}\n{\"text\": \"ok\"}\n";
  int rc = 0;
  auto lines = run(**enc, false, input, &rc);
  EXPECT_EQ(rc, 1);
  ASSERT_EQ(lines.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(lines[static_cast<size_t>(i)].contains("error")) << i;
  EXPECT_EQ(ids_of(lines[3]), (*enc)->encode_text("ok", false)->ids);
}

// OpenAI's list-of-parts content renders like the joined string for a template that expects
// strings (Qwen3), as vLLM does; Gemma 3's template loops over parts itself.
TEST(TokenizeCommandTest, ListOfPartsContentIsFlattenedForStringTemplates) {
  for (const char* model : {"qwen3", "gemma3"}) {
    auto enc = PromptEncoder::load(std::string(INFERA_MODELS_DIR) + "/" + model);
    ASSERT_TRUE(enc.ok()) << model;
    ChatPrompt parts;
    parts.messages = json::array{
        json::object{{"role", "user"},
                     {"content", json::array{json::object{{"type", "text"}, {"text", "Hello"}},
                                             json::object{{"type", "text"}, {"text", "world"}}}}}};
    ChatPrompt plain;
    plain.messages = json::array{json::object{{"role", "user"}, {"content", "Hello\nworld"}}};
    auto a = (*enc)->encode_chat(parts);
    auto b = (*enc)->encode_chat(plain);
    ASSERT_TRUE(a.ok()) << model << ": " << a.status().to_string();
    ASSERT_TRUE(b.ok()) << model;
    if (std::string(model) == "qwen3") {
      EXPECT_EQ(a->rendered, b->rendered);
    } else {
      EXPECT_NE(a->rendered.find("Hello"), std::string::npos);
      EXPECT_NE(a->rendered.find("world"), std::string::npos);
    }
  }
}

// continue_final_message ends the prompt inside the final (assistant) message, as transformers
// does; a chat line reads it like a chat request.
TEST(TokenizeCommandTest, ContinueFinalMessageEndsInsideTheFinalMessage) {
  auto enc = PromptEncoder::load(std::string(INFERA_MODELS_DIR) + "/qwen3");
  ASSERT_TRUE(enc.ok());
  ChatPrompt prompt;
  prompt.messages = json::parse(R"([{"role":"user","content":"Name a colour."},)"
                                R"({"role":"assistant","content":"My favourite is"}])")
                        .as_array();
  prompt.add_generation_prompt = false;
  auto closed = (*enc)->encode_chat(prompt);
  prompt.continue_final_message = true;
  auto open = (*enc)->encode_chat(prompt);
  ASSERT_TRUE(closed.ok() && open.ok()) << open.status().to_string();
  EXPECT_TRUE(open->rendered.ends_with("My favourite is")) << open->rendered;
  EXPECT_TRUE(closed->rendered.starts_with(open->rendered));
  EXPECT_LT(open->ids.size(), closed->ids.size());
  EXPECT_EQ(open->ids, (*enc)->encode_text(open->rendered, false)->ids);

  const std::string input =
      R"({"messages": [{"role":"user","content":"Name a colour."},)"
      R"({"role":"assistant","content":"My favourite is"}], "continue_final_message": true})"
      "\n";
  int rc = -1;
  auto lines = run(**enc, false, input, &rc);
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(ids_of(lines[0]), open->ids);
}

// A chat prompt's add_special_tokens adds the post-processor's tokens on top of the template's
// (Gemma 3: a second <bos>), as vLLM does; by default it adds none.
TEST(TokenizeCommandTest, ChatAddSpecialTokensAddsThePostProcessorsTokens) {
  auto enc = PromptEncoder::load(std::string(INFERA_MODELS_DIR) + "/gemma3");
  ASSERT_TRUE(enc.ok());
  ChatPrompt prompt;
  prompt.messages = json::parse(R"([{"role":"user","content":"Hi"}])").as_array();
  auto plain = (*enc)->encode_chat(prompt);
  prompt.add_special_tokens = true;
  auto special = (*enc)->encode_chat(prompt);
  ASSERT_TRUE(plain.ok() && special.ok());
  const auto bos = (*enc)->tokenizer().token_to_id("<bos>");
  ASSERT_TRUE(bos.has_value());
  ASSERT_EQ(special->ids.size(), plain->ids.size() + 1);
  EXPECT_EQ(special->ids[0], *bos);
  EXPECT_EQ(std::vector<TokenId>(special->ids.begin() + 1, special->ids.end()), plain->ids);
}

}  // namespace
}  // namespace infera::tokenizer
