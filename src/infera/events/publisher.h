// KvEventPublisher: publishes KV-event batches the way vLLM's ZmqEventPublisher does, for the
// simulated engine (and tests): a PUB socket sends [topic, sequence (8-byte big-endian, from 0
// per publisher life), payload]; a ROUTER replay socket answers [identity, "", start_seq] with
// every buffered batch from start_seq on, [identity, "", seq, payload] each, then the end marker
// [identity, "", 0xff x 8, ""]; the buffer keeps the last `buffer_steps` encoded batches. The PUB
// socket binds or connects by vLLM's rule (endpoint.h); the replay socket always binds. Like
// vLLM, the PUB drops messages for a subscriber past its high-water mark: gaps are the
// subscriber's to detect and repair. (The socket is an XPUB so that wait_for_subscriber() can
// see subscriptions; on the wire it is a PUB.)
//
// Threading: publish() from any thread (batches are encoded on the caller's thread and queued;
// one publisher thread owns the sockets, sends, buffers and serves replays). Sequence numbers
// follow the order of publish() calls.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "infera/common/clock.h"
#include "infera/common/status.h"
#include "infera/events/encoder.h"
#include "infera/events/event.h"
#include "infera/events/zmq_context.h"

namespace infera::events {

class KvEventPublisher {
 public:
  struct Options {
    std::string endpoint = "tcp://*:5557";  // tcp://127.0.0.1:* binds a free port (see endpoint())
    std::optional<bool> bind;               // unset: vLLM's rule (publisher_binds in endpoint.h)
    std::string replay_endpoint;            // ROUTER bind address; empty: no replay service
    std::string topic;
    int64_t data_parallel_rank = 0;  // endpoints offset by the rank; batches without one get it
    size_t buffer_steps = 10000;     // replay buffer, in batches
    int hwm = 100000;                // PUB send high-water mark, in messages
    size_t max_queue_size = 100000;  // batches waiting for the publisher thread
    WireFormat format = WireFormat::kVllmMap;
  };

  // Binds or connects the sockets (a failure is an error here) and starts the thread.
  static Result<std::unique_ptr<KvEventPublisher>> start(Options options,
                                                         std::shared_ptr<ZmqContext> context = nullptr);
  ~KvEventPublisher();  // stops
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Encodes the batch and queues it with the next sequence number. kResourceExhausted when the
  // queue is full (the batch is dropped and takes no sequence number, as in vLLM).
  Status publish(const EventBatch& batch);
  // Fault injection (tests, the simulator's chaos options): takes a sequence number and goes
  // into the replay buffer like any batch, but is not sent live, as if the network lost it.
  Status publish_replay_only(const EventBatch& batch);

  // Waits until the publisher thread has sent (or dropped) everything queued so far.
  bool flush(Nanos timeout);
  // Waits until a subscriber's subscription matching our topic has arrived (connect and
  // subscription propagation are asynchronous in ZeroMQ). True at once if one already has.
  bool wait_for_subscriber(Nanos timeout);

  // The PUB / ROUTER endpoints, with the port resolved when bound (tcp://127.0.0.1:41234).
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  uint64_t next_sequence() const;
  // Replay requests answered so far.
  uint64_t replays_served() const { return replays_served_.load(std::memory_order_acquire); }

  void stop();

 private:
  struct Sockets;
  struct Queued {
    uint64_t seq = 0;
    bool live = true;
    std::string payload;
  };

  explicit KvEventPublisher(Options options, std::shared_ptr<ZmqContext> context);
  Status enqueue(const EventBatch& batch, bool live);
  void run(std::unique_ptr<Sockets> sockets);
  void wake();

  Options options_;
  std::shared_ptr<ZmqContext> context_;
  std::string endpoint_;
  std::string replay_endpoint_;
  int wake_fd_ = -1;  // eventfd: publish() and stop() wake the thread's poll
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> replays_served_{0};
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;  // guarded by mu_
  uint64_t next_seq_ = 0;     // guarded by mu_
  uint64_t done_seq_ = 0;     // guarded by mu_: sequence numbers below this are sent
  bool subscribed_ = false;   // guarded by mu_
};

}  // namespace infera::events
