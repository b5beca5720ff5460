// Time as an injected dependency. Logic never reads the system clock directly: it asks a Clock,
// so tests and `infera sim` can run the same code in virtual time. Times are nanoseconds since
// an arbitrary epoch (monotonic); only differences are meaningful.
// SteadyClock and ManualClock are safe to call from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace infera {

using Nanos = std::chrono::nanoseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Nanos now() const = 0;
};

// The process's monotonic clock (std::chrono::steady_clock).
class SteadyClock final : public Clock {
 public:
  Nanos now() const override;
};

// A clock that moves only when told to: tests, virtual-time simulation.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Nanos start = Nanos(0)) : now_ns_(start.count()) {}
  Nanos now() const override { return Nanos(now_ns_.load(std::memory_order_acquire)); }
  void advance(Nanos by) { now_ns_.fetch_add(by.count(), std::memory_order_acq_rel); }
  void set(Nanos to) { now_ns_.store(to.count(), std::memory_order_release); }

 private:
  std::atomic<int64_t> now_ns_;
};

// CPU time `thread` has used so far; 0 when it is not running or the clock cannot be read. For
// benchmarks and stats that want a thread's own cost whatever else runs on the machine.
Nanos thread_cpu_time(const std::thread& thread);

inline double to_ms(Nanos d) { return static_cast<double>(d.count()) / 1e6; }
inline double to_seconds(Nanos d) { return static_cast<double>(d.count()) / 1e9; }
inline Nanos from_ms(double ms) { return Nanos(static_cast<int64_t>(ms * 1e6)); }
inline Nanos from_seconds(double s) { return Nanos(static_cast<int64_t>(s * 1e9)); }

}  // namespace infera
