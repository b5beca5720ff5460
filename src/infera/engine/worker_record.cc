#include "infera/engine/worker_record.h"

namespace infera::engine {

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
  return w;
}

}  // namespace infera::engine
