#include "infera/tokenizer/bpe.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>

#include "infera/common/rw_lock.h"
#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {

namespace {

// Words longer than this are tokenized without the shared cache (Rust's BPE cache has the same
// kind of bound): they are rare, and caching them would only churn the cache.
constexpr size_t kMaxCachedWordBytes = 256;
// Up to this many symbols the quadratic scan beats a heap (no allocation, tiny constant).
constexpr size_t kMaxQuadraticSymbols = 48;

uint64_t word_hash(std::string_view w) { return hash_bytes(w) | 1; }  // 0 marks empty slots

}  // namespace

// A bounded map word -> ids shared by every thread that tokenizes with one model. One slot is
// one cache line holding the hash, a word of up to 28 bytes and up to four ids, so a hit on a
// typical word costs a single cache miss; longer words and id lists spill to an arena. Lookups
// take the lock shared once per segment, inserts take it exclusively once per segment. When a
// budget (entries, spill size) would be exceeded the whole cache is cleared: a generational
// scheme that keeps memory bounded without per-entry LRU bookkeeping on the hot path.
class WordCache {
 public:
  explicit WordCache(size_t max_entries) : max_entries_(std::max<size_t>(max_entries, 16)) {
    size_t cap = 16;
    while (cap * 7 < max_entries_ * 10) cap *= 2;  // load factor <= 0.7
    // Anonymous memory: zero pages that only become resident when a slot is written, so an idle
    // or small cache costs little. Hits touch random lines of a multi-MiB table: 2 MiB pages
    // keep that free of TLB misses.
    bytes_ = cap * sizeof(Slot);
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    INFERA_CHECK(p != MAP_FAILED);
    madvise(p, bytes_, MADV_HUGEPAGE);
    slots_ = static_cast<Slot*>(p);
    capacity_ = cap;
    mask_ = cap - 1;
  }
  ~WordCache() { munmap(slots_, bytes_); }
  WordCache(const WordCache&) = delete;
  WordCache& operator=(const WordCache&) = delete;

  // Appends the cached ids of pieces[from], pieces[from + 1], ... to `out` while they hit, under
  // one shared lock; returns the index of the first piece that missed (or was not cacheable,
  // hash 0), or pieces.size().
  size_t append_hits(std::string_view work, const std::vector<Piece>& pieces,
                     const std::vector<uint64_t>& hashes, size_t from, std::vector<TokenId>& out) {
    std::shared_lock lock(lock_);
    for (size_t i = from; i < pieces.size(); ++i) {
      if (hashes[i] == 0) return i;
      const std::string_view w = work.substr(pieces[i].begin, pieces[i].end - pieces[i].begin);
      const Slot* s = find(w, hashes[i]);
      if (s == nullptr) return i;
      const TokenId* ids = s->n_ids <= kInlineIds ? s->ids : spill_.data() + s->spill_ids;
      for (uint32_t k = 0; k < s->n_ids; ++k) out.push_back(ids[k]);
    }
    return pieces.size();
  }

  void insert(std::string_view work, const std::vector<Piece>& pieces,
              const std::vector<uint64_t>& hashes, const std::vector<TokenId>& out,
              const BpeScratch& scratch) {
    std::unique_lock lock(lock_);
    for (size_t k = 0; k < scratch.miss_pieces.size(); ++k) {
      const size_t i = scratch.miss_pieces[k];
      if (hashes[i] == 0) continue;
      const std::string_view w = work.substr(pieces[i].begin, pieces[i].end - pieces[i].begin);
      if (find(w, hashes[i]) != nullptr) continue;
      const auto [off, n] = scratch.miss_results[k];
      const size_t spill = (w.size() > kInlineKey ? (w.size() + 3) / 4 : 0) + (n > kInlineIds ? n : 0);
      if (count_ + 1 > max_entries_ || spill_.size() + spill > max_entries_ * 8) clear();
      size_t pos = hashes[i] & mask_;
      while (slots_[pos].hash != 0) pos = (pos + 1) & mask_;
      Slot& s = slots_[pos];
      s.hash = hashes[i];
      s.key_len = static_cast<uint16_t>(w.size());
      s.n_ids = static_cast<uint16_t>(n);
      if (w.size() <= kInlineKey) {
        std::memcpy(s.key, w.data(), w.size());
      } else {
        s.spill_key = static_cast<uint32_t>(spill_.size());
        spill_.resize(spill_.size() + (w.size() + 3) / 4);
        std::memcpy(spill_.data() + s.spill_key, w.data(), w.size());
      }
      if (n <= kInlineIds) {
        std::copy(out.begin() + off, out.begin() + off + n, s.ids);
      } else {
        s.spill_ids = static_cast<uint32_t>(spill_.size());
        spill_.insert(spill_.end(), out.begin() + off, out.begin() + off + n);
      }
      ++count_;
    }
  }

