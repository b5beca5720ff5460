// SpinMutex: a mutex for sections of a microsecond or two that the request threads contend
// for (a routing decision and what it registers, one worker's load, the upstream pool, the
// segment cache). A contended std::mutex sleeps in a futex and needs a second system call to be
// woken: 5-20 us on these shared machines, many times the section it waited for, and a context
// switch on both sides. This one first retries for a while (~200 tries, ~10 us), then blocks
// like std::mutex. Meets the Lockable requirements (std::lock_guard, std::unique_lock,
// std::scoped_lock). Any thread.
//
// Measured with scripts/bench-proxy (docs/benchmarks.md, "Proxy cost"): at 64 connections on
// one worker, the gateway blocked in futex() 0.4 times per request with std::mutex, under the
// router's, the worker's load and the pool's locks; with this lock req/s rose 1-2 %, within the
// run's noise, and the context switches went with the sleeps.
#pragma once

#include <mutex>

namespace infera {

class SpinMutex {
 public:
  SpinMutex() = default;
  SpinMutex(const SpinMutex&) = delete;
  SpinMutex& operator=(const SpinMutex&) = delete;

  void lock() {
    for (int i = 0; i < kSpins; ++i) {
      if (mu_.try_lock()) return;
      spin_pause();
    }
    mu_.lock();
  }
  bool try_lock() { return mu_.try_lock(); }
  void unlock() { mu_.unlock(); }

 private:
  static constexpr int kSpins = 200;
  static void spin_pause() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  std::mutex mu_;
};

}  // namespace infera
