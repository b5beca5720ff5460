// GroupU64Map<V>: an open-addressing hash map from uint64 keys to small values whose insert
// and erase do no walk: a Swiss table (as in Abseil's), for the KV index's per-worker
// engine-hash tables, which take one insert and one erase per cached block.
//
// Slots are split into groups of 16; each slot has a control byte (empty, deleted, or 7 bits
// of the key's code), and the 16 control bytes of a group are matched at once with SSE2. A
// key's code is the key times an odd constant (invertible: for_each gives the keys back);
// its home group is the code's "fastrange" onto the group count, and probing moves to the
// next group only past a full one. So a lookup reads one control line and, for a match, one
// slot line; an insert writes the first free slot of its home group; an erase marks its slot
// empty, or deleted (a tombstone) when the group has no empty slot, because a full group may
// have sent other keys' probes on to the next group. Measured against FlatU64Map (Robin Hood,
// which moves a run of entries on every insert and erase) in docs/benchmarks.md: faster for
// insert and erase, slower for lookups that miss, one byte more per slot.
//
// Load: when free slots (not counting tombstones) fall to 1/8, the table grows by 1.25x if
// live entries fill more than 25/32 of it, else it is rebuilt at the same size without its
// tombstones; so it stays between about 62 % and 87.5 % full. Keys may be any uint64 (the
// key 0 is kept in a side slot). Pointers returned by find/insert are valid until the next
// insert or erase. Not thread-safe: the owner synchronises.
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "infera/common/bits.h"
#include "infera/common/table_memory.h"

namespace infera {

template <typename V>
class GroupU64Map {
  static_assert(std::is_trivially_copyable_v<V> && std::is_trivially_destructible_v<V>,
                "slots live in raw, zero-filled memory");
  struct Slot {
    uint64_t key;  // the key's code (code_of); meaningful only where the control byte is full
    V value;
  };

 public:
  GroupU64Map() = default;
  GroupU64Map(GroupU64Map&& o) noexcept { *this = std::move(o); }
  GroupU64Map& operator=(GroupU64Map&& o) noexcept {
    std::swap(slots_, o.slots_);
    std::swap(ctrl_, o.ctrl_);
    std::swap(groups_, o.groups_);
    std::swap(size_, o.size_);
    std::swap(growth_left_, o.growth_left_);
    std::swap(zero_, o.zero_);
    return *this;
  }
  ~GroupU64Map() { free_all(); }

  size_t size() const { return size_ + (zero_.present ? 1 : 0); }
  bool empty() const { return size() == 0; }
  size_t capacity() const { return groups_ * kGroup; }
  size_t memory_bytes() const { return capacity() * (sizeof(Slot) + 1); }

  V* find(uint64_t key) {
    if (key == 0) return zero_.find();
    if (!slots_) return nullptr;
    const size_t i = lookup(mix(key));
    return i == kNone ? nullptr : &slots_[i].value;
  }
  const V* find(uint64_t key) const { return const_cast<GroupU64Map*>(this)->find(key); }
  bool contains(uint64_t key) const { return find(key) != nullptr; }

  // Hints the cache that `key` will be looked up, inserted or erased soon: its home group's
  // control bytes and first slot line. Batch operations ask for all keys first.
  void prefetch(uint64_t key) const {
    if (!slots_) return;
    const size_t g = group_of(mix(key));
    prefetch_line(reinterpret_cast<uintptr_t>(ctrl_ + g * kGroup));
    prefetch_line(reinterpret_cast<uintptr_t>(slots_ + g * kGroup));
  }
  void prefetch_for_write(uint64_t key) const { prefetch(key); }

  // Returns the value for `key`, inserting `init` when absent; `.second` tells which.
  std::pair<V*, bool> try_emplace(uint64_t key, V init = V{}) {
    if (key == 0) return zero_.try_emplace(std::move(init));
    const uint64_t code = mix(key);
    if (slots_) {
      const size_t i = lookup(code);
      if (i != kNone) return {&slots_[i].value, false};
    }
    if (!slots_ || growth_left_ == 0) make_room();
    const size_t i = free_slot(code);
    if (ctrl_[i] == kEmpty) --growth_left_;
    ctrl_[i] = h2(code);
    slots_[i] = Slot{code, std::move(init)};
    ++size_;
    return {&slots_[i].value, true};
  }

  // Erases `key`, returning its value through `out`; false when absent.
  bool take(uint64_t key, V& out) {
    if (key == 0) return zero_.take(out);
    if (!slots_) return false;
    const size_t i = lookup(mix(key));
    if (i == kNone) return false;
    out = std::move(slots_[i].value);
    erase_slot(i);
    return true;
  }
  bool erase(uint64_t key) {
    V unused{};
    return take(key, unused);
  }
  // Erases the entry whose value `value` points at, as find or try_emplace returned it (and no
  // insert or erase since): no second lookup.
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
    free_all();
    slots_ = nullptr;
    ctrl_ = nullptr;
    groups_ = 0;
    size_ = 0;
    growth_left_ = 0;
    zero_.clear();
  }

  // Calls fn(key, value&) for every entry. fn must not insert or erase.
  template <typename Fn>
  void for_each(Fn&& fn) {
    if (zero_.present) fn(uint64_t{0}, zero_.value);
    for (size_t i = 0; i < capacity(); ++i) {
      if (ctrl_[i] < 0x80) fn(unmix(slots_[i].key), slots_[i].value);
    }
  }
  template <typename Fn>
  void for_each(Fn&& fn) const {
    const_cast<GroupU64Map*>(this)->for_each(
        [&](uint64_t k, V& v) { fn(k, static_cast<const V&>(v)); });
  }

