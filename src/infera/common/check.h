// The one way a bug stops the process: INFERA_CHECK(cond) aborts with the file, line and
// condition when cond is false, in every build type. Never use it on input the environment
// controls (client bytes, engine events, etcd values): those are Status values.
#pragma once

namespace infera::internal {
[[noreturn]] void check_failed(const char* file, int line, const char* condition);
}  // namespace infera::internal

#define INFERA_CHECK(cond)                                            \
  do {                                                                \
    if (!(cond)) [[unlikely]] {                                       \
      ::infera::internal::check_failed(__FILE__, __LINE__, #cond);    \
    }                                                                 \
  } while (false)
