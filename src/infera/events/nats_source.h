// NatsEventSource: the router side of `--kv-event-transport nats` (docs/contracts.md section
// 11). One subscription, NS.kv-events.*, on the process's NATS connection carries every worker's
// batches; each worker's envelopes (nats_envelope.h) feed that worker's WorkerStream (stream.h),
// the same decoder, sequence, gap, replay and restart logic as the ZMQ subscriber: one event
// pipeline, two sources. Replays are NATS requests on NS.kv-replay.<worker>, answered by the
// worker's relay (nats_relay.h).
//
// Threading: the NATS client's thread only looks the worker up by its subject token and queues
// the message (bounded by count and bytes: beyond them a message is dropped and counted, and
// the worker's stream sees the gap and replays; the connection is never stalled). One stream
// thread drains the queue, decodes and applies; a replay blocks that thread only (bounded by
// the replay timeout), never the NATS connection or readers of the index. start()/stop() from the
// owner's thread; add_worker(), remove_worker(), stats() and on_connection() from any thread.
//
// Reconnects: messages published while this connection was down are lost for it (core NATS is
// at-most-once). When the connection comes back, every worker's stream asks its relay for what
// followed its last sequence (WorkerStream::catch_up), so a quiet worker is repaired too, not
// only one whose next batch shows the gap.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "infera/common/clock.h"
#include "infera/common/status.h"
#include "infera/events/stream.h"
#include "infera/kv/index.h"

namespace infera::nats {
class Client;
}  // namespace infera::nats

namespace infera::events {

struct NatsSourceConfig {
  std::string ns = "infera";
  size_t max_queued = 100000;                     // messages waiting for the stream thread
  size_t max_queued_bytes = size_t{256} << 20;   // and their bytes
  Nanos replay_timeout = std::chrono::seconds(2);  // silence that fails a replay request
  DecodeLimits limits;
};

struct NatsWorker {
  kv::WorkerId worker = 0;
  std::string worker_name;  // host:port: its subject token and the envelope's worker_id
  EventApplier::Options apply;
};

struct NatsSourceStats {
  uint64_t received = 0;
  uint64_t dropped = 0;        // the queue was full
  uint64_t unattributed = 0;   // a subject token no worker has, or a worker_id that differs
  uint64_t malformed = 0;      // envelopes that do not decode
};

class NatsEventSource {
 public:
  NatsEventSource(kv::KvIndex& index, nats::Client& client, NatsSourceConfig config);
  ~NatsEventSource();  // stop()
  NatsEventSource(const NatsEventSource&) = delete;
  NatsEventSource& operator=(const NatsEventSource&) = delete;

  // Subscribes and starts the stream thread.
  Status start();
  void stop();

  // Adds the worker to the index and starts routing its subject. Any thread.
  Status add_worker(NatsWorker worker);
  // Stops routing it; its mirror stays in the index (the owner removes it). Any thread.
  void remove_worker(kv::WorkerId worker);

  // The NATS connection went down (false) or came back (true): wire the client's state
  // callback here.
  void on_connection(bool up);

  std::optional<StreamStats> stats(kv::WorkerId worker) const;
  std::optional<SubscriberState> state(kv::WorkerId worker) const;
  // Warm start (WorkerStream::snapshot/seed) of an added worker's stream: its mirror with the
  // positions it reflects (none for a worker not added), and the start from a sibling's copy,
  // right after add_worker() (false once a message arrived). Any thread; the source's lock is
  // not held while the mirror is copied.
  std::optional<StreamSnapshot> snapshot(kv::WorkerId worker) const;
  bool seed(kv::WorkerId worker, const StreamSnapshot& snapshot);
  NatsSourceStats source_stats() const;
  // CPU time of the stream thread (decode, sequence tracking, apply).
  Nanos thread_cpu_time() const { return infera::thread_cpu_time(thread_); }

 private:
  struct Entry;
  struct Item {
    std::shared_ptr<Entry> entry;  // null: a reconnect marker
    std::string payload;
  };
  void run();
  void handle(const Item& item);
  std::shared_ptr<Entry> entry_of(kv::WorkerId worker) const;

  kv::KvIndex& index_;
  nats::Client& client_;
  NatsSourceConfig config_;
  std::atomic<bool> stop_{false};
  uint64_t sid_ = 0;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::shared_ptr<Entry>> by_token_;  // guarded by mu_
  std::deque<Item> queue_;                                          // guarded by mu_
  std::vector<std::string> spare_;  // guarded by mu_: payload buffers to reuse
  static constexpr size_t kMaxSpares = 4096;
  static constexpr size_t kMaxSpareBytes = 64 * 1024;
  size_t queued_bytes_ = 0;                                         // guarded by mu_
  bool was_down_ = false;                                           // guarded by mu_
  NatsSourceStats stats_;                                           // guarded by mu_
};

}  // namespace infera::events
