#include "infera/kv/engine_signals.h"

#include <algorithm>
#include <cmath>

namespace infera::kv {

struct alignas(32) EngineSignals::Slot {
  std::atomic<uint32_t> waiting{0};
  std::atomic<uint32_t> running{0};
  std::atomic<uint32_t> kv_usage_ppm{0};  // parts per million
  std::atomic<uint32_t> ours_active{0};
  std::atomic<uint32_t> ours_prefill{0};
  std::atomic<int64_t> at_ns{-1};  // -1: no reading
};

EngineSignals::EngineSignals(uint32_t max_workers, const Clock& clock)
    : clock_(clock), max_workers_(max_workers), slots_(std::make_unique<Slot[]>(max_workers)) {}

EngineSignals::~EngineSignals() = default;

EngineSignals::Slot* EngineSignals::slot(WorkerId worker) const {
  return worker < max_workers_ ? &slots_[worker] : nullptr;
}

void EngineSignals::record(WorkerId worker, uint32_t waiting, uint32_t running, double kv_usage,
                           uint32_t ours_active, uint32_t ours_prefill) {
  Slot* s = slot(worker);
  if (s == nullptr) return;
  const double usage = std::isfinite(kv_usage) ? std::clamp(kv_usage, 0.0, 1.0) : 0.0;
  s->waiting.store(waiting, std::memory_order_relaxed);
  s->running.store(running, std::memory_order_relaxed);
  s->kv_usage_ppm.store(static_cast<uint32_t>(std::lround(usage * 1e6)), std::memory_order_relaxed);
  s->ours_active.store(ours_active, std::memory_order_relaxed);
  s->ours_prefill.store(ours_prefill, std::memory_order_relaxed);
  s->at_ns.store(clock_.now().count(), std::memory_order_release);
}

void EngineSignals::clear(WorkerId worker) {
  if (Slot* s = slot(worker)) s->at_ns.store(-1, std::memory_order_release);
}

std::optional<EngineReading> EngineSignals::last(WorkerId worker) const {
  const Slot* s = slot(worker);
  if (s == nullptr) return std::nullopt;
  const int64_t at = s->at_ns.load(std::memory_order_acquire);
  if (at < 0) return std::nullopt;
  EngineReading r;
  r.waiting = s->waiting.load(std::memory_order_relaxed);
  r.running = s->running.load(std::memory_order_relaxed);
  r.kv_usage = s->kv_usage_ppm.load(std::memory_order_relaxed) / 1e6;
  r.ours_active = s->ours_active.load(std::memory_order_relaxed);
  r.ours_prefill = s->ours_prefill.load(std::memory_order_relaxed);
  r.at = Nanos(at);
  return r;
}

std::optional<EngineReading> EngineSignals::fresh(WorkerId worker, Nanos max_age) const {
  return fresh_at(worker, max_age, clock_.now());
}

std::optional<EngineReading> EngineSignals::fresh_at(WorkerId worker, Nanos max_age,
                                                     Nanos now) const {
  const Slot* s = slot(worker);
  if (s == nullptr || s->at_ns.load(std::memory_order_relaxed) < 0) return std::nullopt;
  std::optional<EngineReading> r = last(worker);
  if (!r || now - r->at > max_age) return std::nullopt;
  return r;
}

}  // namespace infera::kv
