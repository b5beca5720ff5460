// The worker side of the NATS transports (docs/nats.md), shared by `infera engine mock` and
// the launchers: one NATS connection for the process, a KvEventRelay from the engine's own ZMQ
// publisher (on this host) to NS.kv-events.<worker>, and a RequestRelay from NS.requests.<worker>
// to the engine's own HTTP port. Started once the engine is up, before it registers; stopped in
// two steps on shutdown (requests first, events after the engine's last batch).
#pragma once

#include <memory>
#include <string>

#include "infera/common/status.h"
#include "infera/http/client.h"

namespace infera::events {
class KvEventRelay;
}  // namespace infera::events
namespace infera::nats {
class Client;
class RequestRelay;
}  // namespace infera::nats

namespace infera::launcher {

struct WorkerRelayOptions {
  std::string nats_server;  // --nats-server (checked: nats::parse_server_urls)
  std::string ns = "infera";
  std::string worker_id;    // host:port, as routers name the worker
  bool events = false;      // relay KV events from:
  std::string kv_endpoint;       // the engine's PUB (a bind address is connected on loopback)
  std::string replay_endpoint;   // its ROUTER; empty: no replay
  std::string topic;
  bool requests = false;    // relay requests to:
  http::Endpoint engine;
};

class WorkerRelays {
 public:
  // Connects (an unreachable server is one error line naming the flags) and starts the relays
  // asked for; they are subscribed when this returns. Null when neither is asked for.
  static Result<std::unique_ptr<WorkerRelays>> start(const WorkerRelayOptions& options);
  ~WorkerRelays();  // stop()
  WorkerRelays(const WorkerRelays&) = delete;
  WorkerRelays& operator=(const WorkerRelays&) = delete;

  void stop_requests();
  void stop();

 private:
  WorkerRelays() = default;
  std::unique_ptr<nats::Client> bus_;
  std::unique_ptr<events::KvEventRelay> kv_;
  std::unique_ptr<nats::RequestRelay> requests_;
};

// The one line every NATS startup failure gives.
Status nats_unreachable(const Status& cause);

}  // namespace infera::launcher
