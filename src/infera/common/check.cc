#include "infera/common/check.h"

#include <cstdio>
#include <cstdlib>

namespace infera::internal {

void check_failed(const char* file, int line, const char* condition) {
  std::fprintf(stderr, "infera: CHECK failed at %s:%d: %s\n", file, line, condition);
  std::fflush(stderr);
  std::abort();
}

}  // namespace infera::internal
