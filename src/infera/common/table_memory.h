// What the flat hash tables (FlatU64Map, GroupU64Map) share: their slot memory, and the side
// slot of the key 0 (which marks empty slots in their arrays).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "infera/common/check.h"

namespace infera {

// Arrays of 2 MiB and more are 2 MiB-aligned and advised to use transparent huge pages: at
// fleet scale every lookup is a random access into tens of MiB, and 4 KiB pages would add a
// TLB miss to each cache miss. Release with std::free.
inline void* alloc_table_memory(size_t bytes, int fill = 0) {
  constexpr size_t kHugePage = size_t{2} << 20;
  void* p = nullptr;
  if (bytes >= kHugePage) {
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    p = std::aligned_alloc(kHugePage, rounded);
    INFERA_CHECK(p != nullptr);
    madvise(p, rounded, MADV_HUGEPAGE);
  } else {
    p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    INFERA_CHECK(p != nullptr);
  }
  std::memset(p, fill, bytes);
  return p;
}

template <typename V>
struct ZeroKeySlot {
  bool present = false;
  V value{};

  V* find() { return present ? &value : nullptr; }
  std::pair<V*, bool> try_emplace(V init) {
    if (present) return {&value, false};
    present = true;
    value = std::move(init);
    return {&value, true};
  }
  bool take(V& out) {
    if (!present) return false;
    out = std::move(value);
    clear();
    return true;
  }
  bool holds(const V* v) const { return v == &value; }
  void clear() {
    present = false;
    value = V{};
  }
};

}  // namespace infera
