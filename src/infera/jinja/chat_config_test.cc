// ChatTemplate: reading tokenizer_config.json the way transformers does (template selection,
// special tokens, kwargs), from objects and from real files in a temporary directory.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "infera/jinja/chat.h"

namespace infera::jinja {
namespace {

boost::json::object json(std::string_view text) {
  return boost::json::parse(text).as_object();
}

ChatInputs user_says(std::string_view text) {
  ChatInputs in;
  in.messages.push_back(boost::json::object{{"role", "user"}, {"content", text}});
  return in;
}

// A temporary directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("infera_jinja_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  void write(const std::string& name, std::string_view content) const {
    std::ofstream(path_ / name, std::ios::binary) << content;
  }

 private:
  std::filesystem::path path_;
};

TEST(ChatTemplateTest, RendersAStringTemplateWithMessagesAndGenerationPrompt) {
  auto chat = ChatTemplate::from_tokenizer_config(json(R"({
    "chat_template": "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
  })"));
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  ChatInputs in = user_says("hi");
  EXPECT_EQ(*chat->render(in), "<user>hi");
  in.add_generation_prompt = true;
  EXPECT_EQ(*chat->render(in), "<user>hi<assistant>");
}

TEST(ChatTemplateTest, SpecialTokensBecomeVariablesAsInSpecialTokensMap) {
  auto chat = ChatTemplate::from_tokenizer_config(json(R"({
    "chat_template": "{{ bos_token }}|{{ eos_token }}|{{ unk_token is defined }}|{{ pad_token }}|{{ additional_special_tokens }}|{{ image_token }}|{{ sep_token is defined }}",
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
    "eos_token": "</s>",
    "unk_token": null,
    "pad_token": "<pad>",
    "sep_token": "",
    "additional_special_tokens": ["<a>", {"content": "<b>"}],
    "extra_special_tokens": {"image_token": "<img>"},
    "model_max_length": 1024
  })"));
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  EXPECT_EQ(*chat->render(user_says("x")), "<s>|</s>|False|<pad>|['<a>', '<b>']|<img>|False");
  EXPECT_FALSE(chat->special_tokens().contains("model_max_length"));
}

TEST(ChatTemplateTest, TemplateKwargsOverrideSpecialTokensAndReachTheTemplate) {
  auto chat = ChatTemplate::from_tokenizer_config(
      json(R"({"chat_template": "{{ bos_token }} {{ enable_thinking }}", "bos_token": "<s>"})"));
  ASSERT_TRUE(chat.ok());
  ChatInputs in = user_says("x");
  in.template_kwargs = json(R"({"bos_token": "<override>", "enable_thinking": false})");
  EXPECT_EQ(*chat->render(in), "<override> False");
}

TEST(ChatTemplateTest, TemplateKwargsMayNotReplaceTheArguments) {
  auto chat = ChatTemplate::from_tokenizer_config(json(R"({"chat_template": "x"})"));
  ASSERT_TRUE(chat.ok());
  ChatInputs in = user_says("x");
  in.template_kwargs = json(R"({"messages": []})");
  const auto r = chat->render(in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, ToolsAndDocumentsAreNoneUnlessGiven) {
  auto chat = ChatTemplate::from_tokenizer_config(json(
      R"({"chat_template": "{{ tools is none }} {{ documents is none }} {{ tools|length if tools is not none }}"})"));
  ASSERT_TRUE(chat.ok());
  ChatInputs in = user_says("x");
  EXPECT_EQ(*chat->render(in), "True True ");
  in.tools = boost::json::array{};
  EXPECT_EQ(*chat->render(in), "False True 0");
}

TEST(ChatTemplateTest, NamedTemplatesPickToolUseWhenToolsAreGiven) {
  auto chat = ChatTemplate::from_tokenizer_config(json(R"({"chat_template": [
    {"name": "default", "template": "default"},
    {"name": "rag", "template": "rag"},
    {"name": "tool_use", "template": "tools:{{ tools|length }}"}
  ]})"));
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  ChatInputs in = user_says("x");
  EXPECT_EQ(*chat->render(in), "default");
  in.tools = boost::json::array{boost::json::object{{"type", "function"}}};
  EXPECT_EQ(*chat->render(in), "tools:1");
}

TEST(ChatTemplateTest, MissingOrMalformedTemplatesAreErrors) {
  auto none = ChatTemplate::from_tokenizer_config(json(R"({"bos_token": "<s>"})"));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  auto no_default = ChatTemplate::from_tokenizer_config(
      json(R"({"chat_template": [{"name": "rag", "template": "x"}]})"));
  EXPECT_FALSE(no_default.ok());
  auto wrong_type = ChatTemplate::from_tokenizer_config(json(R"({"chat_template": 42})"));
  EXPECT_FALSE(wrong_type.ok());
  auto bad_syntax = ChatTemplate::from_tokenizer_config(json(R"({"chat_template": "{% if %}"})"));
  ASSERT_FALSE(bad_syntax.ok());
  EXPECT_NE(bad_syntax.status().message().find("line 1, column"), std::string::npos);
}

TEST(ChatTemplateTest, FromFileReadsTheConfigAndNamesThePathOnError) {
  TempDir dir;
  dir.write("tokenizer_config.json",
            R"({"chat_template": "[{{ messages[0].content }}]", "eos_token": "</s>"})");
  auto chat = ChatTemplate::from_file(dir.path() / "tokenizer_config.json");
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  EXPECT_EQ(*chat->render(user_says("hello")), "[hello]");

  auto missing = ChatTemplate::from_file(dir.path() / "nope.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.json"), std::string::npos);

  dir.write("broken.json", "{\"chat_template\": ");
  auto broken = ChatTemplate::from_file(dir.path() / "broken.json");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("broken.json"), std::string::npos);
}

TEST(ChatTemplateTest, ChatTemplateJinjaBesideTheConfigWins) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": "from config", "bos_token": "<s>"})");
  dir.write("chat_template.jinja", "{{ bos_token }}from file\n");
  auto chat = ChatTemplate::from_file(dir.path() / "tokenizer_config.json");
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  EXPECT_EQ(*chat->render(user_says("x")), "<s>from file");
}

TEST(ChatTemplateTest, ListContentIsPassedAsGiven) {
  auto chat = ChatTemplate::from_tokenizer_config(json(
      R"({"chat_template": "{% for p in messages[0].content %}{{ p.type }}:{{ p.text }};{% endfor %}"})"));
  ASSERT_TRUE(chat.ok());
  ChatInputs in;
  in.messages.push_back(boost::json::parse(
      R"({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}]})"));
  EXPECT_EQ(*chat->render(in), "text:a;image:;");
}

TEST(ChatTemplateTest, RendersConcurrently) {
  auto chat = ChatTemplate::from_tokenizer_config(json(
      R"({"chat_template": "{% for m in messages %}{{ m.role }}={{ m.content }}{% endfor %}"})"));
  ASSERT_TRUE(chat.ok());
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const std::string text = std::to_string(t * 1000 + i);
        const auto r = chat->render(user_says(text));
        if (!r.ok() || *r != "user=" + text) ++failures[static_cast<size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

}  // namespace
}  // namespace infera::jinja
