#include "infera/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <system_error>

#include "infera/common/heap.h"
#include "infera/tokenizer/pipeline.h"
#include "infera/tokenizer/segment_cache.h"
#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {

// Working memory of one encode() call. Each thread keeps one and reuses it across calls, so a
// steady stream of requests allocates (and page-faults) nothing but the result; buffers a huge
// text grew are released afterwards to bound what an idle thread holds.
struct EncodeScratch {
  std::vector<AddedSplit> raw_splits;
  std::vector<AddedSplit> normalized_splits;
  std::string normalized;
  std::string work;
  std::vector<Piece> pieces;
  PreTokenizeScratch pre;
  BpeScratch bpe;
  bool in_use = false;

  // Per-call state that must not leak into the next call.
  void begin() {
    bpe.local.clear();
    bpe.local_words.clear();
    bpe.local_keys.clear();
  }
  void end() {
    constexpr size_t kKeepBytes = size_t{4} << 20;
    auto trim = [](auto& v) {
      if (v.capacity() * sizeof(v[0]) > kKeepBytes) {
        v.clear();
        v.shrink_to_fit();
      }
    };
    trim(normalized);
    trim(work);
    trim(pieces);
    trim(pre.next);
    trim(pre.spans);
    trim(bpe.hashes);
    trim(bpe.miss_pieces);
    trim(bpe.miss_results);
    trim(bpe.local_words);
    trim(bpe.local_keys);
  }
};

namespace {

// The calling thread's scratch, or a fresh one if it is already in use (a re-entrant call).
class ScratchLease {
 public:
  ScratchLease() {
    thread_local EncodeScratch cached;
    if (!cached.in_use) {
      scratch_ = &cached;
    } else {
      owned_ = std::make_unique<EncodeScratch>();
      scratch_ = owned_.get();
    }
    scratch_->in_use = true;
    scratch_->begin();
  }
  ~ScratchLease() {
    scratch_->end();
    scratch_->in_use = false;
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  EncodeScratch& get() { return *scratch_; }

 private:
  EncodeScratch* scratch_ = nullptr;
  std::unique_ptr<EncodeScratch> owned_;
};

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Pipeline> pipeline, const Options& options)
    : pipeline_(std::move(pipeline)), min_cached_segment_bytes_(options.min_cached_segment_bytes) {
  if (options.segment_cache_bytes > 0 && options.segment_cache_entries > 0) {
    segment_cache_ =
        std::make_unique<SegmentCache>(options.segment_cache_bytes, options.segment_cache_entries);
  }
  const Pipeline& p = *pipeline_;
  chunked_ = segment_cache_ && options.chunk_bytes > 0 && p.pre_tokenizer &&
             p.pre_tokenizer->word_cut_safe() && (!p.normalizer || p.normalizer->word_cut_safe()) &&
             !p.added->has_normalized() && !p.origin_sensitive;
  chunk_bytes_ = options.chunk_bytes;
}

Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_file(const std::filesystem::path& path) {
  return from_file(path, Options{});
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_file(const std::filesystem::path& path,
                                                        const Options& options) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return not_found("tokenizer file " + path.string() + " does not exist or is not a file");
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return not_found("cannot open tokenizer file " + path.string());
  std::string text;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) text.resize(size);
  const size_t got = ec ? 0 : std::fread(text.data(), 1, text.size(), f);
  std::fclose(f);
  if (ec || got != text.size()) return data_loss("error reading tokenizer file " + path.string());
  return from_json(text, path.string(), options);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view json,
                                                        std::string_view origin) {
  return from_json(json, origin, Options{});
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view json,
                                                        std::string_view origin,
                                                        const Options& options) {
  INFERA_ASSIGN_OR_RETURN(std::unique_ptr<Pipeline> pipeline,
                          load_pipeline(json, origin, options.word_cache_entries));
  // Loading freed tens of MB of parse buffers in small blocks; give those pages back to the
  // system instead of keeping them resident in malloc's free lists.
  release_free_heap();
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(pipeline), options));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!unicode::is_valid_utf8(text)) {
    repaired = unicode::to_valid_utf8(text);
    text = repaired;
  }
  ScratchLease lease;
  EncodeScratch& scratch = lease.get();
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 8);
  const Pipeline& p = *pipeline_;
  p.added->split_raw(text, scratch.raw_splits);
  for (const AddedSplit& s : scratch.raw_splits) {
    if (s.token >= 0) {
      ids.push_back(p.added->tokens()[static_cast<size_t>(s.token)].id);
    } else {
      encode_segment(text.substr(s.begin, s.end - s.begin), s.begin == 0, ids, scratch);
    }
  }
  if (add_special_tokens && p.post_processor) p.post_processor->add_special_tokens(ids);
  return ids;
}

namespace {

bool ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// The first word cut at or after `from`: a position i with an ASCII letter before it, a space
// at it and an ASCII letter after it; text.size() when there is none.
size_t next_word_cut(std::string_view text, size_t from) {
  for (size_t i = std::max<size_t>(from, 1); i + 1 < text.size(); ++i) {
    if (text[i] == ' ' && ascii_letter(text[i - 1]) && ascii_letter(text[i + 1])) return i;
  }
  return text.size();
}

}  // namespace

