#include "infera/gateway/openai_request.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

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

// Media parts key the request's blocks from the first message that has one: the same image
// gives the same digest, another image another, a text-only chat none.
TEST(OpenAiRequestTest, ChatMediaGetADigestAndTheirFirstMessage) {
  const auto body = [](std::string_view url) {
    return R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[)"
           R"({"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":")" +
           std::string(url) + R"("}}]}]})";
  };
  auto a = chat(body("data:image/png;base64,AAAA"));
  auto a2 = chat(body("data:image/png;base64,AAAA"));
  auto b = chat(body("data:image/png;base64,BBBB"));
  auto text = chat(R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]})");
  ASSERT_TRUE(a.ok() && a2.ok() && b.ok() && text.ok());
  EXPECT_NE(a->media_digest, 0u);
  EXPECT_EQ(a->media_digest, a2->media_digest);
  EXPECT_NE(a->media_digest, b->media_digest);
  EXPECT_EQ(a->media_first_message, 1u);
  EXPECT_EQ(text->media_digest, 0u);
}

// The chat prompt is read by tokenizer::parse_chat_prompt, the simulated engine's parser too:
// continue_final_message and a chat's own add_special_tokens reach the prompt, with vLLM's rules.
TEST(OpenAiRequestTest, ChatPromptFieldsFollowTheEnginesRules) {
  auto cont =
      chat(R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"A"}],
                      "continue_final_message":true})");
  ASSERT_TRUE(cont.ok()) << cont.status().to_string();
  EXPECT_TRUE(cont->continue_final_message);
  EXPECT_FALSE(cont->add_generation_prompt);
  auto special = chat(R"({"messages":[{"role":"user","content":"hi"}],"add_special_tokens":true})");
  ASSERT_TRUE(special.ok());
  EXPECT_TRUE(special->add_special_tokens);
  std::string param;
  auto both = chat(R"({"messages":[{"role":"user","content":"hi"}],"continue_final_message":true,
                      "add_generation_prompt":true})",
                   &param);
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(param, "continue_final_message");
  // A wrong type is an error, as in the engine (it used to be ignored here).
  auto wrong =
      chat(R"({"messages":[{"role":"user","content":"hi"}],"continue_final_message":1})", &param);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(param, "continue_final_message");
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

// Completions bodies are read by an event parser, not a DOM; these are the DOM's rules it keeps.
TEST(OpenAiRequestTest, CompletionsKeepTheRulesOfAJsonDocument) {
  std::string param;
  // A later duplicate key replaces an earlier one, errors included.
  auto dup = completion(R"({"prompt":[1,2],"model":5,"prompt":"x","model":"m"})");
  ASSERT_TRUE(dup.ok()) << dup.status().to_string();
  EXPECT_EQ(*dup->prompt_text, "x");
  EXPECT_TRUE(dup->prompt_ids.empty());
  EXPECT_EQ(dup->model, "m");
  // Keys are compared after unescaping; null is absent.
  auto escaped = completion(R"({"pro\u006dpt":[7],"stream":null,"model":null})");
  ASSERT_TRUE(escaped.ok()) << escaped.status().to_string();
  EXPECT_EQ(escaped->prompt_ids, (std::vector<uint32_t>{7}));
  EXPECT_FALSE(escaped->stream);
  EXPECT_FALSE(completion(R"({"prompt":null})").ok());
  // Field errors come in a fixed order whatever the key order.
  auto order = completion(R"({"prompt":{},"stream":1,"model":[]})", &param);
  ASSERT_FALSE(order.ok());
  EXPECT_EQ(param, "model");
  // Invalid JSON after a field error is reported as invalid JSON; so is trailing data.
  auto broken = completion(R"({"model":1,"prompt":[1,)", &param);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("not valid JSON"), std::string::npos);
  EXPECT_FALSE(completion(R"({"prompt":[1]} {})").ok());
  EXPECT_TRUE(completion(" {\"prompt\":[1]} \n").ok());
  // Each prompt shape names its own problem; nested values of other fields are ignored.
  auto mixed = completion(R"({"prompt":[[1,2],[3,"a"]]})", &param);
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().message(), "'prompt' must be token id lists");
  EXPECT_EQ(param, "prompt");
  EXPECT_FALSE(completion(R"({"prompt":[1,2.5]})").ok());
  auto other = completion(R"({"x":{"prompt":5,"model":[1]},"prompt":[3,4],"y":[[1],"z"]})");
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  EXPECT_EQ(other->prompt_ids, (std::vector<uint32_t>{3, 4}));
  EXPECT_EQ(other->num_prompts, 1u);
  EXPECT_FALSE(completion(R"([{"prompt":[1]}])").ok());
}

