// FlatU64Map<V>: an open-addressing hash map from uint64 keys to small values, for hot paths
// that hold millions of entries (the KV index, active load, the engine's prefix cache).
// Robin Hood linear probing with backward-shift deletion (no tombstones), one flat array of
// {key, value} slots. Capacity is any multiple of 16 (slot = multiply-shift "fastrange" of the
// mixed key). By default the table grows by 1.25x at load 0.85, so it stays between 68 % and
// 85 % full: memory per entry is what the KV index's budget needs (docs/benchmarks.md). Tables
// that favour insert speed over memory (ActiveLoad) ask for a lower max load, which also
// grows them by 2x. Keys may be any
// uint64 (the key 0 is kept out of the array in a side slot). Pointers returned by find/insert
// are valid until the next insert or erase. Not thread-safe: the owner synchronises.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>

#include "infera/common/bits.h"
#include "infera/common/check.h"

namespace infera {

template <typename V>
class FlatU64Map {
  static_assert(std::is_trivially_copyable_v<V> && std::is_trivially_destructible_v<V>,
                "slots live in raw, zero-filled memory");

 public:
  struct Slot {
    uint64_t key;  // 0 = empty
    V value;
  };

  FlatU64Map() = default;
  // `max_load_percent` in [20, 90]: 85 is dense, 50 trades memory for faster inserts.
  explicit FlatU64Map(unsigned max_load_percent) : max_load_percent_(max_load_percent) {
    INFERA_CHECK(max_load_percent >= 20 && max_load_percent <= 90);
  }
  FlatU64Map(FlatU64Map&& o) noexcept { *this = std::move(o); }
  FlatU64Map& operator=(FlatU64Map&& o) noexcept {
    std::swap(slots_, o.slots_);
    std::swap(cap_, o.cap_);
    std::swap(size_, o.size_);
    std::swap(max_load_percent_, o.max_load_percent_);
    std::swap(has_zero_, o.has_zero_);
    std::swap(zero_value_, o.zero_value_);
    return *this;
  }
  ~FlatU64Map() { free_slots(slots_); }

  size_t size() const { return size_ + (has_zero_ ? 1 : 0); }
  bool empty() const { return size() == 0; }
  size_t capacity() const { return cap_; }
  // Bytes held by the table (slots only), for memory accounting.
  size_t memory_bytes() const { return capacity() * sizeof(Slot); }

  V* find(uint64_t key) {
    if (key == 0) return has_zero_ ? &zero_value_ : nullptr;
    if (!slots_) return nullptr;
    const auto [i, found] = probe(key);
    return found ? &slots_[i].value : nullptr;
  }
  const V* find(uint64_t key) const { return const_cast<FlatU64Map*>(this)->find(key); }
  bool contains(uint64_t key) const { return find(key) != nullptr; }

  // Hints the cache that `key` will be looked up soon. Batch operations prefetch every key
  // first so the cache misses overlap instead of queueing one after another.
  void prefetch(uint64_t key) const { prefetch_line(slot_address(key)); }
  // For a key about to be inserted or erased: both the home line and the next, since at this
  // table's load an insert shifts entries up to the next empty slot, often across a line.
  void prefetch_for_write(uint64_t key) const {
    const uintptr_t at = slot_address(key);
    prefetch_line(at);
    prefetch_line(at + 64);
  }
  // The second stage of a batch insert or erase, once the lines prefetch_for_write asked for
  // have arrived: when `key`'s cluster runs past them (no empty slot), asks for the next two
  // lines as well, so no operation of the batch then waits on a miss of its own.
  void prefetch_cluster(uint64_t key) const {
    if (!slots_) return;
    size_t i = home(key);
    const uintptr_t at = reinterpret_cast<uintptr_t>(&slots_[i]);
    for (size_t n = (128 - (at & 63)) / sizeof(Slot); n > 0; --n, i = next(i)) {
      if (slots_[i].key == 0) return;
    }
    prefetch_line(at + 128);
    prefetch_line(at + 192);
  }

  // Returns the value for `key`, inserting `init` when absent; `.second` tells which.
  std::pair<V*, bool> try_emplace(uint64_t key, V init = V{}) {
    if (key == 0) {
      if (has_zero_) return {&zero_value_, false};
      has_zero_ = true;
      zero_value_ = std::move(init);
      return {&zero_value_, true};
    }
    if (!slots_ || (size_ + 1) * 100 > cap_ * max_load_percent_) {
      if (V* v = find(key)) return {v, false};
      grow();
    }
    // One walk: the key, or the slot where Robin Hood order puts it.
    const auto [i, found] = probe(key);
    if (found) return {&slots_[i].value, false};
    return {place(i, key, std::move(init)), true};
  }

  bool erase(uint64_t key) {
    if (key == 0) {
      if (!has_zero_) return false;
      has_zero_ = false;
      zero_value_ = V{};
      return true;
    }
    if (!slots_) return false;
    auto [i, found] = probe(key);
    if (!found) return false;
    // Backward-shift: pull following displaced entries one step towards their home.
    size_t j = next(i);
    while (slots_[j].key != 0 && distance(slots_[j].key, j) > 0) {
      slots_[i] = std::move(slots_[j]);
      i = j;
      j = next(j);
    }
    slots_[i].key = 0;
    slots_[i].value = V{};
    --size_;
    return true;
  }

