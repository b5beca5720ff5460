// libFuzzer target for the tokenizer's untrusted inputs: the normalizer / pre-tokenizer / BPE
// path on arbitrary bytes, the Oniguruma-to-PCRE2 regex translation, and tokenizer.json itself.
// The first byte picks the mode, the rest is the input:
//   0  text through a byte-level tokenizer (Qwen3's pre-tokenizer regex, ByteLevel, BPE, added
//      tokens); checked: decode(encode(x)) == x with invalid UTF-8 replaced (byte-level BPE is
//      lossless), and encoding again gives the same ids (segment and word caches).
//   1  text through a SentencePiece-style tokenizer (NFKC, Lowercase, Replace, Strip,
//      Punctuation, Digits, Metaspace, byte fallback, flagged added tokens, template); checked:
//      no crash, deterministic, decode runs.
//   2  a regex pattern: translation and compilation never crash; a compiled one is matched.
//   3  a tokenizer.json document: loading never crashes; a loaded one encodes a fixed text.
//   4  text split by FastSplit and by PCRE2 with the Qwen3 and Llama 3 patterns: same matches.
// Seed corpus: tests/testdata/tokenizer/fuzz_corpus (CI replays it through every mode).
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

#include "infera/common/check.h"
#include "infera/tokenizer/fast_split.h"
#include "infera/tokenizer/pre_tokenizer.h"
#include "infera/tokenizer/regex.h"
#include "infera/tokenizer/tokenizer.h"
#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

namespace json = boost::json;

std::string byte_level(std::string_view s) {
  std::string out;
  for (const char c : s) unicode::append_utf8(out, byte_level_char(static_cast<uint8_t>(c)));
  return out;
}

// A GPT-2 style vocabulary: the 256 byte-level characters plus merges that build a few words.
void add_words(json::object& vocab, json::array& merges, std::initializer_list<const char*> words) {
  for (const char* w : words) {
    const std::string chars = byte_level(w);
    // Split into characters, then merge left to right: prefix + next character.
    std::vector<std::string> cs;
    for (size_t i = 0; i < chars.size();) {
      const size_t n = unicode::char_len(static_cast<unsigned char>(chars[i]));
      cs.push_back(chars.substr(i, n));
      i += n;
    }
    std::string prefix = cs[0];
    for (size_t k = 1; k < cs.size(); ++k) {
      const std::string joined = prefix + cs[k];
      if (!vocab.contains(joined)) {
        vocab[joined] = vocab.size();
        merges.push_back(json::array{json::string(prefix), json::string(cs[k])});
      }
      prefix = joined;
    }
  }
}