  void clear_locked() {
    std::unique_lock lock(lock_);
    clear();
  }

 private:
  static constexpr size_t kInlineKey = 28;
  static constexpr size_t kInlineIds = 4;
  struct alignas(64) Slot {
    uint64_t hash;  // 0 = empty
    uint16_t key_len;
    uint16_t n_ids;
    uint32_t spill_key;  // offset in spill_ (in TokenId units) when key_len > kInlineKey
    uint32_t spill_ids;  // offset in spill_ when n_ids > kInlineIds
    TokenId ids[kInlineIds];
    char key[kInlineKey];
  };
  static_assert(sizeof(Slot) == 64, "a slot is one cache line");

  const Slot* find(std::string_view w, uint64_t h) const {
    size_t pos = h & mask_;
    while (true) {
      const Slot& s = slots_[pos];
      if (s.hash == 0) return nullptr;
      if (s.hash == h && s.key_len == w.size()) {
        const char* key = w.size() <= kInlineKey
                              ? s.key
                              : reinterpret_cast<const char*>(spill_.data() + s.spill_key);
        if (std::memcmp(key, w.data(), w.size()) == 0) return &s;
      }
      pos = (pos + 1) & mask_;
    }
  }

  void clear() {
    // Hands the pages back: they read as zero (empty slots) and cost nothing until reused.
    madvise(slots_, bytes_, MADV_DONTNEED);
    spill_.clear();
    spill_.shrink_to_fit();
    count_ = 0;
  }

  RwLock lock_;
  const size_t max_entries_;
  Slot* slots_ = nullptr;  // trivially copyable slots in anonymous, huge-page-advised memory
  size_t bytes_ = 0;
  size_t capacity_ = 0;
  size_t mask_ = 0;
  std::vector<TokenId> spill_;  // long keys (as bytes) and long id lists
  size_t count_ = 0;
};

std::atomic<uint64_t> g_next_bpe_id{1};

Bpe::Bpe(const Vocab& vocab, BpeOptions options)
    : vocab_(vocab),
      options_(std::move(options)),
      merges_(50),
      char_ids_(50),
      instance_id_(g_next_bpe_id.fetch_add(1, std::memory_order_relaxed)) {
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  std::fill(std::begin(byte_fallback_ids_), std::end(byte_fallback_ids_), -1);
}

Bpe::~Bpe() = default;

