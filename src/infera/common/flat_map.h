// FlatU64Map<V>: an open-addressing hash map from uint64 keys to small values, for hot paths
// that hold millions of entries (the KV index, active load, the engine's prefix cache).
// Robin Hood linear probing with backward-shift deletion (no tombstones), one flat array of
// {code, value} slots, where a key's code is the key times an odd constant (invertible, so
// for_each gives the keys back). Capacity is any multiple of 16 (slot = multiply-shift
// "fastrange" of the code). By default the table grows by 1.25x at load 0.85, so it stays
// between 68 % and 85 % full: memory per entry is what the KV index's budget needs
// (docs/benchmarks.md). Tables that favour insert speed over memory (ActiveLoad) ask for a
// lower max load, which also grows them by 2x. Keys may be any uint64 (the key 0 is kept out
// of the array in a side slot). Pointers returned by find/insert are valid until the next
// insert or erase. Not thread-safe: the owner synchronises.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "infera/common/bits.h"
#include "infera/common/check.h"
#include "infera/common/table_memory.h"

namespace infera {

template <typename V>
class FlatU64Map {
  static_assert(std::is_trivially_copyable_v<V> && std::is_trivially_destructible_v<V>,
                "slots live in raw, zero-filled memory");

 public:
  struct Slot {
    uint64_t key;  // the key's code (mix); 0 = empty
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
    std::swap(zero_, o.zero_);
    return *this;
  }
  ~FlatU64Map() { free_slots(slots_); }

  size_t size() const { return size_ + (zero_.present ? 1 : 0); }
  bool empty() const { return size() == 0; }
  size_t capacity() const { return cap_; }
  // Bytes held by the table (slots only), for memory accounting.
  size_t memory_bytes() const { return capacity() * sizeof(Slot); }

  V* find(uint64_t key) {
    if (key == 0) return zero_.find();
    if (!slots_) return nullptr;
    const auto [i, found] = probe(mix(key));
    return found ? &slots_[i].value : nullptr;
  }
  const V* find(uint64_t key) const { return const_cast<FlatU64Map*>(this)->find(key); }
  bool contains(uint64_t key) const { return find(key) != nullptr; }

  // Hints the cache that `key` will be looked up soon. Batch operations prefetch every key
  // first so the cache misses overlap instead of queueing one after another.
  void prefetch(uint64_t key) const { prefetch_line(slot_address(key)); }
  // For a key about to be inserted or erased: both the home line and the next, since at this
  // table's load an insert shifts entries up to the next empty slot, often across a line.
  // (Asking for more lines where a cluster runs longer, a second stage once these arrived,
  // paid on one machine and cost more than it saved on another: docs/benchmarks.md.)
  void prefetch_for_write(uint64_t key) const {
    const uintptr_t at = slot_address(key);
    prefetch_line(at);
    prefetch_line(at + 64);
  }
  // Returns the value for `key`, inserting `init` when absent; `.second` tells which.
  std::pair<V*, bool> try_emplace(uint64_t key, V init = V{}) {
    if (key == 0) return zero_.try_emplace(std::move(init));
    if (!slots_ || (size_ + 1) * 100 > cap_ * max_load_percent_) {
      if (V* v = find(key)) return {v, false};
      grow();
    }
    // One walk: the key, or the slot where Robin Hood order puts it.
    const uint64_t code = mix(key);
    const auto [i, found] = probe(code);
    if (found) return {&slots_[i].value, false};
    return {place(i, code, std::move(init)), true};
  }

  bool erase(uint64_t key) {
    V unused{};
    return take(key, unused);
  }

  // Erases `key`, returning its value through `out`; false when absent. One walk.
  bool take(uint64_t key, V& out) {
    if (key == 0) return zero_.take(out);
    if (!slots_) return false;
    const auto [i, found] = probe(mix(key));
    if (!found) return false;
    out = std::move(slots_[i].value);
    erase_slot(i);
    return true;
  }

  // Erases the entry whose value `value` points at, as find or try_emplace returned it (and no
  // insert or erase since): no second walk to the key.
  void erase_found(V* value) {
    if (zero_.holds(value)) {
      zero_.clear();
      return;
    }
    const auto* slot =
        reinterpret_cast<const Slot*>(reinterpret_cast<char*>(value) - offsetof(Slot, value));
    erase_slot(static_cast<size_t>(slot - slots_));
  }

  void clear() {
    free_slots(slots_);
    slots_ = nullptr;
    cap_ = 0;
    size_ = 0;
    zero_.clear();
  }

  void reserve(size_t n) {
    const size_t cap = round_capacity(n * 100 / max_load_percent_ + 1);
    if (cap > cap_) rehash(cap);
  }

