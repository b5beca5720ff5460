// Behaviour of the components where tokenizers.js (the parity reference) cannot serve as ground
// truth because it implements them differently from the Rust crate: split behaviours,
// Punctuation and Metaspace splitting, decoders on invalid bytes, single_word. Expected values
// are the Rust crate's own unit-test vectors where it has them (cited), otherwise they follow
// from the documented rule each test names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "infera/tokenizer/decoder.h"
#include "infera/tokenizer/pre_tokenizer.h"
#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

using Strings = std::vector<std::string>;

Strings run(const PreTokenizer& pre, std::string_view text) {
  std::string work(text);
  std::vector<Piece> pieces{{0, work.size(), true}};
  PreTokenizeScratch scratch;
  pre.pre_tokenize(work, pieces, scratch);
  Strings out;
  for (const Piece& p : pieces) out.push_back(work.substr(p.begin, p.end - p.begin));
  return out;
}

Strings decode(const Decoder& d, Strings tokens) {
  d.decode_chain(tokens);
  return tokens;
}

TEST(SplitBehaviorTest, MatchesTheRustDocumentation) {
  // tokenizers/src/tokenizer/normalizer.rs, SplitDelimiterBehavior: splitting on '-'.
  const auto split = [](SplitBehavior b) {
    return run(SplitPreTokenizer(*Regex::literal("-"), b, false), "the-final--countdown");
  };
  EXPECT_EQ(split(SplitBehavior::kRemoved), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kIsolated), (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithPrevious),
            (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithNext), (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(SplitBehavior::kContiguous), (Strings{"the", "-", "final", "--", "countdown"}));
}

TEST(SplitBehaviorTest, InvertKeepsWhatThePatternMatches) {
  // Whitespace pre-tokenizer semantics: Invert + Removed keeps the matches.
  auto re = Regex::compile("\\w+|[^\\w\\s]+");
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(run(SplitPreTokenizer(*re, SplitBehavior::kRemoved, true), "Hey man!"),
            (Strings{"Hey", "man", "!"}));
}

TEST(PunctuationTest, IsolatesEachPunctuationCharacter) {
  // tokenizers/src/pre_tokenizers/punctuation.rs, punctuation_basic.
  const CharSplitPreTokenizer p(CharSplitPreTokenizer::Kind::kPunctuation, SplitBehavior::kIsolated);
  EXPECT_EQ(run(p, "Hey friend!     How are you?!?"),
            (Strings{"Hey friend", "!", "     How are you", "?", "!", "?"}));
}

TEST(DigitsTest, GroupsOrIsolatesNumericCharacters) {
  // tokenizers/src/pre_tokenizers/digits.rs, numbers and individual_digits; char::is_numeric
  // also covers other scripts' digits and No/Nl numerics.
  const CharSplitPreTokenizer grouped(CharSplitPreTokenizer::Kind::kDigit, SplitBehavior::kContiguous);
  const CharSplitPreTokenizer single(CharSplitPreTokenizer::Kind::kDigit, SplitBehavior::kIsolated);
  EXPECT_EQ(run(grouped, "Hey 123 friend!"), (Strings{"Hey ", "123", " friend!"}));
  EXPECT_EQ(run(single, "Hey 123 friend!"), (Strings{"Hey ", "1", "2", "3", " friend!"}));
  EXPECT_EQ(run(grouped, "x٣²y"), (Strings{"x", "٣²", "y"}));
}

TEST(WhitespaceSplitTest, RemovesUnicodeWhiteSpace) {
  const CharSplitPreTokenizer p(CharSplitPreTokenizer::Kind::kWhiteSpace, SplitBehavior::kRemoved);
  EXPECT_EQ(run(p, " Hey\tman,\u3000good?\xC2\x85"), (Strings{"Hey", "man,", "good?"}));
}

TEST(MetaspaceTest, ReplacesSpacesAndSplitsBeforeEachReplacement) {
  // tokenizers/src/pre_tokenizers/metaspace.rs, basic and multiple_spaces.
  const MetaspacePreTokenizer always(0x2581, MetaspacePreTokenizer::Prepend::kAlways, true);
  EXPECT_EQ(run(always, "Hey friend!"), (Strings{"▁Hey", "▁friend!"}));
  EXPECT_EQ(run(always, "Hey   friend!"), (Strings{"▁Hey", "▁", "▁", "▁friend!"}));
}

TEST(MetaspaceTest, PrependSchemeFirstOnlyPrependsAtTheStartOfTheText) {
  // metaspace.rs, non_legacy_meta_space: with prepend_scheme "first" only the piece at offset 0
  // of the original text gets the replacement prepended.
  const MetaspacePreTokenizer first(0x2581, MetaspacePreTokenizer::Prepend::kFirst, false);
  std::string work = "Hey my friend how";
  std::vector<Piece> pieces{{0, 4, true}, {4, work.size(), false}};
  PreTokenizeScratch scratch;
  first.pre_tokenize(work, pieces, scratch);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(work.substr(pieces[0].begin, pieces[0].end - pieces[0].begin), "▁Hey▁");
  EXPECT_EQ(work.substr(pieces[1].begin, pieces[1].end - pieces[1].begin), "my▁friend▁how");
  const MetaspacePreTokenizer never(0x2581, MetaspacePreTokenizer::Prepend::kNever, true);
  EXPECT_EQ(run(never, "Hey friend"), (Strings{"Hey", "▁friend"}));
}

