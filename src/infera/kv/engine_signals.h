// EngineSignals: what each worker's engine itself reports about its load, as vLLM's /metrics
// names it (vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc).
// The owner polls (the gateway's fleet upkeep over HTTP, the simulator from its engine models in
// virtual time) and records readings here; the router reads them, aged: a reading older than the
// caller's max_age is not used, so a worker whose /metrics is missing, slow or garbage falls back
// to the router's own block-based load (ActiveLoad) without anything else to do.
//
// Concurrency: one reading per worker in atomics, written by the poller and read by request
// threads without locks; a reader may see fields of two consecutive readings, which is harmless
// for a load estimate. Any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "infera/common/clock.h"
#include "infera/kv/predicted_blocks.h"

namespace infera::kv {

struct EngineReading {
  uint32_t waiting = 0;  // requests queued, not yet scheduled
  uint32_t running = 0;  // requests scheduled (prefilling or decoding)
  double kv_usage = 0;   // fraction of the KV cache held by running requests, 0..1
  Nanos at{0};           // when it was read (the owner's clock)
  // The router's own requests on that worker when the reading was taken (ActiveLoad's
  // active_requests and prefill_requests), so that the engine's count is compared with ours at
  // the same instant, not with ours now (a request of ours that finished since the reading is
  // not someone else's).
  uint32_t ours_active = 0;
  uint32_t ours_prefill = 0;
};

class EngineSignals {
 public:
  EngineSignals(uint32_t max_workers, const Clock& clock);
  ~EngineSignals();
  EngineSignals(const EngineSignals&) = delete;
  EngineSignals& operator=(const EngineSignals&) = delete;

  // A reading taken now, with the router's own counts for the worker at the same instant
  // (EngineReading). Values out of range are clamped (kv_usage to [0, 1]).
  void record(WorkerId worker, uint32_t waiting, uint32_t running, double kv_usage,
              uint32_t ours_active, uint32_t ours_prefill);
  // Forgets the worker's reading (it left, or its metrics stopped making sense).
  void clear(WorkerId worker);
  // The worker's last reading if it is at most `max_age` old.
  std::optional<EngineReading> fresh(WorkerId worker, Nanos max_age) const;
  // The same against a time the caller read once (a decision over many workers reads the clock
  // once, not once per worker).
  std::optional<EngineReading> fresh_at(WorkerId worker, Nanos max_age, Nanos now) const;
  Nanos now() const { return clock_.now(); }
  // The last reading, however old (admin API).
  std::optional<EngineReading> last(WorkerId worker) const;

 private:
  struct Slot;
  Slot* slot(WorkerId worker) const;

  const Clock& clock_;
  uint32_t max_workers_;
  std::unique_ptr<Slot[]> slots_;  // one flat array: a decision reads them in a row
};

}  // namespace infera::kv
