#include "infera/engine/timing_model.h"

#include <algorithm>
#include <cmath>

namespace infera::engine {

double TimingModel::prefill_ms(double t) {
  return 4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142;
}

double TimingModel::decode_ms(double p) {
  return std::max(1.0, -25.74 * p * p + 54.01 * p + 5.74);
}

double TimingModel::step_ms(const StepShape& s) {
  double ms = 0;
  if (s.prefill_tokens > 0) ms += prefill_ms(static_cast<double>(s.prefill_tokens));
  if (s.decode_rows > 0) ms += decode_ms(s.kv_usage);
  return ms;
}

Nanos TimingModel::step_duration(const StepShape& s) const {
  const double ns = std::round(step_ms(s) * 1e6 / speedup_ratio_);
  return Nanos(std::max<int64_t>(1, static_cast<int64_t>(ns)));
}

Nanos TimingModel::transfer_duration(uint64_t bytes, double gb_per_s) const {
  const double ns = std::round(static_cast<double>(bytes) / gb_per_s / speedup_ratio_);
  return Nanos(std::max<int64_t>(1, static_cast<int64_t>(ns)));
}

}  // namespace infera::engine
