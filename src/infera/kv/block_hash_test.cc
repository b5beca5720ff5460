#include "infera/kv/block_hash.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fstream>
#include <numeric>
#include <sstream>

namespace infera::kv {
namespace {

boost::json::value load_golden() {
  std::ifstream in(std::string(INFERA_TESTDATA_DIR) + "/router_hash_golden.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return boost::json::parse(ss.str());
}

std::vector<uint64_t> as_u64s(const boost::json::value& v) {
  std::vector<uint64_t> out;
  for (const auto& x : v.as_array()) out.push_back(x.to_number<uint64_t>());
  return out;
}

TEST(BlockHashTest, MatchesGoldenVectors) {
  const boost::json::value golden = load_golden();
  ASSERT_EQ(golden.at("seed").to_number<uint64_t>(), kHashSeed);
  const auto& cases = golden.at("cases").as_array();
  ASSERT_EQ(cases.size(), 6u);
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.at("name").as_string()));
    std::vector<TokenId> tokens;
    for (const auto& t : c.at("tokens").as_array()) tokens.push_back(t.to_number<TokenId>());
    const auto block_size = c.at("block_size").to_number<uint32_t>();
    std::string lora;
    if (c.at("lora_name").is_string()) lora = std::string(c.at("lora_name").as_string());
    std::vector<uint64_t> seq, local;
    compute_seq_hashes(tokens, block_size, lora_seed(lora), seq, &local);
    EXPECT_EQ(local, as_u64s(c.at("local_hashes")));
    EXPECT_EQ(seq, as_u64s(c.at("seq_hashes")));
  }
}

TEST(BlockHashTest, TrailingPartialBlockIsIgnored) {
  std::vector<TokenId> tokens(40);
  std::iota(tokens.begin(), tokens.end(), 1);
  const auto full = seq_hashes(tokens, 16);
  ASSERT_EQ(full.size(), 2u);
  const auto cut = seq_hashes(std::span<const TokenId>(tokens).first(32), 16);
  EXPECT_EQ(full, cut);
  EXPECT_TRUE(seq_hashes(std::span<const TokenId>(tokens).first(15), 16).empty());
}

TEST(BlockHashTest, LoraChangesEveryHash) {
  std::vector<TokenId> tokens(48, 7);
  const auto base = seq_hashes(tokens, 16);
  const auto with_lora = seq_hashes(tokens, 16, "my-lora");
  const auto other_lora = seq_hashes(tokens, 16, "other");
  ASSERT_EQ(base.size(), 3u);
  for (size_t i = 0; i < base.size(); ++i) {
    EXPECT_NE(base[i], with_lora[i]);
    EXPECT_NE(with_lora[i], other_lora[i]);
  }
  EXPECT_EQ(lora_seed(""), kHashSeed);
}

TEST(BlockHashTest, MediaMixIntoTheSeedOnlyWhenThereAreSome) {
  EXPECT_EQ(media_seed(kHashSeed, 0), kHashSeed);
  const uint64_t a = media_digest("image A\n");
  const uint64_t b = media_digest("image B\n");
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(media_digest(""), media_digest(""));  // deterministic, and never the "none" 0
  EXPECT_NE(media_digest(""), 0u);
  EXPECT_NE(media_seed(kHashSeed, a), kHashSeed);
  EXPECT_NE(media_seed(kHashSeed, a), media_seed(kHashSeed, b));
  EXPECT_NE(media_seed(kHashSeed, a), media_seed(lora_seed("adapter"), a));
  EXPECT_EQ(media_seed(kHashSeed, a), media_seed(kHashSeed, media_digest("image A\n")));
}

TEST(BlockHashTest, ChainingFromParentEqualsHashingTheWholeSequence) {
  std::vector<TokenId> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 100);
  const auto whole = seq_hashes(tokens, 16);
  std::vector<uint64_t> tail;
  compute_seq_hashes(std::span<const TokenId>(tokens).subspan(32), 16, kHashSeed, tail, nullptr,
                     /*has_parent=*/true, whole[1]);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0], whole[2]);
  EXPECT_EQ(tail[1], whole[3]);
}

TEST(BlockHashTest, SameBlockAtDifferentPositionsHasDifferentSeqHash) {
  std::vector<TokenId> tokens(32, 5);  // two identical blocks
  std::vector<uint64_t> seq, local;
  compute_seq_hashes(tokens, 16, kHashSeed, seq, &local);
  EXPECT_EQ(local[0], local[1]);
  EXPECT_NE(seq[0], seq[1]);
}

}  // namespace
}  // namespace infera::kv