  // Room for `n` more entries in at most one rehash, where inserting them one by one would grow
  // the table step by step (a 512-block prompt into an empty table: eight rehashes). Grows by
  // at least the table's own step, so that repeated calls stay amortised.
  void reserve_more(size_t n) {
    const size_t want = size_ + n;
    if (slots_ && want * 100 <= cap_ * max_load_percent_) return;
    rehash(std::max(round_capacity(want * 100 / max_load_percent_ + 1), grown_capacity()));
  }

  // Calls fn(key, value&) for every entry. fn must not insert or erase.
  template <typename Fn>
  void for_each(Fn&& fn) {
    if (zero_.present) fn(uint64_t{0}, zero_.value);
    for (size_t i = 0; i < capacity(); ++i) {
      if (slots_[i].key != 0) fn(unmix(slots_[i].key), slots_[i].value);
    }
  }
  template <typename Fn>
  void for_each(Fn&& fn) const {
    const_cast<FlatU64Map*>(this)->for_each(
        [&](uint64_t k, V& v) { fn(k, static_cast<const V&>(v)); });
  }

 private:
  // Slots hold key codes (bits.h), so the home of a stored code, which the Robin Hood walks
  // compute for every slot they pass, is one multiply (fastrange onto [0, cap)).
  static uint64_t mix(uint64_t key) { return code_of(key); }
  static uint64_t unmix(uint64_t code) { return key_of(code); }
  size_t home(uint64_t code) const { return static_cast<size_t>(mul_hi64(code, cap_)); }
  size_t next(size_t i) const { return i + 1 == cap_ ? 0 : i + 1; }
  // The address of `key`'s home slot, as an integer: prefetching needs no valid pointer (an
  // empty table gives 0, and a prefetch never faults) and may run past the table's end.
  uintptr_t slot_address(uint64_t key) const {
    return reinterpret_cast<uintptr_t>(slots_) + home(mix(key)) * sizeof(Slot);
  }
  size_t distance(uint64_t code, size_t pos) const {
    const size_t h = home(code);
    return pos >= h ? pos - h : pos + cap_ - h;
  }
  static size_t round_capacity(size_t n) { return (n + 15) / 16 * 16; }

  // The slot holding `code` ({slot, true}), or else the slot where Robin Hood order puts it
  // ({slot, false}): the first empty slot or the first entry closer to its home than `code`
  // would be there (it cannot be further along). `code` != 0; the table is not empty.
  std::pair<size_t, bool> probe(uint64_t code) const {
    size_t i = home(code);
    for (size_t dist = 0;; ++dist, i = next(i)) {
      const uint64_t at = slots_[i].key;
      if (at == code) return {i, true};
      if (at == 0 || distance(at, i) < dist) return {i, false};
    }
  }

  // Empties slot `i`, then pulls the displaced entries after it one step towards their home.
  void erase_slot(size_t i) {
    size_t j = next(i);
    while (slots_[j].key != 0 && distance(slots_[j].key, j) > 0) {
      slots_[i] = std::move(slots_[j]);
      i = j;
      j = next(j);
    }
    slots_[i].key = 0;
    slots_[i].value = V{};
    --size_;
  }

  // Puts an absent code at `i`, the slot probe() gave: the run from `i` to the next empty slot
  // moves one step right (each entry ends one further from its home, the order is kept), so no
  // home is computed per moved entry. One pass: each slot takes the entry carried from its left
  // and hands its own on, until an empty slot takes the last one (a walk to the empty slot and
  // a move back from it cost one more hard-to-predict loop exit).
  V* place(size_t i, uint64_t code, V value) {
    Slot carry{code, std::move(value)};
    size_t j = i;
    for (;;) {
      Slot here = slots_[j];
      slots_[j] = carry;
      if (here.key == 0) break;
      carry = here;
      j = next(j);
    }
    ++size_;
    return &slots_[i].value;
  }

  // The capacity one growth step reaches.
  size_t grown_capacity() const {
    const size_t bigger = max_load_percent_ >= 75 ? cap_ + cap_ / 4 : cap_ * 2;
    return round_capacity(cap_ < 64 ? cap_ + 16 : bigger);
  }
  void grow() { rehash(grown_capacity()); }

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

  static Slot* alloc_slots(size_t n) {
    return static_cast<Slot*>(alloc_table_memory(n * sizeof(Slot)));
  }
  static void free_slots(Slot* p) { std::free(p); }

  Slot* slots_ = nullptr;
  size_t cap_ = 0;
  unsigned max_load_percent_ = 85;
  size_t size_ = 0;  // entries in slots_ (excludes the zero key)
  ZeroKeySlot<V> zero_;
};

}  // namespace infera