  // Tombstones in the table (for tests: erases from full groups leave them).
  size_t tombstones() const {
    size_t n = 0;
    for (size_t i = 0; i < capacity(); ++i) n += ctrl_[i] == kDeleted ? 1 : 0;
    return n;
  }

 private:
  static constexpr size_t kGroup = 16;
  static constexpr size_t kNone = ~size_t{0};
  static constexpr uint8_t kEmpty = 0x80;
  static constexpr uint8_t kDeleted = 0xFE;
  static uint64_t mix(uint64_t key) { return code_of(key); }
  static uint64_t unmix(uint64_t code) { return key_of(code); }
  static uint8_t h2(uint64_t code) { return static_cast<uint8_t>(code & 0x7F); }
  size_t group_of(uint64_t code) const { return static_cast<size_t>(mul_hi64(code, groups_)); }
  size_t next_group(size_t g) const { return g + 1 == groups_ ? 0 : g + 1; }

  // Bit i set where control byte i of group g equals `byte` / is free (sign bit: empty or
  // deleted).
#if defined(__SSE2__)
  __m128i load(size_t g) const {
    return _mm_load_si128(reinterpret_cast<const __m128i*>(ctrl_ + g * kGroup));
  }
  static unsigned match(__m128i ctrl, uint8_t byte) {
    return static_cast<unsigned>(
        _mm_movemask_epi8(_mm_cmpeq_epi8(ctrl, _mm_set1_epi8(static_cast<char>(byte)))));
  }
  static unsigned free_bits(__m128i ctrl) { return static_cast<unsigned>(_mm_movemask_epi8(ctrl)); }
#else
  const uint8_t* load(size_t g) const { return ctrl_ + g * kGroup; }
  static unsigned match(const uint8_t* ctrl, uint8_t byte) {
    unsigned m = 0;
    for (size_t i = 0; i < kGroup; ++i) m |= static_cast<unsigned>(ctrl[i] == byte) << i;
    return m;
  }
  static unsigned free_bits(const uint8_t* ctrl) {
    unsigned m = 0;
    for (size_t i = 0; i < kGroup; ++i) m |= static_cast<unsigned>(ctrl[i] >> 7) << i;
    return m;
  }
#endif
  template <typename Ctrl>
  static unsigned empties(Ctrl ctrl) {
    return match(ctrl, kEmpty);
  }

  size_t lookup(uint64_t code) const {
    const uint8_t tag = h2(code);
    for (size_t g = group_of(code);; g = next_group(g)) {
      const auto c = load(g);
      for (unsigned m = match(c, tag); m != 0; m &= m - 1) {
        const size_t i = g * kGroup + static_cast<size_t>(__builtin_ctz(m));
        if (slots_[i].key == code) return i;
      }
      if (empties(c) != 0) return kNone;
    }
  }

  size_t free_slot(uint64_t code) const {
    for (size_t g = group_of(code);; g = next_group(g)) {
      const unsigned f = free_bits(load(g));
      if (f != 0) return g * kGroup + static_cast<size_t>(__builtin_ctz(f));
    }
  }

  void erase_slot(size_t i) {
    const size_t g = i / kGroup;
    // A group holding an empty slot has not been full since it last had none, so no probe
    // went on past it: the erased slot may become empty too. Otherwise it stays a tombstone,
    // which lookups pass over and inserts reuse.
    if (empties(load(g)) != 0) {
      ctrl_[i] = kEmpty;
      ++growth_left_;
    } else {
      ctrl_[i] = kDeleted;
    }
    slots_[i].key = 0;
    slots_[i].value = V{};
    --size_;
  }

  // Called when no free slot is left above the 1/8 reserve. Tombstones hold the rest: while
  // live entries are at most 25/32 of the slots (Abseil's rule), rebuilding at the same size
  // frees at least 3/32 of them, so churn at a constant size never grows the table.
  void make_room() {
    const size_t cap = capacity();
    if (cap != 0 && size_ * 32 <= cap * 25) {
      rehash(groups_);
    } else {
      rehash(groups_ < 4 ? groups_ + 1 : groups_ + groups_ / 4);
    }
  }

  void rehash(size_t new_groups) {
    Slot* old_slots = slots_;
    uint8_t* old_ctrl = ctrl_;
    const size_t old_cap = capacity();
    groups_ = new_groups;
    alloc();
    size_ = 0;
    growth_left_ = capacity() * 7 / 8;
    for (size_t i = 0; i < old_cap; ++i) {
      if (old_ctrl[i] >= 0x80) continue;
      const uint64_t code = old_slots[i].key;
      const size_t j = free_slot(code);
      ctrl_[j] = h2(code);
      slots_[j] = old_slots[i];
      ++size_;
      --growth_left_;
    }
    std::free(old_slots);
    std::free(old_ctrl);
  }

  void alloc() {
    const size_t n = capacity();
    slots_ = static_cast<Slot*>(alloc_table_memory(n * sizeof(Slot)));
    ctrl_ = static_cast<uint8_t*>(alloc_table_memory(n, kEmpty));
  }
  void free_all() {
    std::free(slots_);
    std::free(ctrl_);
  }

  Slot* slots_ = nullptr;
  uint8_t* ctrl_ = nullptr;
  size_t groups_ = 0;
  size_t size_ = 0;
  size_t growth_left_ = 0;
  ZeroKeySlot<V> zero_;
};

}  // namespace infera