std::unique_ptr<Tokenizer> byte_level_tokenizer() {
  json::object vocab;
  for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = b;
  json::array merges;
  add_words(vocab, merges, {" the", " and", "ing", "tion", " of", "er", "中文", "日本", "  ", "\n\n",
                            " 123", "你好", "😀", "é"});
  json::object doc{
      {"added_tokens",
       json::array{{{"id", 100000}, {"content", "<|im_start|>"}, {"special", true}, {"normalized", false}},
                   {{"id", 100001}, {"content", "<think>"}, {"special", false}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array{{{"type", "Split"},
                      {"pattern", {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                             "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                      {"behavior", "Isolated"},
                      {"invert", false}},
                     {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", true}}}};
  auto t = Tokenizer::from_json(json::serialize(doc), "fuzz-byte-level");
  INFERA_CHECK(t.ok());
  return std::move(t).value();
}

std::unique_ptr<Tokenizer> sentencepiece_tokenizer() {
  json::object vocab{{"<unk>", 0}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = vocab.size();
  }
  for (const char* t : {"▁", "a", "b", "c", "d", "e", "h", "l", "o", "t", "▁t", "▁th", "▁the", "he", "ll",
                        "llo", "1", "2", "!", "?", ".", "中", "文"}) {
    vocab[t] = vocab.size();
  }
  json::array merges{"▁ t", "▁t h", "▁th e", "h e", "l l", "ll o"};
  json::object doc{
      {"added_tokens",
       json::array{{{"id", 1000}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                   {{"id", 1001}, {"content", "<mask>"}, {"special", true}, {"lstrip", true}, {"normalized", false}},
                   {{"id", 1002}, {"content", "<sep>"}, {"special", false}, {"rstrip", true}, {"normalized", false}},
                   {{"id", 1003}, {"content", "hello"}, {"special", false}, {"single_word", true}, {"normalized", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", json::array{{{"type", "NFKC"}},
                                    {{"type", "Lowercase"}},
                                    {{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}},
                                    {{"type", "Replace"}, {"pattern", {{"Regex", "\\s{2,}"}}}, {"content", " "}}}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", json::array{{{"type", "Punctuation"}, {"behavior", "MergedWithPrevious"}},
                                      {{"type", "Digits"}, {"individual_digits", true}},
                                      {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", "<s> $A"},
        {"pair", "<s> $A $B"},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", json::array{1000}}, {"tokens", json::array{"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array{{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                                 {{"type", "ByteFallback"}},
                                 {{"type", "Fuse"}},
                                 {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"unk_token", "<unk>"},
        {"byte_fallback", true}, {"fuse_unk", true}}}};
  auto t = Tokenizer::from_json(json::serialize(doc), "fuzz-sentencepiece");
  INFERA_CHECK(t.ok());
  return std::move(t).value();
}

}  // namespace
}  // namespace infera::tokenizer

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera::tokenizer;
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: {
      static const std::unique_ptr<Tokenizer> tok = byte_level_tokenizer();
      const std::vector<TokenId> ids = tok->encode(input, false);
      INFERA_CHECK(tok->decode(ids, false) == unicode::to_valid_utf8(input));
      INFERA_CHECK(tok->encode(input, false) == ids);
      break;
    }
    case 1: {
      static const std::unique_ptr<Tokenizer> tok = sentencepiece_tokenizer();
      const std::vector<TokenId> ids = tok->encode(input, true);
      INFERA_CHECK(tok->encode(input, true) == ids);
      (void)tok->decode(ids, false);
      (void)tok->decode(ids, true);
      break;
    }
    case 2: {
      if (input.size() > 4096) break;
      auto re = Regex::compile(input);
      if (re.ok()) {
        size_t n = 0;
        re->for_each_match("The quick brown fox, 123 jumps! 中文 \n\t end", [&](size_t, size_t) { ++n; });
      }
      break;
    }
    case 3: {
      auto tok = Tokenizer::from_json(input, "fuzz-json");
      if (tok.ok()) {
        const auto ids = (*tok)->encode("Hello, world! 123 中文 <s>", true);
        (void)(*tok)->decode(ids, true);
      }
      break;
    }
    case 4: {
      struct Pair {
        Regex regex;
        std::unique_ptr<FastSplit> fast;
      };
      static const std::vector<Pair> pairs = [] {
        std::vector<Pair> v;
        for (const char* p :
             {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
              "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}) {
          v.push_back(Pair{*Regex::compile(p), FastSplit::for_pattern(p)});
          INFERA_CHECK(v.back().fast != nullptr);
        }
        return v;
      }();
      const std::string text = unicode::to_valid_utf8(input);
      for (const Pair& pair : pairs) {
        std::vector<std::pair<size_t, size_t>> a, b;
        pair.regex.for_each_match(text, [&](size_t x, size_t y) { a.emplace_back(x, y); });
        for (size_t i = 0; i < text.size();) {
          const size_t e = pair.fast->match(text, i);
          INFERA_CHECK(e > i);
          b.emplace_back(i, e);
          i = e;
        }
        INFERA_CHECK(a == b);
      }
      break;
    }
  }
  return 0;
}
