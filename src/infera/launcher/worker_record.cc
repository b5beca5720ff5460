#include "infera/launcher/worker_record.h"

#include "infera/config/flags.h"

namespace infera::launcher {

bool is_wildcard_host(std::string_view host) {
  return host == "0.0.0.0" || host == "::" || host == "[::]" || host == "*";
}

std::string default_advertise_host(std::string_view host) {
  return is_wildcard_host(host) ? std::string("127.0.0.1") : std::string(host);
}

std::string advertised_endpoint(std::string_view endpoint, std::string_view host) {
  constexpr std::string_view kTcp = "tcp://";
  if (!endpoint.starts_with(kTcp)) return std::string(endpoint);
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos || colon < kTcp.size()) return std::string(endpoint);
  const std::string_view h = endpoint.substr(kTcp.size(), colon - kTcp.size());
  if (h != "*" && h != "0.0.0.0" && h != "::" && h != "[::]" && h != "[*]") {
    return std::string(endpoint);
  }
  return std::string(kTcp) + std::string(host) + std::string(endpoint.substr(colon));
}

std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos && host.front() != '[' ? "[" + host + "]" : host;
}

discovery::WorkerInfo make_worker_record(const WorkerRecordParams& p) {
  discovery::WorkerInfo w;
  const std::string host = url_host(p.advertise_host);
  w.id = host + ":" + std::to_string(p.port);
  w.url = "http://" + w.id;
  w.role = p.role;
  if (!p.kv_endpoint.empty()) w.kv_endpoint = advertised_endpoint(p.kv_endpoint, p.advertise_host);
  if (!p.replay_endpoint.empty()) {
    w.replay_endpoint = advertised_endpoint(p.replay_endpoint, p.advertise_host);
  }
  w.topic = p.topic;
  w.block_size = p.block_size;
  w.model = p.model;
  w.engine = p.engine;
  w.pd_protocol = p.pd_protocol;
  w.bootstrap_port = p.bootstrap_port;
  return w;
}

Status validate_registration_flags(config::DiscoveryBackend backend,
                                   const std::string& etcd_endpoint, uint32_t lease_ttl_s) {
  if (backend == config::DiscoveryBackend::kEtcd) {
    if (etcd_endpoint.empty()) {
      return invalid_argument("--discovery-backend etcd needs --etcd-endpoint HOST:PORT");
    }
    INFERA_RETURN_IF_ERROR(config::parse_host_port(etcd_endpoint).status());
    if (lease_ttl_s < 2 || lease_ttl_s > 3600) {
      return invalid_argument("--etcd-lease-ttl-s must be 2..3600");
    }
  }
  // static and k8s register nowhere: a router names the worker with --worker, or finds its pod.
  return ok_status();
}

}  // namespace infera::launcher
