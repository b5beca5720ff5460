// Small bit-level helpers shared by hash tables and random numbers.
#pragma once

#include <cstdint>

namespace infera {

__extension__ typedef unsigned __int128 uint128_t;

// The high 64 bits of the 128-bit product: Lemire's "fastrange" maps a 64-bit hash onto
// [0, n) with mul_hi64(hash, n), without a division.
inline uint64_t mul_hi64(uint64_t a, uint64_t b) {
  return static_cast<uint64_t>((static_cast<uint128_t>(a) * b) >> 64);
}

}  // namespace infera
