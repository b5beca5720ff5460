// Renders compared byte for byte with Debian's python3-jinja2 in transformers' environment:
// the real Qwen3 / Llama 3 / Gemma 3 chat templates (fixture tokenizer_models) on
// tests/testdata/chat/conversations.json, and the small templates of
// tests/testdata/chat/template_cases.json. Expectations: tests/testdata/chat/expected/, made by
// tests/tools/chat/make_expectations.py.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "infera/jinja/chat.h"
#include "infera/jinja/template.h"

namespace infera::jinja {
namespace {

const std::filesystem::path kChatData = std::filesystem::path(INFERA_TESTDATA_DIR) / "chat";

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

boost::json::value read_json(const std::filesystem::path& path) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(read_file(path), ec);
  EXPECT_FALSE(ec) << path << ": " << ec.message();
  return v;
}

std::string escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out;
}

// "first difference at byte N (line L, column C): expected '...' got '...'" with context.
std::string first_difference(const std::string& expected, const std::string& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  size_t line = 1;
  size_t column = 1;
  for (size_t k = 0; k < i; ++k) {
    if (expected[k] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  const size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) + " (line " + std::to_string(line) +
         ", column " + std::to_string(column) + ")\n  context:  '" +
         escaped(expected.substr(from, i - from)) + "'\n  expected: '" +
         escaped(expected.substr(i, 60)) + "'\n  actual:   '" + escaped(actual.substr(i, 60)) +
         "'\n  sizes: expected " + std::to_string(expected.size()) + ", actual " +
         std::to_string(actual.size());
}

std::map<std::string, boost::json::object> by_name(const boost::json::value& expected) {
  std::map<std::string, boost::json::object> out;
  for (const auto& r : expected.at("renders").as_array()) {
    out[std::string(r.at("name").as_string())] = r.as_object();
  }
  return out;
}

// Checks one render against its expectation; returns true when it matches.
bool matches(const std::string& name, const Result<std::string>& actual,
             const boost::json::object& want) {
  if (const auto* output = want.if_contains("output")) {
    if (!actual.ok()) {
      ADD_FAILURE() << name << ": expected a render, got error " << actual.status().to_string();
      return false;
    }
    const std::string expected(output->as_string());
    if (*actual != expected) {
      ADD_FAILURE() << name << ": " << first_difference(expected, *actual);
      return false;
    }
    return true;
  }
  const std::string error(want.at("error").as_string());
  const std::string message(want.at("message").as_string());
  if (actual.ok()) {
    ADD_FAILURE() << name << ": expected " << error << " (" << message << "), got a render:\n"
                  << *actual;
    return false;
  }
  if (error == "raise_exception") {  // the template's message is carried verbatim
    EXPECT_EQ(actual.status().code(), StatusCode::kInvalidArgument) << name;
    if (actual.status().message() != message) {
      ADD_FAILURE() << name << ": raise_exception message\n  expected: " << message
                    << "\n  actual:   " << actual.status().message();
      return false;
    }
  }
  return true;
}

class ChatGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatGoldenTest, RendersMatchPythonJinja2) {
  const std::string model = GetParam();
  const std::filesystem::path dir = std::filesystem::path(INFERA_MODELS_DIR) / model;
  const boost::json::value expected = read_json(kChatData / "expected" / (model + ".json"));
  ASSERT_EQ(std::string(expected.at("source").as_string()), read_file(dir / ".source"))
      << "the extracted tokenizer changed: re-run tests/tools/chat/make_expectations.py";
  auto chat = ChatTemplate::from_file(dir / "tokenizer_config.json");
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();

  const auto want = by_name(expected);
  const boost::json::value conversations = read_json(kChatData / "conversations.json");
  size_t checked = 0;
  size_t passed = 0;
  for (const auto& c : conversations.as_array()) {
    const auto& conv = c.as_object();
    const std::string name(conv.at("name").as_string());
    ChatInputs inputs;
    inputs.messages = conv.at("messages").as_array();
    if (const auto* tools = conv.if_contains("tools")) inputs.tools = tools->as_array();
    inputs.add_generation_prompt = conv.at("add_generation_prompt").as_bool();
    if (const auto* kw = conv.if_contains("template_kwargs"))
      inputs.template_kwargs = kw->as_object();
    ASSERT_TRUE(want.count(name)) << name << " has no expectation: re-run make_expectations.py";
    ++checked;
    passed += matches(model + "/" + name, chat->render(inputs), want.at(name)) ? 1 : 0;
  }
  EXPECT_EQ(checked, want.size());
  EXPECT_GE(checked, 30u);
  EXPECT_EQ(passed, checked) << model << ": " << passed << " of " << checked
                             << " renders identical";
}

INSTANTIATE_TEST_SUITE_P(RealTemplates, ChatGoldenTest,
                         ::testing::Values("qwen3", "llama3", "gemma3"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(TemplateGoldenTest, SmallTemplatesMatchPythonJinja2) {
  const auto want = by_name(read_json(kChatData / "expected" / "templates.json"));
  const boost::json::value cases = read_json(kChatData / "template_cases.json");
  size_t checked = 0;
  size_t passed = 0;
  for (const auto& c : cases.as_array()) {
    const auto& tc = c.as_object();
    const std::string name(tc.at("name").as_string());
    const std::string source =
        read_file(kChatData / "templates" / std::string(tc.at("template").as_string()));
    auto t = Template::parse(source);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().to_string();
    ASSERT_TRUE(want.count(name)) << name << " has no expectation: re-run make_expectations.py";
    ++checked;
    passed += matches(name, t->render(tc.at("context").as_object()), want.at(name)) ? 1 : 0;
  }
  EXPECT_EQ(checked, want.size());
  EXPECT_EQ(passed, checked) << passed << " of " << checked << " renders identical";
}

}  // namespace
}  // namespace infera::jinja
