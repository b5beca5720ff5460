// Bpe: tokenizer.json's byte-pair-encoding model as the Rust crate applies it: per word, chars
// (or byte-fallback / unknown tokens) become symbols, then the lowest-ranked merge applies
// first, leftmost on ties; ignore_merges, continuing_subword_prefix and end_of_word_suffix too.
// In raw-byte mode (after a final ByteLevel) words are raw bytes, each standing for its GPT-2
// character. Short words' results live in a bounded word cache shared by all threads.
// Immutable after load; tokenize() is const and thread-safe (the cache locks internally).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infera/common/flat_map.h"
#include "infera/common/status.h"
#include "infera/tokenizer/pre_tokenizer.h"
#include "infera/tokenizer/vocab.h"

namespace infera::tokenizer {

class WordCache;

// Merge rules in rank order, as token-string pairs stored in one arena.
class MergeList {
 public:
  void add(std::string_view left, std::string_view right) {
    items_.push_back({static_cast<uint32_t>(text_.size()), static_cast<uint32_t>(left.size()),
                      static_cast<uint32_t>(text_.size() + left.size()),
                      static_cast<uint32_t>(right.size())});
    text_.append(left);
    text_.append(right);
  }
  size_t size() const { return items_.size(); }
  std::string_view left(size_t i) const { return view(items_[i].left_off, items_[i].left_len); }
  std::string_view right(size_t i) const { return view(items_[i].right_off, items_[i].right_len); }

 private:
  struct Item {
    uint32_t left_off, left_len, right_off, right_len;
  };
  std::string_view view(uint32_t off, uint32_t len) const {
    return std::string_view(text_).substr(off, len);
  }
  std::string text_;
  std::vector<Item> items_;
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool raw_bytes = false;  // words are raw bytes of GPT-2 byte-level text
  size_t word_cache_entries = 65536;  // 0 disables the shared word cache
};

// Per-call scratch, reused across the words and segments of one encode call.
struct BpeScratch {
  std::vector<TokenId> symbols;
  std::vector<uint32_t> ranks;
  std::vector<TokenId> merged_ids;
  std::vector<uint32_t> sym_len;  // heap path
  std::vector<int32_t> prev, next;
  struct HeapEntry {
    uint32_t rank;
    uint32_t pos;
    TokenId id;
  };
  std::vector<HeapEntry> heap;
  std::string bytes;  // raw-byte word as byte-level text (ignore_merges lookups)
  std::vector<size_t> miss_pieces;
  std::vector<std::pair<uint32_t, uint32_t>> miss_results;  // (offset into `out`, count)
  std::vector<uint64_t> hashes;  // per piece; 0 = not cacheable
  // Words first tokenized during this call (all segments of one encode share `out`), so a word
  // repeated within one text runs BPE once even before the shared cache has it.
  struct LocalWord {
    uint32_t key_off, key_len, out_off, count;
  };
  FlatU64Map<uint32_t> local{50};
  std::vector<LocalWord> local_words;
  std::string local_keys;
  // A small direct-mapped cache of merge-table lookups (pair -> rank, id), kept by the thread
  // across calls: text repeats the same symbol pairs, and this stays in L2 while the merge
  // table (megabytes) does not. `pair_owner` names the model the entries belong to.
  struct PairEntry {
    uint64_t key_plus_one;  // 0 = empty
    uint32_t rank;
    TokenId id;
  };
  std::vector<PairEntry> pairs;
  uint64_t pair_owner = 0;
};

class Bpe {
 public:
  // `vocab` is the model vocabulary (it must outlive the model).
  static Result<std::unique_ptr<Bpe>> create(const Vocab& vocab, const MergeList& merges,
                                             BpeOptions options);
  ~Bpe();
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;

  // Appends the ids of the words work[p.begin, p.end) for each piece, in order.
  void tokenize(std::string_view work, const std::vector<Piece>& pieces, std::vector<TokenId>& out,
                BpeScratch& scratch) const;
  // One word, without the word cache (tests, fuzzing).
  void tokenize_word(std::string_view word, std::vector<TokenId>& out, BpeScratch& scratch) const;

  bool raw_bytes() const { return options_.raw_bytes; }
  // Empties the shared word cache.
  void clear_cache() const;

 private:
  struct Merge {
    uint32_t rank;
    TokenId id;
  };
  static constexpr uint32_t kNoMerge = UINT32_MAX;
  static constexpr size_t kPairCacheBits = 13;
  Bpe(const Vocab& vocab, BpeOptions options);
  const Merge* find_merge(TokenId a, TokenId b) const {
    return merges_.find((static_cast<uint64_t>(a) << 32) | b);
  }
  // The merge of (a, b) through the thread's pair cache; rank kNoMerge when there is none.
  Merge lookup(TokenId a, TokenId b, BpeScratch& scratch) const {
    const uint64_t key = (static_cast<uint64_t>(a) << 32) | b;
    BpeScratch::PairEntry& e =
        scratch.pairs[(key * 0x9E3779B97F4A7C15ULL) >> (64 - kPairCacheBits)];
    if (e.key_plus_one == key + 1) return Merge{e.rank, e.id};
    const Merge* m = may_merge(key) ? merges_.find(key) : nullptr;
    const Merge r = m ? *m : Merge{kNoMerge, 0};
    e = BpeScratch::PairEntry{key + 1, r.rank, r.id};
    return r;
  }
  // Starts fetching the table slot of (a, b) unless the pair cache has it: lookups issued
  // together then wait for memory together instead of one after another.
  void prefetch(TokenId a, TokenId b, const BpeScratch& scratch) const {
    const uint64_t key = (static_cast<uint64_t>(a) << 32) | b;
    const BpeScratch::PairEntry& e =
        scratch.pairs[(key * 0x9E3779B97F4A7C15ULL) >> (64 - kPairCacheBits)];
    if (e.key_plus_one != key + 1 && may_merge(key)) merges_.prefetch(key);
  }
  // A 512 KiB bit filter over the merge pairs: most pairs in a word have no merge, and this
  // answers "no" from L2 where the merge table (megabytes) would cost a memory access.
  static constexpr size_t kFilterBits = 22;
  static size_t filter_bit(uint64_t key) { return (key * 0xD6E8FEB86659FD93ULL) >> (64 - kFilterBits); }
  bool may_merge(uint64_t key) const {
    const size_t bit = filter_bit(key);
    return (merge_filter_[bit >> 6] >> (bit & 63)) & 1;
  }
  void claim_pair_cache(BpeScratch& scratch) const;
  void word_symbols(std::string_view word, std::vector<TokenId>& symbols,
                    BpeScratch& scratch) const;
  void merge_all(std::vector<TokenId>& symbols, BpeScratch& scratch) const;
  void merge_all_heap(std::vector<TokenId>& symbols, BpeScratch& scratch) const;

  const Vocab& vocab_;
  BpeOptions options_;
  FlatU64Map<Merge> merges_;
  std::vector<uint64_t> merge_filter_;
  std::optional<TokenId> unk_id_;
  int64_t byte_ids_[256];           // raw-byte mode: id of each byte's stand-in character
  int64_t byte_fallback_ids_[256];  // "<0xAB>" tokens, -1 when absent
  bool all_byte_fallback_ = false;
  FlatU64Map<TokenId> char_ids_;    // code point + 1 -> id of the one-character token
  std::unique_ptr<WordCache> cache_;
  uint64_t instance_id_;  // process-unique, tags the entries of a thread's pair cache
};

}  // namespace infera::tokenizer
