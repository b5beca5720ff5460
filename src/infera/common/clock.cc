#include "infera/common/clock.h"

#include <pthread.h>
#include <time.h>

namespace infera {

Nanos SteadyClock::now() const {
  return std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch());
}

Nanos thread_cpu_time(const std::thread& thread) {
  if (!thread.joinable()) return Nanos(0);
  clockid_t clock;
  timespec ts{};
  // const_cast: native_handle() is not const, but reading the thread's clock changes nothing.
  if (pthread_getcpuclockid(const_cast<std::thread&>(thread).native_handle(), &clock) != 0 ||
      clock_gettime(clock, &ts) != 0) {
    return Nanos(0);
  }
  return Nanos(int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec);
}

}  // namespace infera