Result<std::unique_ptr<Bpe>> Bpe::create(const Vocab& vocab, const MergeList& merges,
                                         BpeOptions options) {
  std::unique_ptr<Bpe> bpe(new Bpe(vocab, std::move(options)));
  const BpeOptions& opt = bpe->options_;
  bpe->merges_.reserve(merges.size());
  const size_t prefix_len = opt.continuing_subword_prefix.size();
  bpe->merge_filter_.assign((size_t{1} << kFilterBits) / 64, 0);
  std::string joined;
  // Vocabularies built by BPE training give merge i the id of the previous merge plus one, so
  // the merged token is usually found by checking that guess before hashing (a sequential scan
  // of the arena instead of a cache miss per merge). Hash lookups of the parts are prefetched
  // a block ahead so their cache misses overlap.
  constexpr size_t kBlock = 16;
  uint64_t hashes[2 * kBlock];
  int64_t guess = -1;
  for (size_t block = 0; block < merges.size(); block += kBlock) {
    const size_t end = std::min(merges.size(), block + kBlock);
    for (size_t r = block; r < end; ++r) {
      hashes[2 * (r - block)] = hash_bytes(merges.left(r));
      hashes[2 * (r - block) + 1] = hash_bytes(merges.right(r));
      vocab.prefetch(hashes[2 * (r - block)]);
      vocab.prefetch(hashes[2 * (r - block) + 1]);
    }
    for (size_t rank = block; rank < end; ++rank) {
      const std::string_view a = merges.left(rank);
      const std::string_view b = merges.right(rank);
      const auto a_id = vocab.find_hashed(a, hashes[2 * (rank - block)]);
      const auto b_id = vocab.find_hashed(b, hashes[2 * (rank - block) + 1]);
      if (!a_id || !b_id) {
        return invalid_argument("model.merges[" + std::to_string(rank) + "]: token \"" +
                                std::string(a_id ? b : a) + "\" is not in the vocabulary");
      }
      if (b.size() < prefix_len) {
        return invalid_argument("model.merges[" + std::to_string(rank) + "]: token \"" +
                                std::string(b) + "\" is shorter than continuing_subword_prefix");
      }
      joined.assign(a);
      joined.append(b.substr(prefix_len));
      std::optional<TokenId> new_id;
      if (guess >= 0 && vocab.has_id(static_cast<TokenId>(guess)) &&
          vocab.token(static_cast<TokenId>(guess)) == joined) {
        new_id = static_cast<TokenId>(guess);
      } else {
        new_id = vocab.find(joined);
      }
      if (!new_id) {
        return invalid_argument("model.merges[" + std::to_string(rank) + "]: merged token \"" +
                                joined + "\" is not in the vocabulary");
      }
      guess = static_cast<int64_t>(*new_id) + 1;
      // A pair listed twice keeps its last rank, as the Rust HashMap built from the list does.
      const uint64_t key = (static_cast<uint64_t>(*a_id) << 32) | *b_id;
      *bpe->merges_.try_emplace(key).first = Merge{static_cast<uint32_t>(rank), *new_id};
      const size_t bit = filter_bit(key);
      bpe->merge_filter_[bit >> 6] |= uint64_t{1} << (bit & 63);
    }
  }
  if (opt.unk_token) bpe->unk_id_ = vocab.find(*opt.unk_token);
  bool all_fallback = true;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (const auto id = vocab.find(name)) {
      bpe->byte_fallback_ids_[b] = *id;
    } else {
      all_fallback = false;
    }
    if (opt.raw_bytes) {
      std::string c;
      unicode::append_utf8(c, byte_level_char(static_cast<uint8_t>(b)));
      const auto id = vocab.find(c);
      if (!id) {
        return invalid_argument("ByteLevel: the vocabulary lacks the byte-level character for byte " +
                                std::to_string(b));
      }
      bpe->byte_ids_[b] = *id;
    }
  }
  bpe->all_byte_fallback_ = all_fallback;
  if (!opt.raw_bytes) {
    for (size_t id = 0; id < vocab.id_limit(); ++id) {
      if (!vocab.has_id(static_cast<TokenId>(id))) continue;
      const std::string_view t = vocab.token(static_cast<TokenId>(id));
      if (t.empty() || unicode::char_len(static_cast<unsigned char>(t[0])) != t.size()) continue;
      size_t i = 0;
      const char32_t c = unicode::next_char(t, i);
      bpe->char_ids_.try_emplace(static_cast<uint64_t>(c) + 1, static_cast<TokenId>(id));
    }
  }
  if (opt.word_cache_entries > 0) bpe->cache_ = std::make_unique<WordCache>(opt.word_cache_entries);
  return bpe;
}

void Bpe::clear_cache() const {
  if (cache_) cache_->clear_locked();
}