  void clear() {
    free_slots(slots_);
    slots_ = nullptr;
    cap_ = 0;
    size_ = 0;
    has_zero_ = false;
    zero_value_ = V{};
  }

  void reserve(size_t n) {
    const size_t cap = round_capacity(n * 100 / max_load_percent_ + 1);
    if (cap > cap_) rehash(cap);
  }

  // Calls fn(key, value&) for every entry. fn must not insert or erase.
  template <typename Fn>
  void for_each(Fn&& fn) {
    if (has_zero_) fn(uint64_t{0}, zero_value_);
    for (size_t i = 0; i < capacity(); ++i) {
      if (slots_[i].key != 0) fn(slots_[i].key, slots_[i].value);
    }
  }
  template <typename Fn>
  void for_each(Fn&& fn) const {
    const_cast<FlatU64Map*>(this)->for_each(
        [&](uint64_t k, V& v) { fn(k, static_cast<const V&>(v)); });
  }

 private:
  // Multiplicative (Fibonacci) mix, then Lemire's fastrange maps it onto [0, cap): good for
  // random hashes and for small sequential ids alike, and needs no power-of-two capacity.
  size_t home(uint64_t key) const {
    const uint64_t mixed = key * 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>(mul_hi64(mixed, cap_));
  }
  size_t next(size_t i) const { return i + 1 == cap_ ? 0 : i + 1; }
  // The address of `key`'s home slot, as an integer: prefetching needs no valid pointer (an
  // empty table gives 0, and a prefetch never faults) and may run past the table's end.
  uintptr_t slot_address(uint64_t key) const {
    return reinterpret_cast<uintptr_t>(slots_) + home(key) * sizeof(Slot);
  }
  size_t distance(uint64_t key, size_t pos) const {
    const size_t h = home(key);
    return pos >= h ? pos - h : pos + cap_ - h;
  }
  static size_t round_capacity(size_t n) { return (n + 15) / 16 * 16; }

  // The slot holding `key` ({slot, true}), or else the slot where Robin Hood order puts it
  // ({slot, false}): the first empty slot or the first entry closer to its home than `key`
  // would be there (the key cannot be further along). `key` != 0; the table is not empty.
  std::pair<size_t, bool> probe(uint64_t key) const {
    size_t i = home(key);
    for (size_t dist = 0;; ++dist, i = next(i)) {
      const uint64_t at = slots_[i].key;
      if (at == key) return {i, true};
      if (at == 0 || distance(at, i) < dist) return {i, false};
    }
  }

  // Puts an absent key at `i`, the slot probe() gave: the run from `i` to the next empty slot
  // moves one step right (each entry ends one further from its home, the order is kept), so no
  // home is computed per moved entry.
  V* place(size_t i, uint64_t key, V value) {
    size_t j = i;
    while (slots_[j].key != 0) j = next(j);
    while (j != i) {
      const size_t before = j == 0 ? cap_ - 1 : j - 1;
      slots_[j] = std::move(slots_[before]);
      j = before;
    }
    slots_[i] = Slot{key, std::move(value)};
    ++size_;
    return &slots_[i].value;
  }

  void grow() {
    const size_t bigger = max_load_percent_ >= 75 ? cap_ + cap_ / 4 : cap_ * 2;
    rehash(round_capacity(cap_ < 64 ? cap_ + 16 : bigger));
  }

  void rehash(size_t new_cap) {
    INFERA_CHECK(new_cap % 16 == 0 && new_cap > size_);
    Slot* old = slots_;
    const size_t old_cap = old != nullptr ? cap_ : 0;  // the first table has no old slots
    slots_ = alloc_slots(new_cap);
    cap_ = new_cap;
    size_ = 0;
    for (size_t i = 0; i < old_cap; ++i) {
      if (old[i].key != 0) place(probe(old[i].key).first, old[i].key, std::move(old[i].value));
    }
    free_slots(old);
  }

  // Zero-filled slot memory. Tables of 2 MiB and more are 2 MiB-aligned and advised to use
  // transparent huge pages: at fleet scale every lookup is a random access into tens of MiB,
  // and 4 KiB pages would add a TLB miss to each cache miss.
  static constexpr size_t kHugePage = size_t{2} << 20;
  static Slot* alloc_slots(size_t n) {
    const size_t bytes = n * sizeof(Slot);
    void* p = nullptr;
    if (bytes >= kHugePage) {
      const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
      p = std::aligned_alloc(kHugePage, rounded);
      INFERA_CHECK(p != nullptr);
      madvise(p, rounded, MADV_HUGEPAGE);
    } else {
      p = std::malloc(bytes);
      INFERA_CHECK(p != nullptr);
    }
    std::memset(p, 0, bytes);
    return static_cast<Slot*>(p);
  }
  static void free_slots(Slot* p) { std::free(p); }

  Slot* slots_ = nullptr;
  size_t cap_ = 0;
  unsigned max_load_percent_ = 85;
  size_t size_ = 0;  // entries in slots_ (excludes the zero key)
  bool has_zero_ = false;
  V zero_value_{};
};

}  // namespace infera
