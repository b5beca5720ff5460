// EngineRunner: drives one EngineCore in real time for the mock server. The core lives on one
// Asio strand of the server's event loop and never sees another thread: requests are posted to
// it, a timer fires at core.next_event_time(), each completed step's tokens are handed to the
// requests' RequestStreams and its KV events to the publisher. The runner owns the core, the
// clock and the strand; the composition root (MockEngine) owns the runner, and destroys it
// after the HTTP server (every stream's handler has ended) and before the event loop.
// Threading: submit(), reset_prefix_cache(), snapshot() and RequestStream from any thread;
// a RequestStream's next() from the coroutine that owns it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "infera/common/clock.h"
#include "infera/common/metrics.h"
#include "infera/common/status.h"
#include "infera/engine/engine_core.h"
#include "infera/http/awaitable.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace infera::events {
class KvEventPublisher;
}  // namespace infera::events

namespace infera::mock {

// One choice of an HTTP request: one core request.
struct ChoiceSpec {
  std::vector<engine::TokenId> prompt;
  uint32_t max_tokens = 16;
  uint32_t min_tokens = 0;
  bool ignore_eos = false;
  bool hold_kv = false;    // a prefill for a remote decode (RequestSpec::hold_kv)
  bool remote_kv = false;  // a decode of a remote prefill (RequestSpec::remote_kv)
  std::string lora_name;   // a LoRA adapter's request (RequestSpec::lora_name)
};

// A token of one choice, in the order the engine produced them.
struct ChoiceOutput {
  uint32_t choice = 0;
  engine::TokenId token = 0;
  uint32_t index = 0;  // output position; 0 is the first token
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;
  engine::FinishReason finish = engine::FinishReason::kNone;
  // The last output of a hold_kv choice: the blocks it holds (vLLM's remote_block_ids).
  std::vector<uint32_t> held_blocks;
};

// The outputs of one HTTP request's choices, from the engine strand to the handler. Destroying
// it (the handler ended: finished, failed, or its client left) aborts whatever is unfinished.
class RequestStream {
 public:
  struct State;
  explicit RequestStream(std::shared_ptr<State> state) : state_(std::move(state)) {}
  ~RequestStream();
  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;

  // Waits until outputs are available and moves them into `out` (cleared first). Ok with outputs;
  // ok with none once every choice has finished; kCancelled when the calling coroutine was
  // cancelled (the client left); another error when the engine refused or dropped the request.
  // From the owning coroutine only.
  net::awaitable<Status> next(std::vector<ChoiceOutput>& out);
  bool all_finished() const;
  // The core request of `choice` (for EngineRunner::release_held).
  engine::RequestId core_id(uint32_t choice) const;
  // Aborts every unfinished choice in the core (idempotent).
  void abort();

 private:
  std::shared_ptr<State> state_;
};

// What /metrics reports, refreshed after every delivery on the engine strand.
struct RunnerSnapshot {
  engine::EngineMetrics engine;
  uint64_t kv_event_batches = 0;  // published
  uint64_t kv_event_drops = 0;    // refused by a full publisher queue
  double lag_seconds = 0;         // how far the model's time is behind the clock at delivery
};

class EngineRunner {
 public:
  // `config` must pass validate(). `publisher` (optional) receives each step's events and must
  // outlive the runner. Histograms of vLLM's request metrics go into `registry`.
  EngineRunner(boost::asio::io_context& io, engine::EngineConfig config,
               events::KvEventPublisher* publisher, metrics::Registry& registry,
               const metrics::Labels& labels);
  ~EngineRunner();  // stop()
  EngineRunner(const EngineRunner&) = delete;
  EngineRunner& operator=(const EngineRunner&) = delete;

  const engine::EngineConfig& config() const { return config_; }
  uint32_t max_model_len() const { return max_model_len_; }

  // Queues the choices (validated by the caller: non-empty prompts that fit max_model_len) and
  // returns their stream.
  std::unique_ptr<RequestStream> submit(std::vector<ChoiceSpec> choices);

  // vLLM reset_prefix_cache: false when refused (requests hold blocks and not
  // reset_running_requests). Awaits the engine strand.
  net::awaitable<bool> reset_prefix_cache(bool reset_running_requests);

  RunnerSnapshot snapshot() const;

  // Frees the blocks a finished hold_kv request holds (they stay cached). Any thread.
  void release_held(engine::RequestId id);

  // Fails every open stream with kUnavailable and stops the timer. Blocks until the strand
  // ran it (the loop must be running). Idempotent.
  void stop();

  struct Impl;

 private:
  engine::EngineConfig config_;
  uint32_t max_model_len_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace infera::mock
