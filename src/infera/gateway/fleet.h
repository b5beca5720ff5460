// Fleet: the gateway's live view of its workers. It turns worker-source snapshots into routable
// members: each worker gets a dense kv::WorkerId slot, a KV-event subscriber (when it has an
// event endpoint), a place in the KV index and the active-load table, and health state (a
// worker that fails is excluded with exponential backoff and readmitted after it). A worker
// whose block size differs from the router's is refused: visible in the admin API, never
// routed. Its served models and block size are learned from its record, or asked from the
// worker (/v1/models, /metrics) when the record does not say. While a worker is a member, its
// engine's own load is polled from its /metrics into kv::EngineSignals (engine_poller.h).
//
// What the Fleet knows of its workers is published as an immutable FleetView: the members with
// what was learned of each (models, adapters, block size, refusal) and, worked out once per
// view, what that means for each model. A request holds one view for its whole life and asks it
// everything without a lock; what requests change (in-flight counts, failures, backoff) is in
// the WorkerRuntime the views share.
//
// Threading: update() from the worker source's listener; probe results on the EventLoop's
// threads and maintain() from the gateway's upkeep thread. All three publish views under one
// mutex (copy-on-write of the member list), so none is lost. view() from any thread (an
// immutable snapshot swapped atomically); the health calls from request threads (atomics).
// The EventLoop must be stopped before the Fleet is destroyed (probes and polls run on it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/clock.h"
#include "infera/discovery/worker.h"
#include "infera/events/nats_source.h"
#include "infera/events/subscriber.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/kv/active_load.h"
#include "infera/kv/engine_signals.h"
#include "infera/kv/index.h"
#include "infera/proxy/forward.h"
#include "infera/routing/router.h"