void Bpe::word_symbols(std::string_view word, std::vector<TokenId>& symbols,
                       BpeScratch& scratch) const {
  symbols.clear();
  if (options_.raw_bytes) {
    for (const char c : word) symbols.push_back(static_cast<TokenId>(byte_ids_[static_cast<unsigned char>(c)]));
    return;
  }
  const bool decorate =
      !options_.continuing_subword_prefix.empty() || !options_.end_of_word_suffix.empty();
  // Rust BPE::merge_word: a pending unknown (fused when fuse_unk) is flushed before the next
  // known character or at the end; byte-fallback characters do not flush it.
  bool have_unk = false;
  std::string decorated;
  size_t i = 0;
  while (i < word.size()) {
    const size_t start = i;
    const char32_t c = unicode::next_char(word, i);
    std::optional<TokenId> id;
    std::string_view as_text = word.substr(start, i - start);
    if (!decorate) {
      if (const TokenId* found = char_ids_.find(static_cast<uint64_t>(c) + 1)) id = *found;
    } else {
      decorated.clear();
      if (start > 0) decorated.append(options_.continuing_subword_prefix);
      decorated.append(as_text);
      if (i == word.size()) decorated.append(options_.end_of_word_suffix);
      as_text = decorated;
      id = vocab_.find(decorated);
    }
    if (id) {
      if (have_unk) {
        symbols.push_back(*unk_id_);
        have_unk = false;
      }
      symbols.push_back(*id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = all_byte_fallback_;
      if (!all) {
        all = true;
        for (const char b : as_text) all = all && byte_fallback_ids_[static_cast<unsigned char>(b)] >= 0;
      }
      if (all) {
        for (const char b : as_text) {
          symbols.push_back(static_cast<TokenId>(byte_fallback_ids_[static_cast<unsigned char>(b)]));
        }
        continue;
      }
    }
    // Unknown character: Rust fails the encode when the unk token is missing from the
    // vocabulary; here the character is dropped (as tokenizers.js does).
    if (!unk_id_) continue;
    if (have_unk && !options_.fuse_unk) symbols.push_back(*unk_id_);
    have_unk = true;
  }
  if (have_unk) symbols.push_back(*unk_id_);
  (void)scratch;
}

void Bpe::merge_all(std::vector<TokenId>& s, BpeScratch& scratch) const {
  size_t n = s.size();
  if (n < 2) return;
  if (n > kMaxQuadraticSymbols) {
    merge_all_heap(s, scratch);
    return;
  }
  // Lowest rank first, leftmost among equal ranks: the order Rust's heap (rank, pos) yields.
  uint32_t ranks[kMaxQuadraticSymbols];
  TokenId ids[kMaxQuadraticSymbols];
  for (size_t i = 0; i + 1 < n; ++i) prefetch(s[i], s[i + 1], scratch);
  for (size_t i = 0; i + 1 < n; ++i) {
    const Merge m = lookup(s[i], s[i + 1], scratch);
    ranks[i] = m.rank;
    ids[i] = m.id;
  }
  while (true) {
    uint32_t best = kNoMerge;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (ranks[i] < best) {
        best = ranks[i];
        at = i;
      }
    }
    if (best == kNoMerge) break;
    s[at] = ids[at];
    // Drop symbol at+1 and pair `at`; pairs after it shift left by one.
    for (size_t i = at + 1; i + 1 < n; ++i) s[i] = s[i + 1];
    for (size_t i = at; i + 2 < n; ++i) {
      ranks[i] = ranks[i + 1];
      ids[i] = ids[i + 1];
    }
    --n;
    if (at > 0) prefetch(s[at - 1], s[at], scratch);
    if (at + 1 < n) prefetch(s[at], s[at + 1], scratch);
    if (at > 0) {
      const Merge m = lookup(s[at - 1], s[at], scratch);
      ranks[at - 1] = m.rank;
      ids[at - 1] = m.id;
    }
    if (at + 1 < n) {
      const Merge m = lookup(s[at], s[at + 1], scratch);
      ranks[at] = m.rank;
      ids[at] = m.id;
    }
  }
  s.resize(n);
}

