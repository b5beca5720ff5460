// KvEventRelay: the worker side of `--kv-event-transport nats` (docs/contracts.md section 11).
// It subscribes to the engine's own ZMQ KV-event publisher (vLLM's, SGLang's or the mock
// engine's, on the same host) and publishes every message unchanged inside the NATS envelope
// (nats_envelope.h) on NS.kv-events.<worker>; it answers replay requests on NS.kv-replay.<worker>
// from the engine's replay socket (ROUTER), streaming the envelopes to the request's reply
// subject and then the end marker. The engine needs no inbound port: only the relay, on the
// same host, talks to it.
//
// Losses are the router's to repair, as on ZMQ: a message the relay cannot publish (NATS away
// and its outbound buffer full, or a batch above the server's max_payload) is counted and
// dropped; the router sees the gap in the sequence and asks for a replay (a batch above
// max_payload cannot be replayed either: the router's mirror of this worker then goes stale,
// hits count 0, until the engine clears or restarts; docs/reliability.md).
//
// Threading: one thread owns the ZMQ sockets (SUB and replay DEALER), publishes, and serves
// replay requests in turn; the NATS handler only queues them (bounded). start()/stop() from the
// owner's thread; stats() from any. The nats::Client is the caller's and outlives the relay.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "infera/common/clock.h"
#include "infera/common/status.h"
#include "infera/events/nats_envelope.h"
#include "infera/events/zmq_context.h"

namespace infera::nats {
class Client;
}  // namespace infera::nats

namespace infera::events {

struct RelayConfig {
  std::string worker_id;        // host:port, the worker's id in discovery
  std::string ns = "infera";    // --namespace
  std::string endpoint;         // the engine's PUB, e.g. tcp://127.0.0.1:5557
  std::string replay_endpoint;  // its ROUTER; empty: replay requests get only the end marker
  std::string topic;            // SUB filter (vLLM's KVEventsConfig.topic)
  int rcv_hwm = 100000;
  Nanos replay_timeout = std::chrono::seconds(2);
  size_t max_queued_replays = 64;
};

struct RelayStats {
  uint64_t relayed = 0;          // batches published on NATS
  uint64_t dropped = 0;          // batches NATS did not take (buffer full, closed)
  uint64_t oversized = 0;        // batches above the server's max_payload
  uint64_t malformed = 0;        // engine messages without [topic, seq, payload]
  uint64_t replays = 0;          // replay requests answered
  uint64_t replay_errors = 0;    // malformed requests, or the engine's replay failed
  uint64_t replayed_batches = 0;
};

class KvEventRelay {
 public:
  KvEventRelay(nats::Client& client, RelayConfig config,
               std::shared_ptr<ZmqContext> context = nullptr);
  ~KvEventRelay();  // stop()
  KvEventRelay(const KvEventRelay&) = delete;
  KvEventRelay& operator=(const KvEventRelay&) = delete;

  // Connects to the engine's sockets, subscribes the replay subject and starts the thread.
  Status start();
  void stop();
  RelayStats stats() const;
  const RelayConfig& config() const { return config_; }

 private:
  struct Sockets;
  struct Pending {
    std::string reply;
    std::string request;
  };
  void run(std::unique_ptr<Sockets> sockets);
  void serve_replay(Sockets& sockets, const Pending& p);
  bool relay_message(Sockets& sockets);  // false: nothing was waiting

  nats::Client& client_;
  RelayConfig config_;
  std::shared_ptr<ZmqContext> context_;
  std::string subject_;
  std::atomic<bool> stop_{false};
  uint64_t replay_sid_ = 0;
  std::string envelope_;  // the socket thread's encode buffer
  std::thread thread_;

  mutable std::mutex mu_;
  std::deque<Pending> replays_;  // guarded by mu_
  RelayStats stats_;             // guarded by mu_
};

}  // namespace infera::events
