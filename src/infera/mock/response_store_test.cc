#include "infera/mock/response_store.h"

#include <gtest/gtest.h>

#include <boost/json/object.hpp>
#include <string>

#include "infera/mock/openai_api.h"

namespace infera::mock {
namespace {

namespace json = boost::json;

json::array conversation(const std::string& text) {
  return json::array{json::object{{"role", "user"}, {"content", text}}};
}

TEST(ResponseStoreTest, FindsWhatWasPutAndNothingElse) {
  ResponseStore store;
  store.put("resp_a", conversation("a"));
  auto found = store.find("resp_a");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->at(0).at("content").as_string(), "a");
  EXPECT_FALSE(store.find("resp_b").has_value());
}

TEST(ResponseStoreTest, EvictsTheOldestWhenFull) {
  ResponseStore store(3);
  for (int i = 0; i < 5; ++i) store.put("resp_" + std::to_string(i), conversation("x"));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_FALSE(store.find("resp_0").has_value());
  EXPECT_FALSE(store.find("resp_1").has_value());
  EXPECT_TRUE(store.find("resp_2").has_value());
  EXPECT_TRUE(store.find("resp_4").has_value());
}

TEST(ResponsesRequestTest, PreviousResponseIdKeepsTheNewTurnsMessages) {
  std::string param;
  auto r = parse_responses_request(
      R"({"model":"m","input":"next","instructions":"sys","previous_response_id":"resp_1",)"
      R"("max_output_tokens":7,"store":false,"ignore_eos":true,"unknown_field":[1]})",
      &param);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->previous_response_id, "resp_1");
  EXPECT_EQ(r->num_instructions, 1u);
  EXPECT_FALSE(r->store);
  EXPECT_EQ(r->generate.max_tokens.value_or(0), 7u);
  EXPECT_TRUE(r->generate.ignore_eos);
  EXPECT_EQ(r->generate.kind, ApiKind::kChat);
  ASSERT_EQ(r->generate.chat.messages.size(), 2u);
  EXPECT_EQ(r->generate.chat.messages[0].at("role").as_string(), "system");
  EXPECT_EQ(r->generate.chat.messages[1].at("content").as_string(), "next");
}

TEST(EmbeddingTest, DeterministicUnitLengthAndSensitiveToEveryId) {
  const std::vector<engine::TokenId> a = {1, 2, 3};
  const std::vector<engine::TokenId> b = {1, 2, 4};
  const std::vector<float> va = mock_embedding(a, 32);
  EXPECT_EQ(va, mock_embedding(a, 32));
  EXPECT_NE(va, mock_embedding(b, 32));
  double n = 0;
  for (const float x : va) n += static_cast<double>(x) * static_cast<double>(x);
  EXPECT_NEAR(n, 1.0, 1e-5);
  EXPECT_EQ(mock_embedding(a, 4096).size(), 4096u);
}

}  // namespace
}  // namespace infera::mock