// Token ids of every length, near the end of the body and far from it (the fast reader reads
// up to 7 digits with one 8-byte load when 8 bytes remain).
TEST(OpenAiRequestTest, ReadsTokenIdsOfEveryLength) {
  std::vector<uint32_t> want;
  std::string ids;
  for (uint64_t v = 1, len = 1; len <= 10; v = v * 10 + (len % 10), ++len) {
    for (uint64_t x : {v, v - 1, v * 9 / 7}) {
      if (x > UINT32_MAX) continue;
      want.push_back(static_cast<uint32_t>(x));
      if (!ids.empty()) ids += ',';
      ids += std::to_string(x);
    }
  }
  for (const std::string& tail : {std::string(), std::string(R"(,"max_tokens":12345678)")}) {
    auto r = completion(R"({"prompt":[)" + ids + "]" + tail + "}");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->prompt_ids, want);
    auto last = completion(R"({"prompt":[)" + ids.substr(ids.rfind(',') + 1) + "]}");
    ASSERT_TRUE(last.ok());
    EXPECT_EQ(last->prompt_ids, std::vector<uint32_t>{want.back()});
  }
  EXPECT_FALSE(completion(R"({"prompt":[4294967296]})").ok());
  EXPECT_FALSE(completion(R"({"prompt":[0123]})").ok());
  EXPECT_FALSE(completion(R"({"prompt":[12345678901234567890123]})").ok());
}

