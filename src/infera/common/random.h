// A small, fast, seedable pseudo-random generator (xoshiro256**, Blackman & Vigna 2018, seeded
// through splitmix64). Every random choice in infera goes through one, so a seed reproduces a run.
// Not thread-safe: each owner (a policy, a workload, a test) holds its own.
#pragma once

#include <cstdint>
#include <limits>

#include "infera/common/bits.h"

namespace infera {

// splitmix64 step: also a good 64-bit mixer for seeding and hashing small integers.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  using result_type = uint64_t;

  explicit Rng(uint64_t seed = 0) { reseed(seed); }

  void reseed(uint64_t seed) {
    uint64_t sm = seed;
    for (uint64_t& word : s_) word = splitmix64(sm);
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  uint64_t operator()() { return next(); }
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return std::numeric_limits<uint64_t>::max(); }

  // Uniform in [0, n) without modulo bias worth caring about (Lemire's multiply-shift).
  uint64_t uniform(uint64_t n) {
    return mul_hi64(next(), n);
  }
  // Uniform in [0, 1).
  double uniform_double() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace infera
