#include "infera/mock/text_codec.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "infera/common/metrics.h"
#include "infera/mock/vllm_metrics.h"

namespace infera::mock {

using engine::EngineConfig;
using engine::TokenId;

namespace {

namespace json = boost::json;

TEST(SyntheticCodecTest, OneIdPerWordDeterministic) {
  auto codec = make_synthetic_codec(32000, 2);
  const auto a = codec->encode("Hello world, hello  again\n", true);
  EXPECT_EQ(a.size(), 5u);  // "Hello", " world,", " hello", "  again", "\n"
  EXPECT_EQ(a, codec->encode("Hello world, hello  again\n", false));
  for (const TokenId id : a) {
    EXPECT_LT(id, 32000u);
    EXPECT_NE(id, 2u);  // never the EOS id
  }
  // A shared prefix gives shared leading ids (what prefix caching needs).
  const auto b = codec->encode("Hello world, goodbye", true);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_EQ(a[1], b[1]);
  EXPECT_TRUE(codec->encode("", true).empty());
}

TEST(SyntheticCodecTest, DecodesWordsAndSkipsEos) {
  auto codec = make_synthetic_codec(32000, 2);
  const TokenId ids[] = {0, 2, 1};
  EXPECT_EQ(codec->decode(ids), " the of");
  EXPECT_TRUE(codec->token_string(5).has_value());
  EXPECT_FALSE(codec->token_string(40000).has_value());
}

TEST(SyntheticCodecTest, EncodesChatAsChatMl) {
  auto codec = make_synthetic_codec(32000, 2);
  tokenizer::ChatPrompt chat;
  chat.messages = json::parse(R"([{"role":"system","content":"be brief"},)"
                              R"({"role":"user","content":[{"type":"text","text":"hi"},)"
                              R"({"type":"text","text":"there"}]}])")
                      .as_array();
  auto ids = codec->encode_chat(chat);
  ASSERT_TRUE(ids.ok());
  // List content is flattened as for a template that expects strings: text parts joined by '\n'.
  EXPECT_EQ(*ids, codec->encode("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi\n"
                                "there<|im_end|>\n<|im_start|>assistant\n",
                                false));
  chat.messages = json::parse(R"([{"content":"no role"}])").as_array();
  EXPECT_FALSE(codec->encode_chat(chat).ok());
}

TEST(SyntheticCodecTest, ContinuesTheFinalMessage) {
  auto codec = make_synthetic_codec(32000, 2);
  tokenizer::ChatPrompt chat;
  chat.messages = json::parse(R"([{"role":"user","content":"hi"},)"
                              R"({"role":"assistant","content":"The answer is"}])")
                      .as_array();
  chat.add_generation_prompt = false;
  chat.continue_final_message = true;
  auto ids = codec->encode_chat(chat);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(
      *ids,
      codec->encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nThe answer is", false));
}

TEST(OutputDetokenizerTest, SyntheticTokensStreamOneWordEach) {
  auto codec = make_synthetic_codec(32000, 2);
  OutputDetokenizer d(*codec);
  EXPECT_EQ(d.next(3), " to");
  EXPECT_EQ(d.next(2), "");  // EOS
  EXPECT_EQ(d.flush(), "");
}

TEST(OutputDetokenizerTest, HoldsBackIncompleteUtf8) {
  // The real tokenizers are tested in the server test; here a codec whose tokens are raw bytes.
  class ByteCodec final : public TextCodec {
   public:
    std::vector<TokenId> encode(std::string_view, bool) const override { return {}; }
    Result<std::vector<TokenId>> encode_chat(const tokenizer::ChatPrompt&) const override {
      return invalid_argument("none");
    }
    std::string decode(std::span<const TokenId> ids) const override {
      std::string s;
      for (TokenId id : ids) s.push_back(static_cast<char>(id));
      return s;
    }
    std::optional<std::string> token_string(TokenId) const override { return std::nullopt; }
    uint32_t vocab_size() const override { return 256; }
    TokenId eos_token_id() const override { return 0; }
    std::string describe() const override { return "bytes"; }
  } codec;
  OutputDetokenizer d(codec);
  // "é" is C3 A9; "€" is E2 82 AC.
  EXPECT_EQ(d.next('a'), "a");
  EXPECT_EQ(d.next(0xC3), "");
  EXPECT_EQ(d.next(0xA9), "\xC3\xA9");
  EXPECT_EQ(d.next(0xE2), "");
  EXPECT_EQ(d.next(0x82), "");
  EXPECT_EQ(d.next(0xAC), "\xE2\x82\xAC");
  EXPECT_EQ(d.next(0xE2), "");
  EXPECT_EQ(d.flush(), "\xE2");  // the end of the request releases what was held back
  // Many tokens: the window is trimmed but the text stays exact.
  OutputDetokenizer long_run(codec);
  std::string all;
  for (int i = 0; i < 500; ++i) all += long_run.next(static_cast<TokenId>('a' + i % 26));
  all += long_run.flush();
  ASSERT_EQ(all.size(), 500u);
  EXPECT_EQ(all[499], static_cast<char>('a' + 499 % 26));
}

TEST(VllmMetricsTest, ExposesVllmNamesAndBlockSize) {
  metrics::Registry registry;
  EngineConfig config;
  config.block_size = 32;
  config.num_gpu_blocks = 100;
  RunnerSnapshot snap;
  snap.engine.num_running = 3;
  snap.engine.num_waiting = 4;
  snap.engine.kv_cache_usage = 0.25;
  snap.engine.prefix_cache_queries = 100;
  snap.engine.prefix_cache_hits = 64;
  snap.engine.requests_finished_stop = 2;
  const metrics::Labels labels = {{"model_name", "m"}, {"engine", "0"}};
  add_vllm_collector(registry, [&] { return snap; }, config, labels);
  auto samples = metrics::parse_text(registry.render());
  ASSERT_TRUE(samples.ok()) << samples.status().to_string();
  using metrics::sum_of;
  EXPECT_EQ(sum_of(*samples, "vllm:num_requests_running"), 3);
  EXPECT_EQ(sum_of(*samples, "vllm:num_requests_waiting"), 4);
  EXPECT_EQ(sum_of(*samples, "vllm:kv_cache_usage_perc"), 0.25);
  EXPECT_EQ(sum_of(*samples, "vllm:prefix_cache_queries_total"), 100);
  EXPECT_EQ(sum_of(*samples, "vllm:prefix_cache_hits_total"), 64);
  EXPECT_EQ(sum_of(*samples, "vllm:request_success_total", {{"finished_reason", "stop"}}), 2);
  EXPECT_EQ(sum_of(*samples, "vllm:num_requests_running", {{"model_name", "m"}}), 3);
  bool found = false;
  for (const auto& s : *samples) {
    if (s.name != "vllm:cache_config_info") continue;
    found = true;
    EXPECT_EQ(s.label("block_size"), "32");
    EXPECT_EQ(s.label("num_gpu_blocks"), "100");
    EXPECT_EQ(s.value, 1.0);
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace infera::mock
