// The public Tokenizer on small tokenizer.json documents written here: BPE merge order and its
// options, added-token matching rules, post-processing, decoding, bad input and load errors.
// Parity with the reference on real files is parity_test.cc.
#include "infera/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>

namespace infera::tokenizer {
namespace {

namespace json = boost::json;
using Ids = std::vector<TokenId>;

// A tokenizer.json with a BPE model over `vocab` / `merges` and the given extra top-level parts.
std::string make_json(const json::object& vocab, const json::array& merges,
                      const json::object& model_options = {}, const json::object& top = {}) {
  json::object model{{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
  for (const auto& kv : model_options) model[kv.key()] = kv.value();
  json::object doc{{"version", "1.0"},        {"added_tokens", json::array{}},
                   {"normalizer", nullptr},    {"pre_tokenizer", nullptr},
                   {"post_processor", nullptr}, {"decoder", nullptr},
                   {"model", model}};
  for (const auto& kv : top) doc[kv.key()] = kv.value();
  return json::serialize(doc);
}

std::unique_ptr<Tokenizer> load(const std::string& text) {
  auto t = Tokenizer::from_json(text, "test.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

json::object letters_vocab() {
  json::object v;
  TokenId id = 0;
  for (char c = 'a'; c <= 'z'; ++c) v[std::string(1, c)] = id++;
  for (const char* s : {" ", ",", "!", "<", ">", "/"}) v[s] = id++;
  return v;  // ids 0..31
}

TEST(BpeTest, LowestRankedMergeAppliesFirst) {
  const json::object vocab{{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}};
  auto bc_first = load(make_json(vocab, json::array{"b c", "a b"}));
  auto ab_first = load(make_json(vocab, json::array{"a b", "b c"}));
  EXPECT_EQ(bc_first->encode("abc", false), (Ids{0, 4}));
  EXPECT_EQ(ab_first->encode("abc", false), (Ids{3, 2}));
}

TEST(BpeTest, EqualRanksMergeLeftmostFirst) {
  auto tok = load(make_json(json::object{{"a", 0}, {"aa", 1}}, json::array{json::array{"a", "a"}}));
  EXPECT_EQ(tok->encode("aaa", false), (Ids{1, 0}));
  EXPECT_EQ(tok->encode("aaaaa", false), (Ids{1, 1, 0}));
  // Long words take the heap path; the result must follow the same order.
  const std::string long_word(101, 'a');
  const Ids got = tok->encode(long_word, false);
  ASSERT_EQ(got.size(), 51u);
  EXPECT_EQ(got.back(), 0u);
}

TEST(BpeTest, IgnoreMergesTakesAWholeWordFromTheVocabulary) {
  const json::object vocab{{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}};
  const json::array merges{"a b"};
  EXPECT_EQ(load(make_json(vocab, merges))->encode("abc", false), (Ids{3, 2}));
  EXPECT_EQ(load(make_json(vocab, merges, {{"ignore_merges", true}}))->encode("abc", false),
            (Ids{4}));
}

TEST(BpeTest, ByteFallbackAndUnknownTokens) {
  // tokenizers/src/models/bpe/model.rs, test_bpe_byte_fallback / _newline.
  const json::object vocab{{"<unk>", 0}, {"<0x61>", 1}, {"<0x0A>", 2}};
  auto tok = load(make_json(vocab, json::array{}, {{"unk_token", "<unk>"}, {"byte_fallback", true}}));
  EXPECT_EQ(tok->encode("c", false), (Ids{0}));
  EXPECT_EQ(tok->encode("a", false), (Ids{1}));
  EXPECT_EQ(tok->encode("\n", false), (Ids{2}));
}

TEST(BpeTest, FuseUnkJoinsConsecutiveUnknowns) {
  const json::object vocab{{"<unk>", 0}, {"a", 1}};
  auto fused = load(make_json(vocab, json::array{}, {{"unk_token", "<unk>"}, {"fuse_unk", true}}));
  auto plain = load(make_json(vocab, json::array{}, {{"unk_token", "<unk>"}}));
  EXPECT_EQ(fused->encode("xya", false), (Ids{0, 1}));
  EXPECT_EQ(plain->encode("xya", false), (Ids{0, 0, 1}));
  // Without an unk token an unknown character yields nothing.
  EXPECT_EQ(load(make_json(vocab, json::array{}))->encode("xya", false), (Ids{1}));
}

TEST(BpeTest, SubwordPrefixAndSuffixDecorateCharacters) {
  auto prefixed = load(make_json(json::object{{"a", 0}, {"##b", 1}, {"ab", 2}},
                                 json::array{"a ##b"}, {{"continuing_subword_prefix", "##"}}));
  EXPECT_EQ(prefixed->encode("ab", false), (Ids{2}));
  EXPECT_EQ(prefixed->encode("abb", false), (Ids{2, 1}));
  auto suffixed = load(make_json(json::object{{"a", 0}, {"b</w>", 1}, {"ab</w>", 2}, {"b", 3}},
                                 json::array{"a b</w>"}, {{"end_of_word_suffix", "</w>"}}));
  EXPECT_EQ(suffixed->encode("ab", false), (Ids{2}));
  EXPECT_EQ(suffixed->encode("ba", false), (Ids{3}));  // "a</w>" is not a token: dropped
}

json::object added(std::string content, TokenId id, bool special, json::object flags = {}) {
  json::object t{{"id", id},          {"content", content}, {"single_word", false},
                 {"lstrip", false},   {"rstrip", false},    {"normalized", !special},
                 {"special", special}};
  for (const auto& kv : flags) t[kv.key()] = kv.value();
  return t;
}

TEST(AddedTokensTest, LongestMatchWinsAndSpecialTokensAreAlwaysRecognised) {
  json::array tokens{added("<s>", 100, true), added("<s>x", 101, false, {{"normalized", false}})};
  auto tok = load(make_json(letters_vocab(), json::array{}, {}, {{"added_tokens", tokens}}));
  EXPECT_EQ(tok->encode("a<s>xb<s>", false), (Ids{0, 101, 1, 100}));
  EXPECT_EQ(tok->encode("a<s>xb<s>", true), (Ids{0, 101, 1, 100}));  // no post-processor
  // Tokens matched on the raw text are found before normalized ones, whatever their length.
  json::array mixed{added("<s>", 100, true), added("<s>x", 101, false)};
  auto two_pass = load(make_json(letters_vocab(), json::array{}, {}, {{"added_tokens", mixed}}));
  EXPECT_EQ(two_pass->encode("a<s>xb", false), (Ids{0, 100, 23, 1}));
}

TEST(AddedTokensTest, SingleWordOnlyMatchesWholeWords) {
  json::array tokens{added("my", 100, false, {{"single_word", true}})};
  auto tok = load(make_json(letters_vocab(), json::array{}, {}, {{"added_tokens", tokens}}));
  // "my" alone and before a comma matches; inside "myself" and "army" it does not.
  const Ids got = tok->encode("my, myself army my", false);
  EXPECT_EQ(std::count(got.begin(), got.end(), 100u), 2);
  EXPECT_EQ(got.front(), 100u);
  EXPECT_EQ(got.back(), 100u);
}

TEST(AddedTokensTest, LstripAndRstripSwallowAdjacentWhiteSpace) {
  json::array tokens{added("<m>", 100, true, {{"lstrip", true}}),
                     added("<n>", 101, true, {{"rstrip", true}})};
  auto tok = load(make_json(letters_vocab(), json::array{}, {}, {{"added_tokens", tokens}}));
  const TokenId space = 26;
  EXPECT_EQ(tok->encode("a  <m> b", false), (Ids{0, 100, space, 1}));
  EXPECT_EQ(tok->encode("a <n>  b", false), (Ids{0, space, 101, 1}));
}

TEST(AddedTokensTest, NormalizedTokensMatchTheNormalizedText) {
  json::array tokens{added("hey", 100, false)};  // normalized: matched after Lowercase
  auto tok = load(make_json(letters_vocab(), json::array{}, {},
                            {{"added_tokens", tokens}, {"normalizer", {{"type", "Lowercase"}}}}));
  EXPECT_EQ(tok->encode("HEY Hey", false), (Ids{100, 26, 100}));
}

TEST(PostProcessorTest, TemplateAddsSpecialTokensAroundTheSequence) {
  json::object special{{"<b>", {{"id", "<b>"}, {"ids", json::array{90}}, {"tokens", json::array{"<b>"}}}},
                       {"<e>", {{"id", "<e>"}, {"ids", json::array{91, 92}}, {"tokens", json::array{"<e>", "<e2>"}}}}};
  json::object tp{{"type", "TemplateProcessing"},
                  {"single", "<b> $A <e>"},
                  {"pair", "<b> $A <e> $B:1 <e>:1"},
                  {"special_tokens", special}};
  auto tok = load(make_json(letters_vocab(), json::array{}, {},
                            {{"post_processor", {{"type", "Sequence"},
                                                 {"processors", json::array{{{"type", "ByteLevel"}}, tp}}}}}));
  EXPECT_EQ(tok->encode("ab", true), (Ids{90, 0, 1, 91, 92}));
  EXPECT_EQ(tok->encode("ab", false), (Ids{0, 1}));
}

TEST(DecodeTest, SkipsUnknownIdsAndOptionallySpecialTokens) {
  json::array tokens{added("<s>", 100, true), added("<t>", 101, false)};
  auto tok = load(make_json(letters_vocab(), json::array{}, {},
                            {{"added_tokens", tokens}, {"decoder", {{"type", "Fuse"}}}}));
  EXPECT_EQ(tok->decode(Ids{100, 0, 999999, 101, 1}, false), "<s>a<t>b");
  EXPECT_EQ(tok->decode(Ids{100, 0, 999999, 101, 1}, true), "a<t>b");
  // Without a decoder, tokens are joined by spaces.
  auto plain = load(make_json(letters_vocab(), json::array{}));
  EXPECT_EQ(plain->decode(Ids{0, 1, 2}, false), "a b c");
}

TEST(LookupTest, TokenIdsAndVocabSize) {
  json::array tokens{added("<s>", 100, true), added("a", 0, false)};  // "a" already in vocab
  auto tok = load(make_json(letters_vocab(), json::array{}, {}, {{"added_tokens", tokens}}));
  EXPECT_EQ(tok->token_to_id("<s>"), std::optional<TokenId>(100));
  EXPECT_EQ(tok->token_to_id("z"), std::optional<TokenId>(25));
  EXPECT_EQ(tok->token_to_id("nope"), std::nullopt);
  EXPECT_EQ(tok->id_to_token(100), std::optional<std::string>("<s>"));
  EXPECT_EQ(tok->id_to_token(31), std::optional<std::string>("/"));
  EXPECT_EQ(tok->id_to_token(5000), std::nullopt);
  EXPECT_EQ(tok->vocab_size(), 33u);  // 32 model tokens + "<s>"
}

TEST(BadInputTest, InvalidUtf8IsReplacedLikeTheReference) {
  json::object vocab = letters_vocab();
  vocab["\xEF\xBF\xBD"] = 50;  // U+FFFD
  auto tok = load(make_json(vocab, json::array{}));
  EXPECT_EQ(tok->encode("a\xFF\xC3" "b", false), (Ids{0, 50, 50, 1}));
  EXPECT_EQ(tok->encode(std::string_view("a\0b", 3), false).size(), 2u);  // NUL unknown: dropped
}

TEST(LoadErrorTest, UnsupportedComponentsNameTheirPath) {
  const std::string text = make_json(
      letters_vocab(), json::array{}, {},
      {{"normalizer", {{"type", "Sequence"},
                       {"normalizers", json::array{{{"type", "NFC"}}, {{"type", "BertNormalizer"}}}}}}});
  const auto r = Tokenizer::from_json(text, "models/x/tokenizer.json");
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("models/x/tokenizer.json"), std::string::npos) << m;
  EXPECT_NE(m.find("normalizer.normalizers[1]"), std::string::npos) << m;
  EXPECT_NE(m.find("BertNormalizer"), std::string::npos) << m;

  json::object model{{"type", "Unigram"}, {"vocab", json::array{}}};
  const auto u = Tokenizer::from_json(json::serialize(json::object{{"model", model}}), "u.json");
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("Unigram"), std::string::npos);
}

TEST(LoadErrorTest, MalformedDocumentsAreErrors) {
  EXPECT_FALSE(Tokenizer::from_json("{not json", "x.json").ok());
  EXPECT_FALSE(Tokenizer::from_json("[]", "x.json").ok());
  EXPECT_FALSE(Tokenizer::from_json("{}", "x.json").ok());  // no model
  const auto bad_merge = Tokenizer::from_json(make_json(letters_vocab(), json::array{"a q9"}), "m.json");
  ASSERT_FALSE(bad_merge.ok());
  EXPECT_NE(bad_merge.status().message().find("model.merges[0]"), std::string::npos);
  const auto bad_vocab = Tokenizer::from_json(
      make_json(json::object{{"a", -1}}, json::array{}), "v.json");
  EXPECT_FALSE(bad_vocab.ok());
  const auto bad_regex = Tokenizer::from_json(
      make_json(letters_vocab(), json::array{}, {},
                {{"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(oops"}}},
                                    {"behavior", "Isolated"}}}}),
      "r.json");
  ASSERT_FALSE(bad_regex.ok());
  EXPECT_NE(bad_regex.status().message().find("pre_tokenizer"), std::string::npos);
}

