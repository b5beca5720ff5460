#include "infera/config/transports.h"

namespace infera::config {
namespace {

Result<DiscoveryBackend> resolve_discovery(const TransportInputs& in) {
  if (in.discovery) {
    const DiscoveryBackend d = *in.discovery;
    if (in.workers && d != DiscoveryBackend::kStatic) {
      return invalid_argument("--worker names static workers: it does not go with --discovery-backend " +
                              std::string(name(d)) + " (drop --worker, or pass --discovery-backend static)");
    }
    if (in.etcd && d != DiscoveryBackend::kEtcd) {
      return invalid_argument("--etcd-endpoint is for --discovery-backend etcd, not " + std::string(name(d)) +
                              " (drop it, or pass --discovery-backend etcd)");
    }
    if (in.k8s && d != DiscoveryBackend::kKubernetes) {
      return invalid_argument("the --k8s-* flags and --kubeconfig are for --discovery-backend k8s, not " +
                              std::string(name(d)) + " (drop them, or pass --discovery-backend k8s)");
    }
    return d;
  }
  const int implied = int{in.workers} + int{in.etcd} + int{in.k8s};
  if (implied > 1) {
    return invalid_argument(
        "--worker (static), --etcd-endpoint (etcd) and the --k8s-* flags (k8s) name different "
        "discovery backends: keep one, or pass --discovery-backend");
  }
  if (in.workers) return DiscoveryBackend::kStatic;
  if (in.etcd) return DiscoveryBackend::kEtcd;
  return DiscoveryBackend::kKubernetes;
}

}  // namespace

Result<Transports> resolve_transports(const TransportInputs& in) {
  Transports t;
  INFERA_ASSIGN_OR_RETURN(t.discovery, resolve_discovery(in));
  if (in.events) {
    t.events = *in.events;
    if (in.worker_zmq && t.events == KvEventTransport::kNats) {
      return invalid_argument(
          "--worker ...,kv=/replay= names ZMQ endpoints, which --kv-event-transport nats does not "
          "use: drop kv= and replay=, or pass --kv-event-transport zmq");
    }
    if (in.events_bind && t.events == KvEventTransport::kNats) {
      return invalid_argument(
          "--kv-events-bind binds a ZMQ socket for engines that connect to the router, which "
          "--kv-event-transport nats does not use: drop --kv-events-bind, or pass "
          "--kv-event-transport zmq");
    }
  } else {
    t.events = in.worker_zmq || in.events_bind ? KvEventTransport::kZmq : KvEventTransport::kNats;
  }
  if (in.request) {
    t.request = *in.request;
  } else {
    t.request = in.worker_zmq ? RequestTransport::kHttp : RequestTransport::kNats;
  }
  return t;
}

Result<Transports> resolve_engine_transports(const EngineTransportWords& words) {
  TransportInputs in;
  if (!words.discovery.empty()) {
    INFERA_ASSIGN_OR_RETURN(in.discovery, parse_discovery_backend(words.discovery));
  }
  if (!words.request.empty()) {
    INFERA_ASSIGN_OR_RETURN(in.request, parse_request_transport(words.request));
  }
  if (!words.events.empty()) {
    INFERA_ASSIGN_OR_RETURN(in.events, parse_kv_event_transport(words.events));
  }
  in.etcd = words.etcd;
  return resolve_transports(in);
}

bool worker_spec_names_zmq(std::string_view spec) {
  return spec.find(",kv=") != std::string_view::npos || spec.find(",replay=") != std::string_view::npos;
}

Result<std::string> resolve_nats_server(bool flag_set, const std::string& flag,
                                        const std::vector<std::string>& environment) {
  std::string value = flag;
  if (!flag_set) {
    value = "nats://localhost:4222";
    for (const std::string& kv : environment) {
      if (kv.rfind("NATS_SERVER=", 0) == 0) value = kv.substr(12);
    }
  }
  // The syntax is checked where it is used (nats::parse_server_urls); config does not depend on
  // the NATS module, so only the scheme is looked at here.
  if (value.rfind("nats://", 0) != 0 && value.rfind("tls://", 0) != 0) {
    return invalid_argument("--nats-server '" + value.substr(0, 200) +
                            "': the scheme must be nats:// or tls:// (env NATS_SERVER, default "
                            "nats://localhost:4222)");
  }
  return value;
}

Status check_namespace(std::string_view ns) {
  bool ok = !ns.empty() && ns.size() <= 128 && ns.front() != '.' && ns.back() != '.';
  char prev = 0;
  for (char c : ns) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || (c == '.' && prev != '.'));
    prev = c;
  }
  if (ok) return ok_status();
  return invalid_argument("--namespace '" + std::string(ns.substr(0, 64)) +
                          "': NATS subject tokens of letters, digits, '-' and '_' (default infera)");
}

}  // namespace infera::config
