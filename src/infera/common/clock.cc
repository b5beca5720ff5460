#include "infera/common/clock.h"

namespace infera {

Nanos SteadyClock::now() const {
  return std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace infera
