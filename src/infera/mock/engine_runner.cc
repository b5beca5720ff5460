#include "infera/mock/engine_runner.h"

#include <chrono>
#include <future>
#include <optional>
#include <utility>

#include "infera/common/check.h"
#include "infera/common/flat_map.h"
#include "infera/common/log.h"
#include "infera/events/publisher.h"
#include "infera/http/net.h"

namespace infera::mock {

using engine::effective_max_model_len;
using engine::EngineConfig;
using engine::EngineCore;
using engine::FinishReason;
using engine::kTtftBucketsSeconds;
using engine::RequestId;
using engine::RequestOutput;
using engine::RequestSpec;
using engine::StepOutput;

namespace {

// Steps delivered per turn on the strand before it yields to other work queued on the loop
// (HTTP handlers writing the tokens): a core that runs behind the clock catches up in slices
// instead of holding a loop thread until it is back in time.
constexpr int kMaxStepsPerTurn = 16;

// vLLM's buckets (vllm/v1/metrics/loggers.py).
std::vector<double> inter_token_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> request_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// RequestStream

struct RequestStream::State : std::enable_shared_from_this<RequestStream::State> {
  std::weak_ptr<EngineRunner::Impl> runner;
  std::vector<RequestId> ids;  // the core request of each choice

  std::mutex mu;
  std::vector<ChoiceOutput> pending;  // guarded by mu
  Status failure;                     // guarded by mu
  uint32_t unfinished = 0;            // guarded by mu: choices without their last token yet
  bool waiting = false;               // guarded by mu: next() is parked on the timer
  bool wake_posted = false;           // guarded by mu
  std::atomic<bool> aborted{false};

  // The owning coroutine's executor (a connection strand) and its wake-up timer. Set by the
  // first next(), before `waiting` is first set (so a reader that saw `waiting` under mu sees
  // them).
  net::any_io_executor executor;
  std::optional<net::steady_timer> timer;

  // Engine strand.
  void push(const ChoiceOutput& out) {
    bool wake = false;
    {
      std::lock_guard lock(mu);
      pending.push_back(out);
      if (out.finish != FinishReason::kNone && unfinished > 0) --unfinished;
      wake = waiting && !wake_posted;
      if (wake) wake_posted = true;
    }
    if (wake) post_wake();
  }
  void fail(Status status) {
    bool wake = false;
    {
      std::lock_guard lock(mu);
      if (failure.ok()) failure = std::move(status);
      wake = waiting && !wake_posted;
      if (wake) wake_posted = true;
    }
    if (wake) post_wake();
  }
  // The owner's strand runs the cancel, so it cannot slip in between its check of `pending`
  // and the start of its wait: both happen in one turn of that strand.
  void post_wake() {
    net::post(executor, [self = shared_from_this()] {
      if (self->timer) self->timer->cancel();
    });
  }
};

// ---------------------------------------------------------------------------------------------
// EngineRunner::Impl

struct EngineRunner::Impl : std::enable_shared_from_this<EngineRunner::Impl> {
  struct Entry {
    std::shared_ptr<RequestStream::State> state;
    uint32_t choice = 0;
    Nanos arrival{0};
    Nanos last_token{0};
  };

  Impl(net::io_context& io, const EngineConfig& config, events::KvEventPublisher* kv_publisher,
       metrics::Registry& registry, const metrics::Labels& labels)
      : io_context(io),
        strand(net::make_strand(io)),
        timer(strand),
        core(config, clock),
        publisher(kv_publisher),
        ttft(registry.histogram("vllm:time_to_first_token_seconds",
                                "Histogram of time to first token in seconds.",
                                std::vector<double>(kTtftBucketsSeconds.begin(),
                                                    kTtftBucketsSeconds.end()),
                                labels)),
        itl(registry.histogram("vllm:inter_token_latency_seconds",
                               "Histogram of inter-token latency in seconds.",
                               inter_token_buckets(), labels)),
        e2e(registry.histogram("vllm:e2e_request_latency_seconds",
                               "Histogram of e2e request latency in seconds.",
                               request_latency_buckets(), labels)) {}

  // All below: the strand only.
  void add(const std::shared_ptr<RequestStream::State>& state, std::vector<ChoiceSpec>& choices);
  void abort(const std::shared_ptr<RequestStream::State>& state);
  void drive();
  void arm();
  void deliver(StepOutput& step);
  void release(uint32_t entry);
  void publish_snapshot(Nanos lag);
  void stop_now();

  net::io_context& io_context;
  net::strand<net::io_context::executor_type> strand;
  net::steady_timer timer;
  SteadyClock clock;
  EngineCore core;
  events::KvEventPublisher* publisher;
  metrics::Histogram& ttft;
  metrics::Histogram& itl;
  metrics::Histogram& e2e;
  std::atomic<RequestId> next_id{1};

