#include "infera/engine/output_model.h"

#include <gtest/gtest.h>

#include <set>

namespace infera::engine {
namespace {

TEST(OutputModelTest, TokensAreAFunctionOfSeedPromptAndPosition) {
  const OutputModel model({});
  const std::vector<TokenId> p1{1, 2, 3}, p2{1, 2, 4};
  const uint64_t k1 = model.prompt_key(p1), k2 = model.prompt_key(p2);
  EXPECT_EQ(k1, OutputModel({}).prompt_key(p1));
  EXPECT_NE(k1, k2);
  int same = 0;
  for (uint32_t i = 0; i < 100; ++i) {
    EXPECT_EQ(model.token_at(k1, i), model.token_at(k1, i));
    same += model.token_at(k1, i) == model.token_at(k2, i) ? 1 : 0;
  }
  EXPECT_LT(same, 5);
  OutputModelOptions seeded;
  seeded.seed = 42;
  EXPECT_NE(OutputModel(seeded).prompt_key(p1), k1);
}

TEST(OutputModelTest, RegularTokensStayInVocabularyAndAvoidEos) {
  OutputModelOptions o;
  o.vocab_size = 8;
  o.eos_token_id = 3;
  const OutputModel model(o);
  std::set<TokenId> seen;
  for (uint32_t i = 0; i < 2000; ++i) {
    const TokenId t = model.token_at(12345, i);
    EXPECT_LT(t, 8u);
    EXPECT_NE(t, 3u);
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 7u);  // every regular token occurs
}

TEST(OutputModelTest, EosIndexIsNaturalButNotBeforeMinTokensAndNeverWithIgnoreEos) {
  OutputModelOptions o;
  o.natural_min = 5;
  o.natural_max = 9;
  const OutputModel model(o);
  std::set<uint32_t> seen;
  for (uint64_t key = 0; key < 500; ++key) {
    const uint32_t natural = model.natural_eos_index(key);
    EXPECT_GE(natural, 4u);
    EXPECT_LE(natural, 8u);
    seen.insert(natural);
    EXPECT_EQ(model.eos_index(key, 0, false), natural);
    EXPECT_EQ(model.eos_index(key, 20, false), 20u);
    EXPECT_EQ(model.eos_index(key, 0, true), UINT32_MAX);
  }
  EXPECT_EQ(seen.size(), 5u);
}

}  // namespace
}  // namespace infera::engine