// Random bodies near the shapes clients send, with random damage: the fast reader and Boost.JSON's
// parser must give the same request or the same error for every one.
class BodyGenerator {
 public:
  explicit BodyGenerator(uint64_t seed) : rng_(seed) {}
  std::string body() {
    static constexpr const char* kKeys[] = {"model", "stream", "add_special_tokens", "prompt",
                                            "max_tokens", "pro\\u006dpt", "prompt"};
    std::string s = "{";
    const int fields = pick(6);
    for (int i = 0; i < fields; ++i) {
      if (i > 0) s += ',';
      const int k = pick(7);
      s += std::string("\"") + kKeys[k] + "\":";
      if (k == 3 || k == 6) {
        s += pick(6) < 4 ? array(2, pick(3)) : value(1);
      } else if (k == 0) {
        s += pick(2) ? "\"m\"" : value(1);
      } else {
        s += pick(2) ? (pick(2) ? "true" : "false") : value(1);
      }
    }
    s += '}';
    if (pick(10) == 0) s = "[" + s + "]";
    static constexpr char kDamage[] = "{}[],:\"0123-.eE+ \\x\t\n\x01\xc3\xa9tnu";
    for (int d = pick(2) == 0 ? 0 : 1 + pick(3); d > 0 && !s.empty(); --d) {
      const size_t at = static_cast<size_t>(pick(static_cast<int>(s.size())));
      const char c = kDamage[pick(sizeof(kDamage) - 1)];
      switch (pick(3)) {
        case 0: s.erase(at, 1); break;
        case 1: s.insert(at, 1, c); break;
        default: s[at] = c; break;
      }
    }
    return s;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  std::string scalar() {
    static constexpr const char* kScalars[] = {
        "null", "true", "false", "-1", "4294967295", "4294967296", "1.5", "\"\"", "\"ab\\u00e9\"",
        "18446744073709551616", "01", "1.", "-", ".5", "1e", "-0", "1E+2", "-0.0",
        "999999999999999999", "9999999999999999999", "-12", "0.5e-3", "\"a\\nb\"", "\"\t\"",
        "\"\\u0041\"", "1e999999999", "12345678", "1234567"};
    if (pick(3) == 0) return kScalars[pick(std::size(kScalars))];
    return std::to_string(pick(3) == 0 ? rng_() % 100000000 : rng_() % 200000);
  }
  std::string array(int depth, int kind) {
    std::string s = "[";
    const int n = pick(6);
    for (int i = 0; i < n; ++i) {
      if (i > 0) s += pick(8) == 0 ? ", " : ",";
      const int k = pick(10) < 8 ? kind : pick(4);
      if (k == 0) {
        s += std::to_string(rng_() % 200000);
      } else if (k == 1) {
        s += "\"s" + std::to_string(i) + "\"";
      } else if (k == 2 && depth < 4) {
        s += array(depth + 1, 0);
      } else {
        s += value(depth + 1);
      }
    }
    return s + "]";
  }
  std::string value(int depth) {
    const int r = pick(10);
    if (depth > 5 || r < 5) return scalar();
    if (r < 8) return array(depth, pick(3));
    std::string s = "{";
    for (int i = 0, n = pick(3); i < n; ++i) s += (i > 0 ? ",\"k\":" : "\"k\":") + value(depth + 1);
    return s + "}";
  }
  std::mt19937_64 rng_;
};

// Whether the fast reader gives what Boost.JSON's parser gives for `body`: the same request, or
// the same error naming the same field. Counts the accepted bodies in `accepted`.
::testing::AssertionResult agrees_with_boost(const std::string& body, const RequestLimits& limits,
                                             int* accepted) {
  std::string param_fast, param_boost;
  auto fast = parse_openai_request(ApiKind::kCompletions, body, limits, &param_fast);
  auto boost = detail::parse_completions_by_boost(body, limits, &param_boost);
  if (fast.ok() != boost.ok()) {
    return ::testing::AssertionFailure()
           << "fast " << fast.status().to_string() << ", boost " << boost.status().to_string();
  }
  if (!fast.ok()) {
    if (fast.status().message() != boost.status().message() || param_fast != param_boost) {
      return ::testing::AssertionFailure() << "fast " << fast.status().to_string() << " ("
                                           << param_fast << "), boost "
                                           << boost.status().to_string() << " (" << param_boost
                                           << ")";
    }
    return ::testing::AssertionSuccess();
  }
  ++*accepted;
  if (fast->model != boost->model || fast->stream != boost->stream ||
      fast->add_special_tokens != boost->add_special_tokens ||
      fast->prompt_text != boost->prompt_text || fast->prompt_ids != boost->prompt_ids ||
      fast->num_prompts != boost->num_prompts) {
    return ::testing::AssertionFailure() << "the two parsers read different requests";
  }
  return ::testing::AssertionSuccess();
}

TEST(OpenAiRequestTest, TheFastReaderAgreesWithBoostJsonOnRandomBodies) {
  RequestLimits limits;
  limits.max_json_depth = 6;
  limits.max_prompt_tokens = 4;
  BodyGenerator gen(20261130);
  int accepted = 0;
  for (int i = 0; i < 50000; ++i) {
    const std::string body = gen.body();
    ASSERT_TRUE(agrees_with_boost(body, limits, &accepted)) << body;
  }
  EXPECT_GT(accepted, 2000);  // the bodies reach the accepting paths, not only the errors
}

// The fast reader scans strings eight bytes at a time: whatever ends a string's plain run (its
// closing quote, an escape, a control character, DEL, a non-ASCII byte), at whatever offset
// of a long string, the result is Boost.JSON's.
TEST(OpenAiRequestTest, LongStringsAgreeWithBoostJsonWhateverByteEndsTheirPlainRun) {
  const std::string specials[] = {"\\n", "\\\"", "\\u00e9", "\x01", "\x1f", "\x7f",
                                  "\xc3\xa9", "\xff", "\t", "\"", " ", "~"};
  const RequestLimits limits;
  int accepted = 0;
  for (size_t len = 0; len <= 40; ++len) {
    for (size_t at = 0; at <= len; ++at) {
      for (const std::string& special : specials) {
        std::string text(len, 'a');
        text.insert(at, special);
        const std::string body =
            R"({"model":")" + text + R"(","prompt":")" + text + R"(","stream":false})";
        ASSERT_TRUE(agrees_with_boost(body, limits, &accepted)) << body;
      }
    }
  }
  EXPECT_GT(accepted, 2000);
}

}  // namespace
}  // namespace infera::gateway
