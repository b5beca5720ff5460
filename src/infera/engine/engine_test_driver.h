// Test-only helper: drives an EngineCore in virtual time (a ManualClock) and records what it
// delivers: per-request token traces with their times, step records and KV-event batches.
// Used by the engine's tests and benchmark; not part of the library.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "infera/common/clock.h"
#include "infera/engine/engine_core.h"

namespace infera::engine::testing {

struct Trace {
  Nanos arrival{0};
  std::vector<TokenId> tokens;
  std::vector<Nanos> times;  // when each token was delivered
  uint32_t cached_tokens = 0;
  FinishReason finish = FinishReason::kNone;
};

struct StepRecord {
  Nanos start{0};
  Nanos end{0};
  StepShape shape;
  uint32_t num_scheduled = 0;
  uint32_t num_preempted = 0;
  uint32_t num_outputs = 0;
};

class Driver {
 public:
  explicit Driver(EngineConfig config, Nanos start = Nanos(0))
      : clock_(start), core_(std::move(config), clock_) {}

  // Called with every delivered output, at the step boundary (before the next step starts).
  void on_output(std::function<void(const StepOutput&)> fn) { on_output_ = std::move(fn); }

  ManualClock& clock() { return clock_; }
  EngineCore& core() { return core_; }

  // Adds a request at the clock's current time.
  void add(RequestId id, const std::vector<TokenId>& prompt, uint32_t max_tokens,
           bool ignore_eos = true, uint32_t min_tokens = 0) {
    RequestSpec spec;
    spec.id = id;
    spec.prompt = prompt;
    spec.max_tokens = max_tokens;
    spec.min_tokens = min_tokens;
    spec.ignore_eos = ignore_eos;
    const Status s = core_.add_request(spec);
    ASSERT_TRUE(s.ok()) << s.to_string();
    traces_[id].arrival = clock_.now();
  }

  // Adds a request given in full (disaggregation flags) at the clock's current time.
  void add(const RequestSpec& spec) {
    const Status s = core_.add_request(spec);
    ASSERT_TRUE(s.ok()) << s.to_string();
    traces_[spec.id].arrival = clock_.now();
  }
  // Runs the engine in virtual time until it is idle, or until the next event lies beyond
  // `until` (then the clock is left at `until`).
  void run(std::optional<Nanos> until = std::nullopt) {
    int stalls = 0;
    while (auto t = core_.next_event_time()) {
      if (until && *t > *until) break;
      if (*t > clock_.now()) clock_.set(*t);
      bool progressed = false;
      while (core_.poll(out_)) {
        record(out_);
        progressed = true;
      }
      if (!progressed && core_.next_event_time() == t && ++stalls > 3) {
        ADD_FAILURE() << "engine stalls at t=" << t->count();
        return;
      }
      if (progressed) stalls = 0;
    }
    if (until && *until > clock_.now()) clock_.set(*until);
  }

  const std::map<RequestId, Trace>& traces() const { return traces_; }
  const Trace& trace(RequestId id) const { return traces_.at(id); }
  const std::vector<StepRecord>& steps() const { return steps_; }
  const std::vector<events::EventBatch>& batches() const { return batches_; }

  // Every event delivered so far, in order.
  std::vector<events::Event> all_events() const {
    std::vector<events::Event> all;
    for (const auto& b : batches_) all.insert(all.end(), b.events.begin(), b.events.end());
    return all;
  }

 private:
  void record(const StepOutput& out) {
    if (out.ran_step) {
      steps_.push_back(StepRecord{out.start, out.end, out.shape, out.num_scheduled,
                                  out.num_preempted, static_cast<uint32_t>(out.outputs.size())});
    }
    for (const RequestOutput& o : out.outputs) {
      Trace& t = traces_[o.id];
      EXPECT_EQ(o.index, t.tokens.size()) << "request " << o.id;
      EXPECT_EQ(t.finish, FinishReason::kNone) << "token after finish, request " << o.id;
      t.tokens.push_back(o.token);
      t.times.push_back(out.end);
      t.cached_tokens = o.cached_tokens;
      t.finish = o.finish;
    }
    if (!out.kv_events.events.empty()) batches_.push_back(out.kv_events);
    if (on_output_) on_output_(out);
  }

  ManualClock clock_;
  EngineCore core_;
  StepOutput out_;
  std::map<RequestId, Trace> traces_;
  std::vector<StepRecord> steps_;
  std::vector<events::EventBatch> batches_;
  std::function<void(const StepOutput&)> on_output_;
};

// `n` tokens of a sequence named by `family`, starting at `offset` within it.
inline std::vector<TokenId> tokens_of(uint32_t family, size_t n, size_t offset = 0) {
  std::vector<TokenId> t(n);
  for (size_t i = 0; i < n; ++i) {
    t[i] = family * 1000003u + static_cast<TokenId>(offset + i) * 7u + 1u;
  }
  return t;
}

inline std::vector<TokenId> concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace infera::engine::testing