  std::vector<Entry> entries;
  std::vector<uint32_t> free_entries;
  FlatU64Map<uint32_t> by_id;  // core request id -> entries index
  StepOutput step;
  bool stopped = false;
  bool timer_armed = false;
  Nanos timer_at{0};
  uint64_t timer_generation = 0;
  bool continuation_posted = false;
  uint64_t kv_batches = 0;
  uint64_t kv_drops = 0;

  mutable std::mutex snapshot_mu;
  RunnerSnapshot snap;  // guarded by snapshot_mu
};

void EngineRunner::Impl::add(const std::shared_ptr<RequestStream::State>& state,
                             std::vector<ChoiceSpec>& choices) {
  if (stopped) {
    state->fail(unavailable("the engine is shutting down"));
    return;
  }
  if (state->aborted.load()) return;
  const Nanos now = clock.now();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceSpec& c = choices[i];
    RequestSpec spec;
    spec.id = state->ids[i];
    spec.prompt = c.prompt;
    spec.max_tokens = c.max_tokens;
    spec.min_tokens = c.min_tokens;
    spec.ignore_eos = c.ignore_eos;
    spec.hold_kv = c.hold_kv;
    spec.remote_kv = c.remote_kv;
    spec.lora_name = c.lora_name;
    const Status added = core.add_request(spec);
    if (!added.ok()) {
      abort(state);
      state->fail(added);
      return;
    }
    uint32_t slot;
    if (!free_entries.empty()) {
      slot = free_entries.back();
      free_entries.pop_back();
    } else {
      slot = static_cast<uint32_t>(entries.size());
      entries.emplace_back();
    }
    entries[slot] = Entry{state, static_cast<uint32_t>(i), now, now};
    by_id.try_emplace(spec.id, slot);
  }
  drive();
}

void EngineRunner::Impl::abort(const std::shared_ptr<RequestStream::State>& state) {
  bool any = false;
  for (const RequestId id : state->ids) {
    const uint32_t* slot = by_id.find(id);
    if (slot == nullptr) continue;
    core.abort(id);
    release(*slot);
    any = true;
  }
  if (any) drive();
}

void EngineRunner::Impl::release(uint32_t slot) {
  Entry& e = entries[slot];
  by_id.erase(e.state->ids[e.choice]);
  e.state.reset();
  free_entries.push_back(slot);
}

void EngineRunner::Impl::drive() {
  if (stopped) return;
  int steps = 0;
  Nanos lag{0};
  while (core.poll(step)) {
    // The snapshot before the outputs: a client that got its token (or its last one) and then
    // scrapes /metrics must find this step counted, so the tokens go out after it.
    lag = clock.now() - step.end;
    publish_snapshot(lag);
    deliver(step);
    if (++steps >= kMaxStepsPerTurn) {
      publish_snapshot(lag);
      // Let the loop run the handlers that write these tokens, then continue.
      if (!continuation_posted) {
        continuation_posted = true;
        net::post(strand, [self = shared_from_this()] {
          self->continuation_posted = false;
          self->drive();
        });
      }
      return;
    }
  }
  publish_snapshot(lag);
  arm();
}

void EngineRunner::Impl::arm() {
  const std::optional<Nanos> at = core.next_event_time();
  if (!at) {
    if (timer_armed) {
      timer_armed = false;
      ++timer_generation;
      timer.cancel();
    }
    return;
  }
  if (timer_armed && timer_at == *at) return;
  timer_armed = true;
  timer_at = *at;
  const uint64_t generation = ++timer_generation;
  // SteadyClock counts from steady_clock's epoch, so the core's times are steady_clock times.
  timer.expires_at(std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(*at)));
  timer.async_wait([self = shared_from_this(), generation](const boost::system::error_code& ec) {
    if (ec || generation != self->timer_generation) return;  // re-armed or cancelled
    self->timer_armed = false;
    self->drive();
  });
}

void EngineRunner::Impl::deliver(StepOutput& out) {
  if (publisher != nullptr && !out.kv_events.events.empty()) {
    out.kv_events.ts = wall_seconds();  // vLLM stamps batches with time.time()
    const Status published = publisher->publish(out.kv_events);
    if (published.ok()) {
      ++kv_batches;
    } else {
      if (kv_drops++ % 1000 == 0) {
        INFERA_LOG(kWarn, "engine").msg("KV event batch dropped").kv("error", published.message());
      }
    }
  }
  for (const RequestOutput& o : out.outputs) {
    const uint32_t* slot = by_id.find(o.id);
    if (slot == nullptr) continue;  // aborted meanwhile
    Entry& e = entries[*slot];
    if (o.index == 0) {
      ttft.observe(to_seconds(out.end - e.arrival));
    } else {
      itl.observe(to_seconds(out.end - e.last_token));
    }
    e.last_token = out.end;
    ChoiceOutput choice{e.choice, o.token, o.index, o.prompt_tokens, o.cached_tokens, o.finish,
                        {}};
    if (o.finish != FinishReason::kNone) {
      if (const std::vector<uint32_t>* held = core.held_blocks(o.id)) choice.held_blocks = *held;
    }
    e.state->push(choice);
    if (o.finish != FinishReason::kNone) {
      e2e.observe(to_seconds(out.end - e.arrival));
      release(*slot);
    }
  }
}

