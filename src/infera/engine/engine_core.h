// EngineCore: a CPU-only model of one vLLM v1 engine core with prefix caching, on an injected
// clock, so the same code runs in real time inside `infera engine mock` and in virtual time
// inside `infera sim`. It owns the requests, the FCFS scheduler (continuous batching, chunked
// prefill, preemption by recompute), the paged KV cache (BlockPool), the step timing model and
// the per-step KV events; it produces deterministic output tokens.
//
// Time: a step is scheduled at its start time and lasts TimingModel::step_duration; its tokens,
// finishes and KV events are delivered when it completes. poll() advances the model to the
// clock's now: it starts a step when the engine is free and has work (at the time it became
// free, or at the first request's arrival: back-dated when the owner is late, and a request is
// only scheduled by a step that starts at or after its arrival), and completes the in-flight
// step once its end has passed. A call that delivers a step returns at that step boundary, where
// the cache holds exactly what the delivered events describe; the next call starts the next
// step. next_event_time() says when poll() next has something to do.
//
// Threading: single-threaded by design. The owner (the server's engine thread, or the simulator)
// serialises every call; nothing here locks.
//
// Disaggregation (shared/wire/KV_EVENTS.md section 4, vLLM's NixlConnector as the model): a
// prefill request with hold_kv keeps its blocks when it finishes, until release_held(); a decode
// request with remote_kv first allocates its prompt's blocks and pulls the ones it does not cache
// (TimingModel::transfer_duration; the engine computes other requests meanwhile), then caches
// them (BlockStored) and computes only the prompt's last token, as vLLM's scheduler does after
// WAITING_FOR_REMOTE_KVS.
//
// Real time:    add_request(...); then on each timer: while (core.poll(out)) deliver(out);
//               re-arm the timer at core.next_event_time().
// Virtual time: clock.set(*core.next_event_time()); while (core.poll(out)) deliver(out);
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <unordered_map>
#include <string_view>
#include <vector>

#include "infera/common/clock.h"
#include "infera/common/flat_map.h"
#include "infera/common/status.h"
#include "infera/engine/block_hasher.h"
#include "infera/engine/block_pool.h"
#include "infera/engine/engine_config.h"
#include "infera/engine/metrics.h"
#include "infera/engine/output_model.h"
#include "infera/engine/timing_model.h"
#include "infera/events/event.h"

namespace infera::engine {

// Chosen by the owner; unique among the core's unfinished requests.
using RequestId = uint64_t;

struct RequestSpec {
  RequestId id = 0;
  std::span<const TokenId> prompt;  // borrowed for the call
  uint32_t max_tokens = 16;         // >= 1
  uint32_t min_tokens = 0;          // <= max_tokens; EOS cannot come earlier
  bool ignore_eos = false;          // never stop on EOS: the output is exactly max_tokens long
  // A prefill for a remote decode: once finished, its blocks stay held until release_held().
  bool hold_kv = false;
  // A decode of a remotely prefilled prompt: its uncached prompt blocks are pulled, not computed.
  bool remote_kv = false;
  // A LoRA adapter's request: its blocks hash apart from the base model's and other adapters'
  // (EngineBlockHasher::root), and its KV events name the adapter (lora_name). Borrowed.
  std::string_view lora_name;
};

enum class FinishReason : uint8_t { kNone = 0, kStop, kLength };
// "stop", "length" (OpenAI finish_reason); "" for kNone.
std::string_view finish_reason_name(FinishReason reason);

// One new token of one request in a completed step.
struct RequestOutput {
  RequestId id = 0;
  TokenId token = 0;
  uint32_t index = 0;          // output position of `token`; 0 is the first token
  uint32_t prompt_tokens = 0;  // the request's prompt length
  // Prompt tokens served from the prefix cache when the request was first scheduled (full
  // blocks only): usage.prompt_tokens_details.cached_tokens (vLLM num_cached_tokens).
  uint32_t cached_tokens = 0;
  FinishReason finish = FinishReason::kNone;  // set on the request's last token
};

// What poll() delivers: one completed step, or (ran_step false) KV events alone, when the
// prefix cache was reset while the engine was idle.
struct StepOutput {
  bool ran_step = false;
  uint64_t step = 0;  // serial number of the step
  Nanos start{0};
  Nanos end{0};     // when the outputs became available
  StepShape shape;  // what the step computed, as timed
  uint32_t num_scheduled = 0;
  uint32_t num_preempted = 0;
  std::vector<RequestOutput> outputs;  // in scheduling order
  // vLLM's KVEventBatch of the step; publish only when events is non-empty. ts is the engine
  // clock in seconds (a publisher may put wall-clock time there); dp_rank is left to the
  // publisher, as in vLLM.
  events::EventBatch kv_events;

