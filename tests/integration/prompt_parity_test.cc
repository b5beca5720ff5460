// One prompt path (issue 21): for the same request body, the token ids the simulated engine
// computes (mock::parse_generate_request, then mock::prepare_prompts through the tokenizer
// codec, as `infera engine mock --tokenizer` runs them; and its /tokenize parse) equal the ids
// the gateway hashes (gateway::parse_openai_request, then gateway::encode_prompt), on the real
// tokenizer files of the tokenizer_models fixture: Qwen3 and Llama 3 (templates that expect
// string content: list-of-parts content is flattened) and Gemma 3 (a template that loops over
// the parts). No sockets: both parsers and encoders run in this process.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "infera/gateway/openai_request.h"
#include "infera/mock/openai_api.h"
#include "infera/mock/text_codec.h"
#include "infera/tokenizer/prompt_encoder.h"

namespace infera {
namespace {

const std::string kModelsDir = INFERA_MODELS_DIR;

struct Model {
  std::unique_ptr<mock::TextCodec> codec;             // the engine's
  std::unique_ptr<tokenizer::PromptEncoder> encoder;  // the gateway's
};

Model load(const std::string& name) {
  Model m;
  auto codec = mock::load_tokenizer_codec(kModelsDir + "/" + name);
  EXPECT_TRUE(codec.ok()) << name << ": " << codec.status().to_string();
  if (codec.ok()) m.codec = std::move(*codec);
  auto encoder = tokenizer::PromptEncoder::load(kModelsDir + "/" + name);
  EXPECT_TRUE(encoder.ok()) << name << ": " << encoder.status().to_string();
  if (encoder.ok()) m.encoder = std::move(*encoder);
  return m;
}

Result<std::vector<uint32_t>> engine_ids(const mock::TextCodec& codec, bool chat,
                                         const std::string& body) {
  std::string param;
  INFERA_ASSIGN_OR_RETURN(
      mock::GenerateRequest r,
      mock::parse_generate_request(chat ? mock::ApiKind::kChat : mock::ApiKind::kCompletions, body,
                                   &param));
  INFERA_ASSIGN_OR_RETURN(std::vector<mock::PreparedPrompt> prompts,
                          mock::prepare_prompts(codec, r, &param));
  return std::move(prompts.at(0).ids);
}

// The engine's POST /tokenize of a chat body (mock_server.cc: parse, then encode_chat).
Result<std::vector<uint32_t>> engine_tokenize_ids(const mock::TextCodec& codec,
                                                  const std::string& body) {
  INFERA_ASSIGN_OR_RETURN(mock::TokenizeRequest r, mock::parse_tokenize_request(body));
  return codec.encode_chat(r.chat);
}

Result<std::vector<uint32_t>> gateway_ids(const tokenizer::PromptEncoder& encoder, bool chat,
                                          const std::string& body) {
  std::string param;
  INFERA_ASSIGN_OR_RETURN(gateway::OpenAiRequest r,
                          gateway::parse_openai_request(chat ? gateway::ApiKind::kChatCompletions
                                                             : gateway::ApiKind::kCompletions,
                                                        body, {}, &param));
  return gateway::encode_prompt(encoder, r);
}

struct Case {
  const char* name;
  std::string body;  // the prompt's fields only, so that /tokenize takes a chat body as well
};

std::vector<Case> chat_cases() {
  const std::string convo = R"([{"role":"system","content":"You are terse."},)"
                            R"({"role":"user","content":"What is a KV cache?"}])";
  return {
      {"string content", R"({"model":"m","messages":)" + convo + "}"},
      {"one text part",
       R"({"messages":[{"role":"user","content":[{"type":"text","text":"What is a KV cache?"}]}]})"},
      {"several text parts",
       R"({"messages":[{"role":"system","content":[{"type":"text","text":"Be terse."}]},)"
       R"({"role":"user","content":[{"type":"text","text":"What is"},)"
       R"({"type":"text","text":"a KV cache?"}]}]})"},
      {"continue_final_message without the generation prompt",
       R"({"messages":[{"role":"user","content":"Name a colour."},)"
       R"({"role":"assistant","content":"My favourite colour is"}],)"
       R"("add_generation_prompt":false,"continue_final_message":true})"},
      {"continue_final_message alone",
       R"({"messages":[{"role":"user","content":"Name a colour."},)"
       R"({"role":"assistant","content":"My favourite colour is "}],)"
       R"("continue_final_message":true})"},
      {"continue_final_message on text parts",
       R"({"messages":[{"role":"user","content":"Name a colour."},)"
       R"({"role":"assistant","content":[{"type":"text","text":"Well,"},)"
       R"({"type":"text","text":"my favourite is"}]}],"continue_final_message":true})"},
      {"tools",
       R"({"messages":)" + convo +
           R"(,"tools":[{"type":"function","function":{"name":"lookup","description":"Look up a )"
           R"(term","parameters":{"type":"object","properties":{"term":{"type":"string"}}}}}]})"},
      {"chat_template_kwargs",
       R"({"messages":)" + convo + R"(,"chat_template_kwargs":{"enable_thinking":false}})"},
      {"no generation prompt", R"({"messages":)" + convo + R"(,"add_generation_prompt":false})"},
      {"add_special_tokens", R"({"messages":)" + convo + R"(,"add_special_tokens":true})"},
  };
}