// A long segment is encoded, and cached, in chunks of about chunk_bytes_ cut at word cuts. The
// cuts depend only on the text from the segment's start, so two prompts that share a long
// prefix (a system prompt, a document, a few-shot block) share the chunks of that prefix, and
// only the rest is tokenized. Where the pipeline does not guarantee that both sides of a cut
// encode independently, segments stay whole.
void Tokenizer::encode_segment(std::string_view segment, bool at_origin, std::vector<TokenId>& ids,
                               EncodeScratch& scratch) const {
  if (!chunked_ || segment.size() < 2 * chunk_bytes_) {
    encode_cached(segment, at_origin, ids, scratch);
    return;
  }
  size_t begin = 0;
  while (begin < segment.size()) {
    const size_t cut = segment.size() - begin < 2 * chunk_bytes_
                           ? segment.size()
                           : next_word_cut(segment, begin + chunk_bytes_);
    encode_cached(segment.substr(begin, cut - begin), at_origin && begin == 0, ids, scratch);
    begin = cut;
  }
}

void Tokenizer::encode_cached(std::string_view segment, bool at_origin, std::vector<TokenId>& ids,
                              EncodeScratch& scratch) const {
  if (segment.empty()) return;
  const Pipeline& p = *pipeline_;
  const uint32_t flags = p.origin_sensitive && at_origin ? 1 : 0;
  const bool cacheable = segment_cache_ && segment.size() >= min_cached_segment_bytes_;
  if (cacheable && segment_cache_->lookup(segment, flags, ids)) return;
  const size_t start = ids.size();

  std::string_view normalized = segment;
  bool origin = at_origin;
  if (p.normalizer && p.normalizer->normalize(segment, scratch.normalized, origin)) {
    normalized = scratch.normalized;
  }
  if (p.added->has_normalized()) {
    p.added->split_normalized(normalized, scratch.normalized_splits);
    for (const AddedSplit& s : scratch.normalized_splits) {
      if (s.token >= 0) {
        ids.push_back(p.added->tokens()[static_cast<size_t>(s.token)].id);
      } else {
        encode_normalized(normalized.substr(s.begin, s.end - s.begin), origin && s.begin == 0, ids,
                          scratch);
      }
    }
  } else {
    encode_normalized(normalized, origin, ids, scratch);
  }
  if (cacheable) {
    segment_cache_->insert(segment, flags,
                           std::span<const TokenId>(ids.data() + start, ids.size() - start));
  }
}

void Tokenizer::encode_normalized(std::string_view text, bool at_origin, std::vector<TokenId>& ids,
                                  EncodeScratch& scratch) const {
  if (text.empty()) return;
  const Pipeline& p = *pipeline_;
  scratch.work.assign(text);
  scratch.pieces.clear();
  scratch.pieces.push_back(Piece{0, text.size(), at_origin});
  if (p.pre_tokenizer) p.pre_tokenizer->pre_tokenize(scratch.work, scratch.pieces, scratch.pre);
  p.model->tokenize(scratch.work, scratch.pieces, ids, scratch.bpe);
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  const Pipeline& p = *pipeline_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const TokenId id : ids) {
    std::string_view token;
    const AddedToken* added = p.added->by_id(id);
    if (added != nullptr) {
      token = added->content;
    } else if (p.vocab.has_id(id)) {
      token = p.vocab.token(id);
    } else {
      continue;  // unknown id: skipped, as Rust's filter_map does
    }
    if (skip_special_tokens) {
      // Rust checks the token string against the set of special token contents.
      const auto special = p.added->find(token);
      if (special) {
        const AddedToken* a = p.added->by_id(*special);
        if (a != nullptr && a->special) continue;
      }
    }
    if (added != nullptr && p.byte_level_decoder) {
      std::string spelled;
      for (const char c : token) {
        unicode::append_utf8(spelled, byte_level_char(static_cast<uint8_t>(c)));
      }
      tokens.push_back(std::move(spelled));
    } else {
      tokens.emplace_back(token);
    }
  }
  std::string out;
  if (p.decoder) {
    p.decoder->decode_chain(tokens);
    for (const std::string& t : tokens) out += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out.push_back(' ');
      out += tokens[i];
    }
  }
  return out;
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto id = pipeline_->added->find(token)) return id;
  return pipeline_->vocab.find(token);
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  if (const AddedToken* a = pipeline_->added->by_id(id)) return a->content;
  if (pipeline_->vocab.has_id(id)) return std::string(pipeline_->vocab.token(id));
  return std::nullopt;
}

size_t Tokenizer::vocab_size() const { return pipeline_->vocab_size; }

Tokenizer::CacheStats Tokenizer::cache_stats() const {
  CacheStats st;
  if (segment_cache_) {
    const SegmentCacheStats s = segment_cache_->stats();
    st.segment_hits = s.hits;
    st.segment_misses = s.misses;
    st.segment_evictions = s.evictions;
    st.segment_entries = s.entries;
    st.segment_bytes = s.bytes;
  }
  return st;
}

void Tokenizer::clear_caches() const {
  if (segment_cache_) segment_cache_->clear();
  pipeline_->model->clear_cache();
}

}  // namespace infera::tokenizer
