// TimingModel: how long one scheduler step of the simulated engine takes (docs/contracts.md
// section 9). The polynomials are NVIDIA Dynamo's mocker coefficients, fitted on real GPU profiles:
//   prefill ms = 4.209989e-7 t^2 + 1.518344e-2 t + 16.50142   (t = uncached prompt tokens)
//   decode  ms = max(1, -25.74 p^2 + 54.01 p + 5.74)          (p = used KV fraction, 0..1)
// A plain value with pure functions; any thread.
//
// Mixed steps (prefill chunks and decodes in one step), our decision:
//   step ms = (T > 0 ? prefill(T) : 0) + (D > 0 ? decode(p) : 0),  then / speedup_ratio
// with T = the uncached prompt tokens of every prefill chunk scheduled in the step (summed over
// requests, one evaluation), D = the number of decode rows (requests past their prefill), and
// p = the KV usage right after the step's blocks are allocated. This follows Dynamo's mocker,
// whose engine loop runs a pass as simulate_prefill (the prefill compute of the pass) followed
// by simulate_decode (one decode step at the current KV usage), so a pass lasts prefill plus
// decode (ai-dynamo/dynamo lib/mocker/src/scheduler/vllm.rs, simulate_prefill/simulate_decode;
// its README states the same: "a pass lasts prefill plus decode, and the first token of a
// prefill adds no decode time"). Where the mocker evaluates the prefill polynomial once per
// request and sums, we evaluate it once over the step's total T: a step is one forward pass,
// so its fixed ~16.5 ms overhead is paid once, and the profile's t is the tokens of a pass.
// A request whose prefill completes in a step samples its first token from that pass and is
// not a decode row.
#pragma once

#include <cstdint>

#include "infera/common/clock.h"

namespace infera::engine {

struct StepShape {
  uint64_t prefill_tokens = 0;  // uncached prompt tokens computed in the step (T)
  uint32_t decode_rows = 0;     // requests that each decode one token (D)
  double kv_usage = 0;          // used KV fraction after the step's allocation (p)
};

class TimingModel {
 public:
  explicit TimingModel(double speedup_ratio = 1.0) : speedup_ratio_(speedup_ratio) {}

  double speedup_ratio() const { return speedup_ratio_; }

  // Model milliseconds, before the speedup ratio.
  static double prefill_ms(double tokens);
  static double decode_ms(double kv_usage);
  static double step_ms(const StepShape& shape);

  // Wall (or virtual) duration of a step: step_ms / speedup_ratio, at least 1 ns so that time
  // always moves forward.
  Nanos step_duration(const StepShape& shape) const;
  // Duration of moving `bytes` over a link of `gb_per_s` (10^9 bytes per second), divided by
  // the speedup ratio; at least 1 ns.
  Nanos transfer_duration(uint64_t bytes, double gb_per_s) const;

 private:
  double speedup_ratio_;
};

}  // namespace infera::engine
