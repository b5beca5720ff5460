// LoadBus: this replica's side of the shared active load (docs/contracts.md section 12,
// docs/scale-out.md). As the router's LoadListener it publishes every load change this replica
// makes on `NS.router.load` (load_op.h: tagged with its router id, numbered from 1); it
// subscribes to the same subject and hands the other replicas' changes to PeerLoad, which folds
// them into the load this replica scores with. tick() (once a second, from the owner's timer)
// publishes the heartbeat and drops peers gone silent; stop() says goodbye.
// Publishing appends to the NATS client's bounded buffer and never waits for the network: when
// the bus is away or full, the change is dropped and counted (peers converge as requests end).
// Received messages are decoded on the client's thread; garbage, another version or an unknown
// op is counted and never applied.
// Thread-safe: the listener calls come from any request thread (one short lock keeps seq order
// and buffer order the same); stats() from anywhere.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "infera/common/spin_mutex.h"
#include "infera/common/status.h"
#include "infera/nats/client.h"
#include "infera/replica/peer_load.h"
#include "infera/routing/router.h"

namespace infera::replica {

struct LoadBusStats {
  uint64_t published = 0;
  uint64_t publish_failed = 0;  // the bus refused the message (away, buffer full): not shared
  uint64_t received = 0;        // messages on the subject, own echoes included
  uint64_t malformed = 0;       // not a load op of version 1 (ignored)
};

class LoadBus final : public routing::LoadListener {
 public:
  struct Options {
    std::string ns = "infera";  // --namespace
    std::string router_id;      // this replica's (PeerLoad::self_id())
  };
  // A worker's id (host:port) from its slot; "" when the slot is empty now.
  using WorkerName = std::function<std::string(kv::WorkerId)>;

  // Everything must outlive the bus.
  LoadBus(Options options, nats::Client& client, PeerLoad& peers, WorkerName name);
  ~LoadBus();  // stop()
  LoadBus(const LoadBus&) = delete;
  LoadBus& operator=(const LoadBus&) = delete;

  // Subscribes to the subject and says hello.
  Status start();
  // Says goodbye (waiting up to kByeFlush for the bus to take it), then unsubscribes; listener
  // calls after it publish nothing. Not from the NATS client's own thread.
  void stop();
  static constexpr std::chrono::milliseconds kByeFlush{500};
  // The heartbeat, and the expiry of silent peers. From the owner's timer (any thread).
  void tick();

  void on_add(kv::LoadTicket ticket, std::span<const uint64_t> seq_hashes, uint32_t uncached,
              uint32_t cached) override;
  void on_prefill_done(kv::LoadTicket ticket) override;
  void on_release(kv::LoadTicket ticket) override;

  LoadBusStats stats() const;
  const std::string& subject() const { return subject_; }

 private:
  // True when the bus took it.
  bool publish(const OpFields& op);
  void receive(const nats::Message& message);

  Options options_;
  nats::Client& client_;
  PeerLoad& peers_;
  WorkerName name_;
  std::string subject_;
  std::atomic<bool> running_{false};
  uint64_t sid_ = 0;
  SpinMutex publish_mu_;  // guards seq_ and out_: a message's seq and its place in the buffer
  uint64_t seq_ = 0;
  std::string out_;
  std::vector<uint64_t> blocks_;  // receive()'s scratch (the client's thread only)
  std::atomic<uint64_t> published_{0}, publish_failed_{0}, received_{0}, malformed_{0};
};

}  // namespace infera::replica