TEST(LoadErrorTest, UnknownTopLevelKeysAreIgnored) {
  // Some packaged files carry extra keys (a "default" copy of the whole tokenizer, notes, ...).
  auto plain = load(make_json(letters_vocab(), json::array{}));
  auto extra = load(make_json(
      letters_vocab(), json::array{}, {},
      {{"default", {{"model", {{"vocab", {{"zz", 1}}}, {"merges", json::array{"z z"}}}}}},
       {"note", "x"},
       {"numbers", json::array{1, json::array{2.5, nullptr}, true}}}));
  EXPECT_EQ(extra->encode("abc xyz", false), plain->encode("abc xyz", false));
  EXPECT_EQ(extra->vocab_size(), plain->vocab_size());
}

TEST(LoadErrorTest, MissingFileNamesThePath) {
  const auto r = Tokenizer::from_file("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/dir/tokenizer.json"), std::string::npos);
}

TEST(SegmentCacheTest, ReencodingServesSegmentsFromTheCache) {
  json::array tokens{added("<s>", 100, true)};
  auto tok = load(make_json(letters_vocab(), json::array{}, {}, {{"added_tokens", tokens}}));
  const std::string turn1 = "the first message is long enough to be cached";
  const std::string turn2 = "and the second message is long enough as well";
  const Ids a = tok->encode("<s>" + turn1 + "<s>", false);
  EXPECT_EQ(tok->cache_stats().segment_hits, 0u);
  const Ids b = tok->encode("<s>" + turn1 + "<s>" + turn2, false);
  EXPECT_EQ(tok->cache_stats().segment_hits, 1u);
  EXPECT_EQ(Ids(b.begin(), b.begin() + static_cast<ptrdiff_t>(a.size())), a);
  tok->clear_caches();
  EXPECT_EQ(tok->encode("<s>" + turn1 + "<s>" + turn2, false), b);
  EXPECT_EQ(tok->cache_stats().segment_hits, 1u);  // cleared: both segments missed again
  EXPECT_GE(tok->cache_stats().segment_entries, 2u);
}

}  // namespace
}  // namespace infera::tokenizer