void EngineRunner::Impl::publish_snapshot(Nanos lag) {
  std::lock_guard lock(snapshot_mu);
  snap.engine = core.metrics();
  snap.kv_event_batches = kv_batches;
  snap.kv_event_drops = kv_drops;
  snap.lag_seconds = to_seconds(lag);
}

void EngineRunner::Impl::stop_now() {
  if (stopped) return;
  stopped = true;
  ++timer_generation;
  timer.cancel();
  for (Entry& e : entries) {
    if (!e.state) continue;
    core.abort(e.state->ids[e.choice]);
    e.state->fail(unavailable("the engine is shutting down"));
    e.state.reset();
  }
  entries.clear();
  free_entries.clear();
  by_id.clear();
}

// ---------------------------------------------------------------------------------------------
// RequestStream

RequestStream::~RequestStream() { abort(); }

RequestId RequestStream::core_id(uint32_t choice) const { return state_->ids.at(choice); }

bool RequestStream::all_finished() const {
  std::lock_guard lock(state_->mu);
  return state_->unfinished == 0;
}

void RequestStream::abort() {
  State& s = *state_;
  if (s.aborted.exchange(true)) return;
  {
    std::lock_guard lock(s.mu);
    if (s.unfinished == 0) return;
  }
  std::shared_ptr<EngineRunner::Impl> runner = s.runner.lock();
  if (!runner) return;
  net::post(runner->strand, [runner, state = state_] { runner->abort(state); });
}

net::awaitable<Status> RequestStream::next(std::vector<ChoiceOutput>& out) {
  State& s = *state_;
  out.clear();
  if (!s.timer) {
    s.executor = co_await net::this_coro::executor;
    s.timer.emplace(s.executor);
  }
  for (;;) {
    {
      std::lock_guard lock(s.mu);
      if (!s.pending.empty()) {
        out.swap(s.pending);
        co_return ok_status();
      }
      if (!s.failure.ok()) co_return s.failure;
      if (s.unfinished == 0) co_return ok_status();
      s.waiting = true;
      s.wake_posted = false;
    }
    s.timer->expires_at(net::steady_timer::time_point::max());
    (void)co_await s.timer->async_wait(use_nothrow);
    {
      std::lock_guard lock(s.mu);
      s.waiting = false;
    }
    const net::cancellation_state cs = co_await net::this_coro::cancellation_state;
    if (cs.cancelled() != net::cancellation_type::none) {
      co_return cancelled("client disconnected");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// EngineRunner

EngineRunner::EngineRunner(net::io_context& io, EngineConfig config,
                           events::KvEventPublisher* publisher, metrics::Registry& registry,
                           const metrics::Labels& labels)
    : config_(std::move(config)),
      max_model_len_(effective_max_model_len(config_)),
      impl_(std::make_shared<Impl>(io, config_, publisher, registry, labels)) {}

EngineRunner::~EngineRunner() { stop(); }

std::unique_ptr<RequestStream> EngineRunner::submit(std::vector<ChoiceSpec> choices) {
  INFERA_CHECK(!choices.empty());
  auto state = std::make_shared<RequestStream::State>();
  state->runner = impl_;
  const auto n = static_cast<RequestId>(choices.size());
  const RequestId first = impl_->next_id.fetch_add(n);
  state->ids.reserve(choices.size());
  for (RequestId i = 0; i < n; ++i) state->ids.push_back(first + i);
  state->unfinished = static_cast<uint32_t>(choices.size());
  net::post(impl_->strand,
            [impl = impl_, state, choices = std::move(choices)]() mutable {
              impl->add(state, choices);
            });
  return std::make_unique<RequestStream>(std::move(state));
}

net::awaitable<bool> EngineRunner::reset_prefix_cache(bool reset_running_requests) {
  std::shared_ptr<Impl> impl = impl_;
  auto on_strand = [impl, reset_running_requests]() -> net::awaitable<bool> {
    const bool done = impl->core.reset_prefix_cache(reset_running_requests);
    impl->drive();
    co_return done;
  };
  const bool done =
      co_await net::co_spawn(impl->strand, std::move(on_strand), use_awaitable_uncancelled());
  co_return done;
}

void EngineRunner::release_held(RequestId id) {
  net::post(impl_->strand, [impl = impl_, id] {
    if (impl->stopped) return;
    impl->core.release_held(id);
    impl->drive();  // refreshes the snapshot
  });
}

RunnerSnapshot EngineRunner::snapshot() const {
  std::lock_guard lock(impl_->snapshot_mu);
  return impl_->snap;
}

void EngineRunner::stop() {
  if (impl_->io_context.stopped()) {
    return;  // nothing runs any more: the open streams die with their handlers
  }
  std::promise<void> done;
  std::future<void> ran = done.get_future();
  net::post(impl_->strand, [impl = impl_, &done] {
    impl->stop_now();
    done.set_value();
  });
  ran.wait();
}

}  // namespace infera::mock