// Each model is loaded once for the suite (a Debug build takes seconds per load).
class PromptParityTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* name : {"qwen3", "llama3", "gemma3"}) models_[name] = load(name);
  }
  static void TearDownTestSuite() { models_.clear(); }
  static const Model& model(const std::string& name) { return models_.at(name); }

 private:
  static std::map<std::string, Model> models_;
};
std::map<std::string, Model> PromptParityTest::models_;

TEST_F(PromptParityTest, ChatRequestsGiveTheEnginesIdsInTheGateway) {
  for (const char* name : {"qwen3", "llama3", "gemma3"}) {
    const Model& m = model(name);
    ASSERT_TRUE(m.codec && m.encoder) << name;
    ASSERT_TRUE(m.encoder->has_chat_template()) << name;
    for (const Case& c : chat_cases()) {
      SCOPED_TRACE(std::string(name) + ": " + c.name);
      auto from_engine = engine_ids(*m.codec, true, c.body);
      auto from_tokenize = engine_tokenize_ids(*m.codec, c.body);
      auto from_gateway = gateway_ids(*m.encoder, true, c.body);
      ASSERT_TRUE(from_engine.ok()) << from_engine.status().to_string();
      ASSERT_TRUE(from_tokenize.ok()) << from_tokenize.status().to_string();
      ASSERT_TRUE(from_gateway.ok()) << from_gateway.status().to_string();
      EXPECT_FALSE(from_gateway->empty());
      EXPECT_EQ(*from_engine, *from_gateway);
      EXPECT_EQ(*from_tokenize, *from_gateway);
    }
  }
}

// The cases above exercise what they claim: the parts, the cut and the extra special tokens
// change the ids (or, for parts on a string template, equal the joined string's).
TEST_F(PromptParityTest, TheChatCasesChangeThePrompt) {
  const Model& qwen = model("qwen3");
  ASSERT_TRUE(qwen.encoder);
  auto ids = [&](const std::string& body) {
    auto r = gateway_ids(*qwen.encoder, true, body);
    EXPECT_TRUE(r.ok()) << body << ": " << r.status().to_string();
    return r.ok() ? *r : std::vector<uint32_t>{};
  };
  EXPECT_EQ(ids(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},)"
                R"({"type":"text","text":"b"}]}]})"),
            ids(R"({"messages":[{"role":"user","content":"a\nb"}]})"));
  const std::string turns = R"([{"role":"user","content":"Name a colour."},)"
                            R"({"role":"assistant","content":"My favourite colour is"}])";
  const auto closed = ids(R"({"messages":)" + turns + R"(,"add_generation_prompt":false})");
  const auto open = ids(R"({"messages":)" + turns + R"(,"continue_final_message":true})");
  ASSERT_LT(open.size(), closed.size());
  EXPECT_TRUE(std::equal(open.begin(), open.end(), closed.begin()));  // the end of turn is cut

  const Model& gemma = model("gemma3");
  ASSERT_TRUE(gemma.encoder);
  auto plain =
      gateway_ids(*gemma.encoder, true, R"({"messages":[{"role":"user","content":"Hi"}]})");
  auto special =
      gateway_ids(*gemma.encoder, true,
                  R"({"messages":[{"role":"user","content":"Hi"}],"add_special_tokens":true})");
  ASSERT_TRUE(plain.ok() && special.ok());
  EXPECT_EQ(special->size(), plain->size() + 1);  // a second <bos>
}

TEST_F(PromptParityTest, CompletionsPromptsGiveTheEnginesIdsInTheGateway) {
  const Model& m = model("llama3");
  ASSERT_TRUE(m.codec && m.encoder);
  const std::string cases[] = {
      R"({"model":"m","prompt":"The KV cache holds the keys and values of past tokens."})",
      R"({"prompt":"The KV cache","add_special_tokens":false})",
      R"({"prompt":["first prompt routes the batch","second"]})",
      R"({"prompt":[791,85748,6636]})",
      R"({"prompt":[[791,85748],[6636]]})",
  };
  for (const std::string& body : cases) {
    SCOPED_TRACE(body);
    auto from_engine = engine_ids(*m.codec, false, body);
    auto from_gateway = gateway_ids(*m.encoder, false, body);
    ASSERT_TRUE(from_engine.ok()) << from_engine.status().to_string();
    ASSERT_TRUE(from_gateway.ok()) << from_gateway.status().to_string();
    EXPECT_EQ(*from_engine, *from_gateway);
  }
}

// Both sides refuse the same chat prompts, naming the same field.
TEST_F(PromptParityTest, BothRejectTheSameChatPrompts) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"messages":[{"content":"no role"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user","content":7}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":"x"}],"continue_final_message":true,)"
       R"("add_generation_prompt":true})",
       "continue_final_message"},
      {R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[]})",
       "chat_template_kwargs"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":"none"})", "tools"},
  };
  for (const auto& [body, field] : cases) {
    SCOPED_TRACE(body);
    std::string engine_param, gateway_param;
    auto e = mock::parse_generate_request(mock::ApiKind::kChat, body, &engine_param);
    auto g =
        gateway::parse_openai_request(gateway::ApiKind::kChatCompletions, body, {}, &gateway_param);
    ASSERT_FALSE(e.ok());
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(e.status().message(), g.status().message());
    EXPECT_EQ(engine_param, field);
    EXPECT_EQ(gateway_param, field);
  }
}

}  // namespace
}  // namespace infera
