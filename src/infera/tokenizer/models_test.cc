// The real Qwen3, Llama 3 and Gemma 3 tokenizer files: lookups agree with the file's contents,
// concurrent encodes agree with sequential ones, and the caches never change a result.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "infera/tokenizer/model_dir.h"
#include "infera/tokenizer/tokenizer.h"

namespace infera::tokenizer {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;

const fs::path kModels = fs::path(INFERA_MODELS_DIR);

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The valid-UTF-8 texts of the parity corpus, without the 100 kB document.
std::vector<std::string> corpus_texts() {
  std::vector<std::string> out;
  std::istringstream in(read_file(fs::path(INFERA_TESTDATA_DIR) / "tokenizer" / "corpus.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json::object o = json::parse(line).as_object();
    if (o.contains("text") && o.at("category").as_string() != "document") {
      out.emplace_back(o.at("text").as_string());
    }
  }
  return out;
}

std::unique_ptr<Tokenizer> load(const std::string& model, const Tokenizer::Options& options = {}) {
  auto dir = resolve_model_dir((kModels / model).string());
  EXPECT_TRUE(dir.ok()) << dir.status().to_string();
  auto t = Tokenizer::from_file(*dir / "tokenizer.json", options);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

class RealModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RealModelTest, LookupsAgreeWithTheFile) {
  const auto tok = load(GetParam());
  const json::value doc = json::parse(read_file(kModels / GetParam() / "tokenizer.json"));
  const json::object& vocab = doc.at("model").at("vocab").as_object();
  std::unordered_set<std::string> strings;
  size_t i = 0;
  for (const auto& kv : vocab) {
    strings.insert(std::string(kv.key()));
    if (i++ % 997 != 0) continue;
    const auto id = kv.value().to_number<TokenId>();
    EXPECT_EQ(tok->token_to_id(kv.key()), std::optional<TokenId>(id)) << kv.key();
  }
  for (const json::value& t : doc.at("added_tokens").as_array()) {
    const std::string content(t.at("content").as_string());
    const auto id = t.at("id").to_number<TokenId>();
    strings.insert(content);
    EXPECT_EQ(tok->token_to_id(content), std::optional<TokenId>(id)) << content;
    EXPECT_EQ(tok->id_to_token(id), std::optional<std::string>(content)) << id;
  }
  EXPECT_EQ(tok->vocab_size(), strings.size());
}

TEST_P(RealModelTest, CachesNeverChangeTheResult) {
  Tokenizer::Options no_caches;
  no_caches.segment_cache_bytes = 0;
  no_caches.word_cache_entries = 0;
  const auto cached = load(GetParam());
  const auto uncached = load(GetParam(), no_caches);
  const auto texts = corpus_texts();
  for (int pass = 0; pass < 2; ++pass) {
    for (const std::string& t : texts) {
      ASSERT_EQ(cached->encode(t, false), uncached->encode(t, false)) << t;
    }
  }
}

// Long texts of every kind in the corpus (scripts, digits, code, emoji, odd whitespace), joined
// with separators that make and avoid word cuts.
std::vector<std::string> long_texts() {
  const auto texts = corpus_texts();
  const char* const separators[] = {" ", "\n", "", "  ", ". ", " a", "\t"};
  std::vector<std::string> out;
  for (size_t i = 0; i < 24; ++i) {
    std::string t;
    for (size_t k = 0; k < 40; ++k) {
      t += texts[(i * 7 + k * 3) % texts.size()];
      t += separators[(i + k) % std::size(separators)];
    }
    out.push_back(std::move(t));
  }
  return out;
}

// Long segments are encoded and cached in chunks cut between words where the pipeline allows it
// (tokenizer.cc, encode_segment): the ids are always those of the whole segment.
TEST_P(RealModelTest, ChunkedSegmentsEncodeAsWholeOnes) {
  Tokenizer::Options whole;
  whole.segment_cache_bytes = 0;
  whole.word_cache_entries = 0;
  whole.chunk_bytes = 0;
  Tokenizer::Options chunked;
  chunked.chunk_bytes = 48;  // many cuts
  chunked.min_cached_segment_bytes = 1;
  const auto reference = load(GetParam(), whole);
  const auto tok = load(GetParam(), chunked);
  const auto texts = long_texts();
  for (int pass = 0; pass < 2; ++pass) {  // the second from the cache
    for (const std::string& t : texts) {
      ASSERT_EQ(tok->encode(t, false), reference->encode(t, false)) << t.substr(0, 200);
      ASSERT_EQ(tok->encode(t, true), reference->encode(t, true)) << t.substr(0, 200);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RealModelTest, ::testing::Values("qwen3", "llama3", "gemma3"));

// Two completions prompts that share a long prefix (a document, then different questions): the
// second is tokenized from the first's chunks, except for its tail. Qwen3 and Llama 3 split at
// word cuts; Gemma 3's pipeline (spaces replaced by its normalizer) does not promise it, so its
// segments stay whole (its many whitespace added tokens still make short shared segments).
TEST(ChunkedCacheTest, APromptThatSharesALongPrefixReusesItsChunks) {
  // One segment of plain prose (no added token in it), as a RAG document would be.
  const char* const words[] = {"the", "cache", "of",      "Worker", "routes", "a",  "prompt",
                               "to",  "its",   "blocks,", "and",    "then",   "42", "tokens."};
  std::string prefix = "Document:";
  for (uint32_t k = 0, x = 7; prefix.size() < 6000; ++k, x = x * 1103515245u + 12345u) {
    prefix += ' ';
    prefix += words[(x >> 16) % std::size(words)];
  }
  const std::string first = prefix + "what is the first question about this text";
  const std::string second = prefix + "and here is a different question entirely";
  // Hits of the second prompt on what the first left in the cache.
  auto reused = [&](const std::string& model, const Tokenizer::Options& options) {
    const auto tok = load(model, options);
    const auto reference = load(model, Tokenizer::Options{.segment_cache_bytes = 0});
    EXPECT_EQ(tok->encode(first, false), reference->encode(first, false)) << model;
    const uint64_t hits = tok->cache_stats().segment_hits;
    EXPECT_EQ(tok->encode(second, false), reference->encode(second, false)) << model;
    return tok->cache_stats().segment_hits - hits;
  };
  for (const std::string model : {"qwen3", "llama3", "gemma3"}) {
    const uint64_t chunked = reused(model, {});                // chunks of ~512 bytes
    const uint64_t whole = reused(model, {.chunk_bytes = 0});  // segments as they are
    if (model == "gemma3") {
      EXPECT_EQ(chunked, whole) << model;  // never chunked
    } else {
      EXPECT_GE(chunked, whole + prefix.size() / 512 - 2) << model;
    }
  }
}

TEST(ConcurrencyTest, ConcurrentEncodesAgreeWithSequentialOnes) {
  // Four threads share one tokenizer (and its caches) while encoding the corpus in different
  // orders; every result must equal the one a private tokenizer computed alone.
  const auto texts = corpus_texts();
  const auto reference = load("qwen3");
  std::vector<std::vector<TokenId>> want;
  for (const std::string& t : texts) want.push_back(reference->encode(t, true));

  Tokenizer::Options small;  // small caches: evictions and clears happen during the run
  small.segment_cache_bytes = 64 * 1024;
  small.word_cache_entries = 512;
  const auto shared = load("qwen3", small);
  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t k = 0; k < texts.size(); ++k) {
          const size_t i = (k * (2 * static_cast<size_t>(t) + 1) + static_cast<size_t>(round)) % texts.size();
          if (shared->encode(texts[i], true) != want[i]) ++mismatches[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << t;
}

TEST(ConversationTest, ReencodingAfterANewTurnHitsEveryEarlierSegment) {
  // A 20-turn chat rendered the way Qwen3's template does; one more turn reuses all earlier
  // segments from the cache and yields the same ids for them.
  Tokenizer::Options options;
  options.min_cached_segment_bytes = 1;
  const auto tok = load("qwen3", options);
  const auto texts = corpus_texts();
  std::string convo;
  for (int turn = 0; turn < 20; ++turn) {
    convo += "<|im_start|>user\n" + texts[static_cast<size_t>(turn * 3) % texts.size()] +
             "<|im_end|>\n<|im_start|>assistant\n" +
             texts[static_cast<size_t>(turn * 3 + 1) % texts.size()] + "<|im_end|>\n";
  }
  const std::vector<TokenId> before = tok->encode(convo, false);
  const uint64_t hits_before = tok->cache_stats().segment_hits;
  const std::string next = convo + "<|im_start|>user\nOne more question, please.<|im_end|>\n";
  const std::vector<TokenId> after = tok->encode(next, false);
  EXPECT_EQ(std::vector<TokenId>(after.begin(), after.begin() + static_cast<ptrdiff_t>(before.size())),
            before);
  EXPECT_GE(tok->cache_stats().segment_hits - hits_before, 40u);
}

}  // namespace
}  // namespace infera::tokenizer
