// KV-event subscribers: how the router hears each worker's cache changes over ZeroMQ.
//
// KvEventSubscriber (one per worker, the usual mode): a SUB socket connects to the worker's PUB
// endpoint (one per data-parallel rank, ports offset as vLLM does) with the worker's topic,
// reads 3-frame messages [topic, sequence, payload] on its own thread and feeds them to a
// WorkerStream (stream.h: decode, sequence tracking, replay through a DEALER, apply to the
// index). KvEventListener (bind mode): engines connect their PUB sockets to one SUB socket the
// router binds; the topic says which worker a message belongs to.
//
// Ownership: the gateway creates and stops one subscriber per discovered worker (or registers
// the worker with the listener); both share the caller's KvIndex, which must outlive them.
// Threading: start()/stop() from the owner's thread; stats(), state() and the listener's
// add_worker()/remove_worker() from any thread. Socket threads never block request threads:
// they take the index's write lock only while applying one event. Every wait has a timeout;
// stop() returns within a poll slice (20 ms) plus the time to apply one batch.
//
// Reconnects: a socket monitor on the subscriber's SUB reports its connection events on the
// socket thread; when the connection to a publisher drops and comes back, the engine on the
// other side may be a new life (a fast restart on the same port whose first batches were
// missed), so the stream verifies it through the replay socket and rebuilds the mirror unless
// it is provably the same engine (stream.h). The bind-mode listener does not do this (engines
// connect to it; a restart there is seen by its sequence numbers only).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "infera/common/clock.h"
#include "infera/common/status.h"
#include "infera/events/stream.h"
#include "infera/events/zmq_context.h"
#include "infera/kv/index.h"

namespace infera::events {

struct SubscriberConfig {
  kv::WorkerId worker = 0;
  std::string worker_name;      // host:port, for logs and the admin API
  std::string endpoint;         // the worker's PUB endpoint, e.g. tcp://10.0.0.7:5557
  std::string replay_endpoint;  // its ROUTER replay endpoint; empty: gaps make the mirror stale
  std::string topic;            // SUB prefix filter (vLLM's KVEventsConfig.topic; "" = all)
  uint32_t dp_size = 1;         // data-parallel ranks, each on endpoint port + rank
  int rcv_hwm = 10000;  // SUB receive queue (messages, ~1.5 KB each); ZMQ drops beyond it
  Nanos replay_timeout = std::chrono::seconds(2);  // silence that fails a replay request
  DecodeLimits limits;
  EventApplier::Options apply;
};

class KvEventSubscriber {
 public:
  KvEventSubscriber(kv::KvIndex& index, SubscriberConfig config,
                    std::shared_ptr<ZmqContext> context = nullptr);
  ~KvEventSubscriber();  // stops
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  // Adds the worker to the index, connects (an invalid endpoint is an error here) and starts
  // the socket thread. Once only.
  Status start();
  // Stops the thread promptly; the worker's mirror stays in the index (its owner removes it).
  void stop();

  StreamStats stats() const;
  SubscriberState state() const;
  // Warm start (WorkerStream::snapshot/seed): the worker's mirror with the positions it reflects
  // (none before start()), and the start from a sibling's copy, right after start() (false once
  // a message arrived: the stream then catches up through replay as usual). Any thread.
  std::optional<StreamSnapshot> snapshot() const;
  bool seed(const StreamSnapshot& snapshot);
  const SubscriberConfig& config() const { return config_; }
  // CPU time the socket thread has used (receive, decode, apply); 0 when it is not running.
  // Divided by the blocks applied it is the subscriber's cost per block whatever else runs on
  // the machine.
  Nanos thread_cpu_time() const;

 private:
  struct Sockets;
  void run(std::unique_ptr<Sockets> sockets);
  // Handles the SUB's queued connection events: a disconnect then a reconnect makes the
  // stream verify the engine's incarnation (WorkerStream::on_reconnected).
  void handle_monitor(Sockets& sockets);

  kv::KvIndex& index_;
  SubscriberConfig config_;
  std::shared_ptr<ZmqContext> context_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<ReplaySource> replay_;
  std::unique_ptr<WorkerStream> stream_;
  std::thread thread_;
};

struct ListenerConfig {
  std::string endpoint;  // bind address, e.g. tcp://*:5557, or tcp://127.0.0.1:* for any port
  int rcv_hwm = 100000;  // shared by every engine that connects
  Nanos replay_timeout = std::chrono::seconds(2);
  DecodeLimits limits;
};

struct ListenerWorker {
  kv::WorkerId worker = 0;
  std::string worker_name;
  std::string topic;            // exact frame-0 match (llm-d style: "kv@<ip>:<port>@<model>")
  std::string replay_endpoint;  // empty: gaps make the mirror stale
  EventApplier::Options apply;
};

class KvEventListener {
 public:
  KvEventListener(kv::KvIndex& index, ListenerConfig config,
                  std::shared_ptr<ZmqContext> context = nullptr);
  ~KvEventListener();
  KvEventListener(const KvEventListener&) = delete;
  KvEventListener& operator=(const KvEventListener&) = delete;

  // Binds (a bind failure is an error here) and starts the socket thread.
  Status start();
  void stop();
  // The bound endpoint with its port resolved (tcp://127.0.0.1:41234); valid after start().
  std::string endpoint() const;

  // Registers a worker by topic (unique) and adds it to the index. Any thread.
  Status add_worker(ListenerWorker worker);
  // Stops routing the worker's topic; its mirror stays in the index. When it returns, no
  // message of the worker is being applied (its slot may be given to another). Any thread.
  void remove_worker(kv::WorkerId worker);

  std::optional<StreamStats> stats(kv::WorkerId worker) const;
  // Messages no worker could be charged with (unknown topic, frames missing), by MessageError.
  std::array<uint64_t, kNumMessageErrors> unattributed_errors() const;

 private:
  struct Entry;
  struct Sockets;
  struct TopicHash {  // lookup by the frame's bytes without building a string
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  void run(std::unique_ptr<Sockets> sockets);
  std::shared_ptr<Entry> find(std::string_view topic) const;

  kv::KvIndex& index_;
  ListenerConfig config_;
  std::shared_ptr<ZmqContext> context_;
  std::string bound_endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  std::mutex step_mu_;  // held while one message is applied, and by remove_worker
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Entry>, TopicHash, std::equal_to<>>
      by_topic_;                                            // guarded by mu_
  std::array<uint64_t, kNumMessageErrors> unattributed_{};            // guarded by mu_
};

}  // namespace infera::events