  void clear();
};

enum class RequestStatus : uint8_t { kWaiting, kRunning, kTransferring };

struct RequestState {
  RequestStatus status = RequestStatus::kWaiting;
  uint32_t prompt_tokens = 0;
  uint32_t output_tokens = 0;
  uint32_t computed_tokens = 0;  // tokens whose KV is computed or being computed
  uint32_t cached_tokens = 0;
  uint32_t held_blocks = 0;
  uint32_t preemptions = 0;
  bool aborted = false;
};

class EngineCore {
 public:
  // `config` must pass validate() (a bug otherwise). The clock must outlive the core.
  EngineCore(EngineConfig config, const Clock& clock);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  const EngineConfig& config() const { return config_; }
  uint32_t max_model_len() const { return max_model_len_; }

  // Queues a request, arriving at clock.now(). InvalidArgument for an empty prompt,
  // max_tokens 0, min_tokens > max_tokens, prompt + max_tokens > max_model_len(), or an id
  // that is already in use.
  Status add_request(const RequestSpec& spec);

  // Cancels a request (vLLM FINISHED_ABORTED): a waiting one leaves at once; a running one
  // produces no further output and its blocks are freed at the end of the in-flight step.
  // False for an unknown, finished or already aborted id.
  bool abort(RequestId id);

  // vLLM reset_prefix_cache: forgets every cached block and emits AllBlocksCleared. Refused
  // (false) while requests hold blocks, unless reset_running_requests, which preempts every
  // running request first (at the end of the in-flight step, whose batch then ends with
  // AllBlocksCleared).
  bool reset_prefix_cache(bool reset_running_requests = false);

  // When poll() next has work: the in-flight step's end, the start of the next step, or now
  // for pending events; nullopt when idle with nothing queued.
  std::optional<Nanos> next_event_time() const;

  // Advances the model to clock.now(). Returns true and fills `out` (cleared first; its
  // capacity is reused) when a step completed or idle events are pending; call again until it
  // returns false, which leaves the next step in flight if there is work.
  bool poll(StepOutput& out);

  bool has_unfinished_requests() const { return !id_to_slot_.empty(); }
  std::optional<RequestState> request_state(RequestId id) const;
  EngineMetrics metrics() const;

  // The engine's block hashes of every full block of `tokens` (the ids its events carry).
  void block_hashes(std::span<const TokenId> tokens, std::vector<uint64_t>& out) const;
  // How many leading full blocks of `tokens` are in the prefix cache now.
  uint32_t cached_prefix_blocks(std::span<const TokenId> tokens) const;
  const BlockPool& block_pool() const { return pool_; }

  // The blocks a finished hold_kv request holds (vLLM's remote_block_ids), or null.
  const std::vector<uint32_t>* held_blocks(RequestId id) const;
  // Frees a finished hold_kv request's blocks (they stay cached). False for an unknown id.
  bool release_held(RequestId id);

 private:
  struct Request;

  uint32_t acquire_slot();
  void release_slot(uint32_t slot);
  void try_start(Nanos now);
  void schedule(Nanos start);
  bool allocate_slots(Request& r, uint32_t num_new_tokens, std::span<const uint32_t> computed,
                      uint32_t num_new_computed_tokens, bool cache = true);
  bool start_transfer(uint32_t slot, Nanos start);
  void finish_transfers(Nanos until);
  void drop_transfers();
  std::optional<Nanos> next_transfer_end() const;
  void cache_blocks(Request& r, uint32_t num_tokens);
  void find_cache_hit(const Request& r);
  void preempt(uint32_t slot);
  void free_blocks(Request& r);
  void complete_step(StepOutput& out);
  void reset_cache_now();
  void emit_removed(std::span<const uint64_t> hashes);

  EngineConfig config_;
  const Clock& clock_;
  uint32_t max_model_len_;
  TimingModel timing_;
  EngineBlockHasher hasher_;
  OutputModel output_;
  BlockPool pool_;

  std::vector<Request> slots_;
  std::vector<uint32_t> free_slots_;
  FlatU64Map<uint32_t> id_to_slot_;
  std::deque<uint32_t> waiting_;   // FCFS; preempted requests go back to the front
  std::vector<uint32_t> running_;  // in scheduling order; preemption takes the last
  std::vector<uint32_t> transferring_;  // remote_kv requests pulling their blocks
  std::unordered_map<RequestId, std::vector<uint32_t>> held_;  // finished hold_kv requests

  // The in-flight step.
  bool in_flight_ = false;
  Nanos step_start_{0};
  Nanos step_end_{0};
  Nanos free_at_{0};  // when the engine last became free
  // Nothing runs and the waiting queue's head did not fit in the cache: only a pull ending, or
  // blocks freed from outside (release_held, abort, reset), can change that, so the next event is
  // not the head's (past) arrival. A request added behind the head cannot start before it.
  bool stalled_ = false;
  StepShape shape_;
  uint32_t step_preempted_ = 0;
  std::vector<uint32_t> scheduled_;  // slots, in scheduling order
  std::vector<events::Event> step_events_;
  bool reset_pending_ = false;
  std::vector<events::Event> idle_events_;  // AllBlocksCleared of a reset while idle

  // Scratch, reused every step.
  std::vector<uint32_t> computed_;
  std::vector<uint64_t> evicted_;

  EngineMetrics metrics_;
};

}  // namespace infera::engine
