#include "infera/launcher/worker_relays.h"

#include "infera/events/endpoint.h"
#include "infera/events/nats_relay.h"
#include "infera/nats/client.h"
#include "infera/nats/request_relay.h"

namespace infera::launcher {

Status nats_unreachable(const Status& cause) {
  return Status(cause.code(),
                "cannot reach NATS for --request-transport/--kv-event-transport nats (" +
                    cause.message() +
                    "); start a NATS server, point --nats-server (or NATS_SERVER) at one, or pass "
                    "--request-transport http --kv-event-transport zmq");
}

Result<std::unique_ptr<WorkerRelays>> WorkerRelays::start(const WorkerRelayOptions& o) {
  if (!o.events && !o.requests) return std::unique_ptr<WorkerRelays>();
  INFERA_ASSIGN_OR_RETURN(std::vector<nats::ServerUrl> servers, nats::parse_server_urls(o.nats_server));
  std::unique_ptr<WorkerRelays> r(new WorkerRelays());
  nats::ClientOptions no;
  no.servers = std::move(servers);
  no.name = "infera-worker " + o.worker_id;
  r->bus_ = std::make_unique<nats::Client>(no);
  if (Status s = r->bus_->connect(); !s.ok()) return nats_unreachable(s);
  if (o.events) {
    events::RelayConfig rc;
    rc.worker_id = o.worker_id;
    rc.ns = o.ns;
    rc.endpoint = events::local_connect_endpoint(o.kv_endpoint);
    rc.replay_endpoint = events::local_connect_endpoint(o.replay_endpoint);
    rc.topic = o.topic;
    r->kv_ = std::make_unique<events::KvEventRelay>(*r->bus_, rc);
    INFERA_RETURN_IF_ERROR(r->kv_->start());
  }
  if (o.requests) {
    nats::RequestRelayOptions ro;
    ro.ns = o.ns;
    ro.worker_id = o.worker_id;
    ro.engine = o.engine;
    r->requests_ = std::make_unique<nats::RequestRelay>(*r->bus_, ro);
    INFERA_RETURN_IF_ERROR(r->requests_->start());
  }
  INFERA_RETURN_IF_ERROR(r->bus_->flush());  // subscribed before the worker says it is ready
  return r;
}

WorkerRelays::~WorkerRelays() { stop(); }

void WorkerRelays::stop_requests() {
  if (requests_) requests_->stop();
}

void WorkerRelays::stop() {
  stop_requests();
  if (kv_) kv_->stop();
  if (bus_) bus_->close();
}

}  // namespace infera::launcher