TEST(ByteLevelTest, SplitsWithTheGpt2PatternAndMapsBytes) {
  // tokenizers/src/pre_tokenizers/byte_level.rs, pre_tokenization (add_prefix_space = true).
  auto re = Regex::compile(
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
  ASSERT_TRUE(re.ok());
  const ByteLevelPreTokenizer p(true, std::make_unique<Regex>(std::move(re).value()), true);
  EXPECT_EQ(run(p, "Hello my friend, how is your day going?"),
            (Strings{"ĠHello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing", "?"}));
  EXPECT_EQ(byte_level_char(' '), U'Ġ');
  EXPECT_EQ(byte_level_char('\n'), U'Ċ');
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(byte_level_byte(byte_level_char(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(byte_level_byte(U'中'), -1);
}

TEST(DecoderTest, ByteFallbackReplacesEachByteOfAnInvalidRun) {
  // tokenizers/src/decoders/byte_fallback.rs, decode: unlike a lossy UTF-8 decoder, an invalid
  // run of byte tokens becomes one U+FFFD per byte.
  const ByteFallbackDecoder d;
  EXPECT_EQ(decode(d, {"Hey", "friend!"}), (Strings{"Hey", "friend!"}));
  EXPECT_EQ(decode(d, {"<0x61>"}), (Strings{"a"}));
  EXPECT_EQ(decode(d, {"<0xE5>"}), (Strings{"�"}));
  EXPECT_EQ(decode(d, {"<0xE5>", "<0x8f>"}), (Strings{"�", "�"}));
  EXPECT_EQ(decode(d, {"<0xE5>", "<0x8f>", "<0xab>"}), (Strings{"叫"}));
  EXPECT_EQ(decode(d, {"<0xE5>", "<0x8f>", "<0xab>", "a"}), (Strings{"叫", "a"}));
  EXPECT_EQ(decode(d, {"<0xE5>", "<0x8f>", "a"}), (Strings{"�", "�", "a"}));
}

TEST(DecoderTest, StripRemovesUpToStartAndStopCharacters) {
  // tokenizers/src/decoders/strip.rs, decode.
  EXPECT_EQ(decode(StripDecoder(U'H', 1, 0), {"Hey", " friend!", "HHH"}),
            (Strings{"ey", " friend!", "HH"}));
  EXPECT_EQ(decode(StripDecoder(U'y', 0, 1), {"Hey", " friend!"}), (Strings{"He", " friend!"}));
  EXPECT_EQ(decode(StripDecoder(U'x', 3, 3), {"x", "", "xxxxxxx"}), (Strings{"", "", "x"}));
}

TEST(DecoderTest, MetaspaceDropsReplacementsOfTheFirstTokenUnlessNever) {
  // metaspace.rs, decode.
  EXPECT_EQ(decode(MetaspaceDecoder(0x2581, true), {"▁Hey", "▁friend!"}),
            (Strings{"Hey", " friend!"}));
  EXPECT_EQ(decode(MetaspaceDecoder(0x2581, false), {"▁Hey", "▁friend!"}),
            (Strings{" Hey", " friend!"}));
}

TEST(DecoderTest, ByteLevelMapsBackAcrossTokensAndKeepsForeignTokens) {
  const ByteLevelDecoder d;
  EXPECT_EQ(decode(d, {"Hello", "Ġmy", "Ġfriend", ",", "Ġhow", "?"}),
            (Strings{"Hello my friend, how?"}));
  // 中 = E4 B8 AD, split over two tokens; a token with characters outside the byte alphabet is
  // kept as its own UTF-8.
  EXPECT_EQ(decode(d, {"ä¸", "Ń", "中"}), (Strings{"中中"}));
  EXPECT_EQ(decode(d, {"ä¸"}), (Strings{"�"}));
}

TEST(DecoderTest, FuseAndReplaceAndSequence) {
  std::vector<std::unique_ptr<Decoder>> steps;
  steps.push_back(std::make_unique<ReplaceDecoder>(*Regex::literal("▁"), " "));
  steps.push_back(std::make_unique<ByteFallbackDecoder>());
  steps.push_back(std::make_unique<FuseDecoder>());
  const SequenceDecoder d(std::move(steps));
  EXPECT_EQ(decode(d, {"▁Hey", "<0x21>", "▁▁you"}), (Strings{" Hey!  you"}));
}

}  // namespace
}  // namespace infera::tokenizer
