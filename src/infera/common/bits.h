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

// Hash tables store a key's code, the key times the Fibonacci constant: odd, so invertible
// modulo 2^64 (key_of gives the key back) and 0 stays 0. The code's high bits place the key
// ("fastrange"), which spreads random hashes and small sequential ids alike.
inline constexpr uint64_t kFibonacci = 0x9E3779B97F4A7C15ULL;
inline constexpr uint64_t kFibonacciInverse = [] {
  uint64_t inv = kFibonacci;  // Newton's iteration doubles the correct low bits each step
  for (int i = 0; i < 6; ++i) inv *= 2 - kFibonacci * inv;
  return inv;
}();
static_assert(kFibonacci * kFibonacciInverse == 1);
inline uint64_t code_of(uint64_t key) { return key * kFibonacci; }
inline uint64_t key_of(uint64_t code) { return code * kFibonacciInverse; }

// Asks the cache for the line holding `address`; never faults, so the address may be past the
// end of an array or 0. An asm statement rather than __builtin_prefetch: GCC 12 at -O2 deleted
// a loop whose body was two __builtin_prefetch calls behind a branch (found 2026-11-30: the KV
// index's batch prefetch had silently vanished; see docs/benchmarks.md).
inline void prefetch_line(uintptr_t address) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 (%0)" : : "r"(address));
#else
  __builtin_prefetch(reinterpret_cast<const void*>(address));
#endif
}

}  // namespace infera