void Bpe::merge_all_heap(std::vector<TokenId>& s, BpeScratch& scratch) const {
  // Rust Word::merge_all: a min-heap of (rank, position) with lazily discarded stale entries.
  const size_t n = s.size();
  auto& alive = scratch.sym_len;
  auto& prev = scratch.prev;
  auto& next = scratch.next;
  auto& heap = scratch.heap;
  alive.assign(n, 1);
  prev.resize(n);
  next.resize(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  const auto later = [](const BpeScratch::HeapEntry& a, const BpeScratch::HeapEntry& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  heap.clear();
  for (size_t i = 0; i + 1 < n; ++i) prefetch(s[i], s[i + 1], scratch);
  for (size_t i = 0; i + 1 < n; ++i) {
    const Merge m = lookup(s[i], s[i + 1], scratch);
    if (m.rank != kNoMerge) heap.push_back({m.rank, static_cast<uint32_t>(i), m.id});
  }
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const BpeScratch::HeapEntry top = heap.back();
    heap.pop_back();
    const uint32_t pos = top.pos;
    if (!alive[pos] || next[pos] < 0) continue;
    const auto right = static_cast<uint32_t>(next[pos]);
    const Merge current = lookup(s[pos], s[right], scratch);
    if (current.rank == kNoMerge || current.id != top.id) continue;  // stale entry
    s[pos] = top.id;
    alive[right] = 0;
    next[pos] = next[right];
    if (next[right] >= 0) prev[static_cast<size_t>(next[right])] = static_cast<int32_t>(pos);
    if (prev[pos] >= 0) {
      const auto p = static_cast<uint32_t>(prev[pos]);
      const Merge m = lookup(s[p], s[pos], scratch);
      if (m.rank != kNoMerge) {
        heap.push_back({m.rank, p, m.id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
    if (next[pos] >= 0) {
      const Merge m = lookup(s[pos], s[static_cast<size_t>(next[pos])], scratch);
      if (m.rank != kNoMerge) {
        heap.push_back({m.rank, pos, m.id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
  }
  size_t w = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) s[w++] = s[i];
  }
  s.resize(w);
}

void Bpe::claim_pair_cache(BpeScratch& scratch) const {
  if (scratch.pair_owner == instance_id_) return;
  scratch.pairs.assign(size_t{1} << kPairCacheBits, BpeScratch::PairEntry{0, 0, 0});
  scratch.pair_owner = instance_id_;
}

void Bpe::tokenize_word(std::string_view word, std::vector<TokenId>& out,
                        BpeScratch& scratch) const {
  if (word.empty()) return;
  claim_pair_cache(scratch);
  if (options_.ignore_merges) {
    std::optional<TokenId> whole;
    if (options_.raw_bytes) {
      scratch.bytes.clear();
      for (const char c : word) {
        unicode::append_utf8(scratch.bytes, byte_level_char(static_cast<unsigned char>(c)));
      }
      whole = vocab_.find(scratch.bytes);
    } else {
      whole = vocab_.find(word);
    }
    if (whole) {
      out.push_back(*whole);
      return;
    }
  }
  word_symbols(word, scratch.symbols, scratch);
  merge_all(scratch.symbols, scratch);
  out.insert(out.end(), scratch.symbols.begin(), scratch.symbols.end());
}

void Bpe::tokenize(std::string_view work, const std::vector<Piece>& pieces,
                   std::vector<TokenId>& out, BpeScratch& scratch) const {
  if (!cache_) {
    for (const Piece& p : pieces) tokenize_word(work.substr(p.begin, p.end - p.begin), out, scratch);
    return;
  }
  const size_t n = pieces.size();
  auto& hashes = scratch.hashes;
  hashes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t len = pieces[i].end - pieces[i].begin;
    hashes[i] = len <= kMaxCachedWordBytes ? word_hash(work.substr(pieces[i].begin, len)) : 0;
  }
  scratch.miss_pieces.clear();
  scratch.miss_results.clear();
  // Steady state: every word hits and the whole segment is one pass under one shared lock. A
  // miss leaves the lock, runs BPE (or reuses this call's earlier result) and resumes.
  for (size_t i = 0; i < n; ++i) {
    i = cache_->append_hits(work, pieces, hashes, i, out);
    if (i >= n) break;
    const std::string_view word = work.substr(pieces[i].begin, pieces[i].end - pieces[i].begin);
    if (hashes[i] != 0) {
      if (const uint32_t* k = scratch.local.find(hashes[i])) {
        const BpeScratch::LocalWord& lw = scratch.local_words[*k];
        if (std::string_view(scratch.local_keys).substr(lw.key_off, lw.key_len) == word) {
          const size_t at = out.size();
          out.resize(at + lw.count);  // the copied range lies before `at`: no overlap
          std::copy(out.begin() + lw.out_off, out.begin() + lw.out_off + lw.count,
                    out.begin() + static_cast<ptrdiff_t>(at));
          continue;
        }
      }
    }
    const size_t before = out.size();
    tokenize_word(word, out, scratch);
    if (hashes[i] != 0) {
      const auto count = static_cast<uint32_t>(out.size() - before);
      scratch.miss_pieces.push_back(i);
      scratch.miss_results.emplace_back(static_cast<uint32_t>(before), count);
      auto [slot, inserted] = scratch.local.try_emplace(
          hashes[i], static_cast<uint32_t>(scratch.local_words.size()));
      if (inserted) {
        scratch.local_words.push_back({static_cast<uint32_t>(scratch.local_keys.size()),
                                       static_cast<uint32_t>(word.size()),
                                       static_cast<uint32_t>(before), count});
        scratch.local_keys.append(word);
      }
      (void)slot;
    }
  }
  if (!scratch.miss_pieces.empty()) cache_->insert(work, pieces, hashes, out, scratch);
}

}  // namespace infera::tokenizer
