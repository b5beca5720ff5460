// Tokenizer: a Hugging Face tokenizer.json (BPE: byte-level GPT-2 / Llama 3 / Qwen, and
// SentencePiece-style with byte fallback) that encodes and decodes exactly as the Rust
// `tokenizers` crate does, so the router hashes the very tokens the engine will see. Text between
// added tokens encodes independently, so segments are cached: re-encoding a conversation after a
// new turn pays for the new text only. Immutable after load; encode/decode are const and safe
// from any thread (the caches lock internally). Invalid UTF-8 becomes U+FFFD, as in the reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"

namespace infera::tokenizer {

using TokenId = uint32_t;

struct Pipeline;
struct EncodeScratch;
class SegmentCache;

class Tokenizer {
 public:
  struct Options {
    size_t segment_cache_bytes = size_t{64} << 20;  // 0 disables the segment cache
    size_t segment_cache_entries = 65536;
    size_t min_cached_segment_bytes = 32;  // shorter segments are cheaper to encode than to cache
    // Segments of at least twice this are cached in chunks of about this size, cut between
    // words, where the pipeline allows it (tokenizer.cc, encode_segment); 0 keeps them whole.
    size_t chunk_bytes = 512;
    size_t word_cache_entries = 65536;     // per-word BPE results; 0 disables
  };
  struct CacheStats {
    uint64_t segment_hits = 0;
    uint64_t segment_misses = 0;
    uint64_t segment_evictions = 0;
    size_t segment_entries = 0;
    size_t segment_bytes = 0;
  };

  // A missing or malformed file, or an unsupported component, is an error naming the path
  // and, for components, the JSON path and type ("pre_tokenizer.pretokenizers[0]: ...").
  static Result<std::unique_ptr<Tokenizer>> from_file(const std::filesystem::path& tokenizer_json);
  static Result<std::unique_ptr<Tokenizer>> from_file(const std::filesystem::path& tokenizer_json,
                                                      const Options& options);
  // `origin` names the source in error messages.
  static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view json,
                                                      std::string_view origin);
  static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view json,
                                                      std::string_view origin,
                                                      const Options& options);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special_tokens applies the post-processor (e.g. a leading <bos>), as for completions
  // prompts; rendered chat prompts are encoded without (as vLLM does). Special tokens written
  // in the text are always recognised.
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens) const;
  // Unknown ids are skipped, as the reference does.
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens) const;
  std::optional<TokenId> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(TokenId id) const;
  // Distinct token strings, added tokens included (Rust get_vocab_size(true)).
  size_t vocab_size() const;

  CacheStats cache_stats() const;
  // Empties the segment and word caches (benchmarks measure cold runs with it).
  void clear_caches() const;

 private:
  Tokenizer(std::unique_ptr<Pipeline> pipeline, const Options& options);
  void encode_segment(std::string_view segment, bool at_origin, std::vector<TokenId>& ids,
                      EncodeScratch& scratch) const;
  // One cached unit: a segment, or a chunk of a long one.
  void encode_cached(std::string_view text, bool at_origin, std::vector<TokenId>& ids,
                     EncodeScratch& scratch) const;
  void encode_normalized(std::string_view text, bool at_origin, std::vector<TokenId>& ids,
                         EncodeScratch& scratch) const;

  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<SegmentCache> segment_cache_;
  size_t min_cached_segment_bytes_;
  // The pipeline encodes the two sides of a word cut independently (normalizer and
  // pre-tokenizer word_cut_safe), so long segments are cached in chunks.
  bool chunked_ = false;
  size_t chunk_bytes_ = 0;
};

}  // namespace infera::tokenizer