namespace infera::gateway {

class EnginePoller;
struct EnginePoll;

// The topic a worker's events carry when its engine connects to the --kv-events-bind listener:
// its record's topic when it names one, else its id (host:port), which names it uniquely.
std::string listener_topic(const discovery::WorkerInfo& info);

// Mutable per-worker state shared by every view that holds the worker (one per record: a
// changed record gets a new one).
struct WorkerRuntime {
  // Takes one of the worker's `cap` in-flight slots (0: unlimited) unless all are taken. The
  // check and the take are one step: two requests routed at once on two loop threads cannot
  // both take the last slot. The caller gives the slot back with `inflight.fetch_sub(1)`.
  bool try_take_slot(uint32_t cap) {
    uint32_t n = inflight.load(std::memory_order_relaxed);
    do {
      if (cap != 0 && n >= cap) return false;
    } while (!inflight.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
    return true;
  }

  std::atomic<uint32_t> inflight{0};
  std::atomic<uint32_t> consecutive_failures{0};
  std::atomic<int64_t> excluded_until_ns{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> failures{0};
  std::unique_ptr<events::KvEventSubscriber> subscriber;  // null: no events (load-only)
  // Its events arrive on the --kv-events-bind listener (set at join, before any view holds it).
  bool on_listener = false;
  // Its /metrics polling (engine_poller.h); null when off. Used under the Fleet's update mutex.
  std::shared_ptr<EnginePoll> engine_poll;

  mutable std::mutex mu;             // guards the field below
  std::string engine_metrics_error;  // why polling its /metrics fails now; "" while it works
};

struct FleetMember {
  discovery::WorkerInfo info;
  kv::WorkerId slot = 0;
  http::Endpoint endpoint;
  std::shared_ptr<WorkerRuntime> rt;
  // What the Fleet has learned of the worker, as of this view (learning more publishes a view).
  std::vector<std::string> models;    // served models (record, or its /v1/models); empty: unknown
  std::vector<std::string> adapters;  // those of `models` that are LoRA adapters (a `parent`)
  uint32_t block_size = 0;            // reported block size; 0: unknown
  std::string refused_reason;         // why it is not routed; empty: not refused

  bool refused() const { return !refused_reason.empty(); }
  bool serves(std::string_view model) const;  // "" or unknown models: yes
};

// What a view knows of a request's `model`: whether any member's models are known, whether one
// serves `model`, and whether one serves it as a LoRA adapter (its /v1/models entry names a
// parent model, as vLLM lists the adapters of --lora-modules). Refused members count.
struct ModelLookup {
  bool models_known = false;
  bool served = false;
  bool adapter = false;
};

// An immutable snapshot of the fleet. Built by the Fleet each time a worker joins, leaves, is
// refused or says what it serves; what it says of each model is worked out when it is built,
// so split() and lookup() are a binary search over the fleet's models and by_slot() an index.
class FleetView {
 public:
  FleetView() = default;  // no workers
  // Sorts `members` by id; their ids and slots are distinct.
  explicit FleetView(std::vector<FleetMember> members);

  const std::vector<FleetMember> members;  // sorted by id

  const FleetMember* find(std::string_view id) const;
  const FleetMember* by_slot(kv::WorkerId slot) const;

  // The model's fleet is disaggregated: it has unrefused prefill-role and decode-role workers
  // that serve `model` (Fleet::split).
  bool split(std::string_view model) const;
  ModelLookup lookup(std::string_view model) const;
  // Every model a member serves, sorted (for /v1/models).
  std::vector<std::string> models() const;
  // Whether the member in `slot` speaks `protocol` (false: no member has the slot).
  bool speaks(kv::WorkerId slot, discovery::PdProtocol protocol) const;

 private:
  friend class Fleet;  // candidates() reads rows_ and served_by() in its one pass
  static constexpr uint32_t kNoMember = UINT32_MAX;

  // What routing reads of members[i], packed (24 bytes) so a pass over the fleet touches these
  // and the runtimes' atomics, not the members' records.
  struct Row {
    WorkerRuntime* rt;
    kv::WorkerId slot;
    discovery::Role role;
    discovery::PdProtocol protocol;
    bool refused;
  };

  // One model some member lists. `served_by`: bit i is set when members[i] serves it (lists it,
  // or its models are unknown).
  struct ModelEntry {
    std::string name;
    bool adapter = false;  // a member lists it as a LoRA adapter
    bool prefill = false;  // an unrefused prefill-role member lists it
    bool decode = false;   // an unrefused decode-role member lists it
    std::vector<uint64_t> served_by;
  };
  const ModelEntry* entry(std::string_view model) const;
  // Which members serve `model`, one bit per member (see ModelEntry); null for "" (all do).
  const std::vector<uint64_t>* served_by(std::string_view model) const;

  std::vector<Row> rows_;                  // rows_[i]: members[i]
  std::vector<ModelEntry> models_;         // sorted by name
  std::vector<uint64_t> unknown_;          // bit i: members[i]'s models are unknown (it serves any)
  std::vector<uint32_t> slot_index_;       // slot -> index in members, kNoMember for none
  bool models_known_ = false;              // some member's models are known
  bool prefill_ = false, decode_ = false;  // unrefused prefill / decode members (serve "")
  // Unrefused prefill / decode members whose models are unknown (they serve every model).
  bool prefill_unknown_ = false, decode_unknown_ = false;
};

// Whether `m` could take `stage` of a request for `model`, leaving its load and backoff aside:
// not refused, its role fits the stage (`split_fleet`: the model's fleet has prefill and decode
// pools), not in `skip` (tried already), and it serves the model. What Fleet::candidates filters
// on, and what a queued request asks of a worker whose call just ended.
bool could_serve(const FleetMember& m, std::string_view model, routing::Stage stage,
                 bool split_fleet, const std::vector<kv::WorkerId>& skip);

// Keeps in `slots` only the workers of `view` that speak `protocol`: both workers of a split
// request must speak the same one.
void keep_protocol(const FleetView& view, discovery::PdProtocol protocol,
                   std::vector<kv::WorkerId>& slots);

class Fleet {
 public:
  struct Options {
    uint32_t block_size = 16;
    uint32_t max_workers = 1024;
    uint32_t max_inflight_per_worker = 0;  // 0: unlimited
    std::chrono::milliseconds backoff_min{500};
    std::chrono::milliseconds backoff_max{30'000};
    // How often each worker's /metrics is polled for its engine's own load; 0: never.
    std::chrono::milliseconds engine_metrics_interval{1'000};
    // --kv-event-transport nats: every worker's events come from this source (by its id's
    // subject), and no ZMQ subscriber is made. Outlives the fleet. Null: ZMQ, per worker.
    events::NatsEventSource* nats_events = nullptr;
    std::string nats_namespace = "infera";  // its subjects' namespace (for the admin API)
    // --kv-events-bind: workers with no event endpoint of their own (no kv=) are heard on this
    // listener, by topic (listener_topic). Outlives the fleet. Null: such workers are load-only.
    events::KvEventListener* kv_listener = nullptr;
    // --request-transport nats: the fleet's own calls to workers (/v1/models, /metrics) go
    // through it, as requests do. Null: the HTTP client. Outlives the fleet.
    proxy::Upstream* control = nullptr;
    // Warm start: a sibling replica's copy of a joining worker's mirror (by worker id), to seed
    // its new event stream with; none: the stream joins as usual. Called once per join.
    std::function<std::optional<events::StreamSnapshot>(const std::string& worker)> seed;
    // Called (under the fleet's update mutex) with the id of each worker that leaves, after its
    // slot is freed: the gateway drops the worker's metric series. Optional.
    std::function<void(const std::string& worker)> on_leave;
  };

  // `signals`: where the engines' polled load goes (a departed worker's reading is cleared).
  Fleet(Options options, kv::KvIndex& index, kv::ActiveLoad& load, kv::EngineSignals& signals,
        http::EventLoop& loop, http::Client& client, const Clock& clock);
  ~Fleet();  // stops every subscriber and poll
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  // Applies a new fleet: new workers join, departed ones leave (their subscriber stops and
  // their mirror and active load are dropped), changed records are treated as leave + join.
  void update(const discovery::WorkerSetPtr& workers);
  std::shared_ptr<const FleetView> view() const;

  // The routable slots for `model` and `stage` among `view`, excluding `skip` (workers already
  // tried by this request), in one pass over the view. When every healthy worker is in backoff,
  // those are offered too (trying one beats answering 503). `at_capacity` tells whether workers
  // were skipped only because of the in-flight cap (the caller then sheds with 429).
  void candidates(const FleetView& view, std::string_view model, routing::Stage stage,
                  const std::vector<kv::WorkerId>& skip, std::vector<kv::WorkerId>& out,
                  bool* at_capacity = nullptr) const;

  // The model's fleet is disaggregated: it has routable prefill-role and decode-role workers
  // (refused workers do not count; backoff and the in-flight cap do). Requests are then served
  // in two calls (inference.cc); workers of role "both" are not used for them. A fleet with
  // only one of the two pools is not split: its workers are routed as aggregated ones.
  // FleetView::split; O(log models).
  bool split(const FleetView& view, std::string_view model) const;

  void record_success(const FleetMember& member) const;
  void record_failure(const FleetMember& member) const;

  // Periodic upkeep (every second from the gateway): expire stale active load, refuse workers
  // whose events carry another block size, ask workers with unknown models again, and every
  // kModelRefreshTicks ask every worker what it serves (LoRA adapters come and go at run time:
  // vLLM's /v1/load_lora_adapter).
  void maintain();
  static constexpr uint64_t kModelRefreshTicks = 5;

  // The member's KV-event stream (ZMQ subscriber or NATS source); none when it has no events.
  std::optional<events::StreamStats> event_stats(const FleetMember& member) const;
  // The member's mirror with the stream positions it reflects (a sibling's warm start); none
  // when it has no events.
  std::optional<events::StreamSnapshot> stream_snapshot(const FleetMember& member) const;
  // Where its events come from, for the admin API: the ZMQ endpoint, the NATS subject, or
  // the --kv-events-bind listener with the worker's topic.
  std::string event_source(const FleetMember& member) const;

  // "healthy", "backoff", "refused" (a state for the admin API).
  std::string health(const FleetMember& member) const;

  // Every model any member of the current view serves (for /v1/models).
  std::vector<std::string> models() const;
  // What `view` knows of a request's `model` (FleetView::lookup; O(log models), no allocation).
  using ModelLookup = gateway::ModelLookup;
  ModelLookup lookup(const FleetView& view, std::string_view model) const;
  ModelLookup lookup(std::string_view model) const;  // of the current view()

 private:
  FleetMember join(const discovery::WorkerInfo& info, std::shared_ptr<WorkerRuntime> rt);
  // Seeds the member's new stream from Options::seed, when there is a copy for it.
  void seed_stream(const FleetMember& m);
  void leave(const FleetMember& member);
  // Refuses the member in a new view (amend); `mark_refused` in one being built (update_mu_
  // held), telling whether it was not refused already.
  void refuse(const FleetMember& member, const std::string& reason);
  bool mark_refused(FleetMember& m, const std::string& reason);
  // One whole-answer call to a worker, over the fleet's transport (options_.control or HTTP).
  net::awaitable<http::ClientResult<http::Response>> fetch(const http::Endpoint& to,
                                                           http::Request request);
  // Asks the worker for its models and, with `block_size`, its block size; async.
  void probe(const FleetMember& member, bool block_size = true);
  // Publishes a view in which `change` was applied to the member whose runtime is `rt`, unless
  // no member has it any more (it left, or a newer record replaced it) or `change` returns
  // false (nothing changed). Takes update_mu_.
  void amend(const WorkerRuntime* rt, const std::function<bool(FleetMember&)>& change);

  Options options_;
  kv::KvIndex& index_;
  kv::ActiveLoad& load_;
  http::EventLoop& loop_;
  http::Client& client_;
  const Clock& clock_;
  std::shared_ptr<events::ZmqContext> zmq_;
  std::unique_ptr<EnginePoller> poller_;

  // Serialises every change of the fleet (update(), amend(), the destructor): each reads the
  // current view and publishes the next. Guards free_slots_, next_slot_ and the pollers.
  std::mutex update_mu_;
  std::vector<kv::WorkerId> free_slots_;
  kv::WorkerId next_slot_ = 0;
  uint64_t maintain_ticks_ = 0;  // maintain()'s thread only
  std::atomic<std::shared_ptr<const FleetView>> view_;
};

}  // namespace infera::gateway
