#include "infera/engine/block_hasher.h"

#include <gtest/gtest.h>

#include <numeric>

namespace infera::engine {
namespace {

std::vector<TokenId> iota_tokens(size_t n, TokenId first = 0) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(EngineBlockHasherTest, ChainsEachFullBlockOnItsParent) {
  const EngineBlockHasher hasher("0");
  const auto t = iota_tokens(40);
  std::vector<uint64_t> h;
  hasher.extend(t, 16, h);
  ASSERT_EQ(h.size(), 2u);  // the trailing 8 tokens are a partial block
  EXPECT_EQ(h[0], hasher.hash_block(hasher.none_hash(), std::span(t).subspan(0, 16)));
  EXPECT_EQ(h[1], hasher.hash_block(h[0], std::span(t).subspan(16, 16)));
}

TEST(EngineBlockHasherTest, ExtendingIsTheSameAsHashingAtOnce) {
  const EngineBlockHasher hasher("0");
  const auto t = iota_tokens(100);
  std::vector<uint64_t> once, step;
  hasher.extend(t, 16, once);
  for (size_t n = 0; n <= t.size(); n += 7) hasher.extend(std::span(t).first(n), 16, step);
  hasher.extend(t, 16, step);
  EXPECT_EQ(once, step);
}

TEST(EngineBlockHasherTest, SameBlockUnderAnotherParentHashesDifferently) {
  const EngineBlockHasher hasher("0");
  const auto a = iota_tokens(32);
  auto b = a;
  b[0] = 999;  // only block 0 differs
  std::vector<uint64_t> ha, hb;
  hasher.extend(a, 16, ha);
  hasher.extend(b, 16, hb);
  EXPECT_NE(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);  // block 1's tokens are equal, its prefix is not
}

TEST(EngineBlockHasherTest, SeedIsStableAndChangesEveryHash) {
  const auto t = iota_tokens(64);
  std::vector<uint64_t> h0, h0_again, h1;
  EngineBlockHasher("0").extend(t, 16, h0);
  EngineBlockHasher("0").extend(t, 16, h0_again);
  EngineBlockHasher("1").extend(t, 16, h1);
  EXPECT_EQ(h0, h0_again);
  for (size_t i = 0; i < h0.size(); ++i) EXPECT_NE(h0[i], h1[i]);
}

}  // namespace
}  // namespace infera::engine
