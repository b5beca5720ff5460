// The worker record an engine registers in discovery (docs/contracts.md section 8), built the same
// way by `infera engine mock` (MockEngine) and by the launchers of real engines (launcher.h):
// the URL and KV-event endpoints with a wildcard host replaced by the advertise host, role,
// topic, block size, model and engine name. Plain functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "infera/common/status.h"
#include "infera/config/server_config.h"
#include "infera/discovery/worker.h"

namespace infera::launcher {

// The host put into registered URLs and endpoints: `host`, or 127.0.0.1 when `host` is a
// wildcard (0.0.0.0, ::, [::], *).
bool is_wildcard_host(std::string_view host);
std::string default_advertise_host(std::string_view host);

// "tcp://0.0.0.0:5557" -> "tcp://<host>:5557": a bound wildcard is not an address to publish.
// Any other endpoint is returned unchanged.
std::string advertised_endpoint(std::string_view endpoint, std::string_view host);

// An IPv6 literal in brackets for a URL; anything else unchanged.
std::string url_host(const std::string& host);

struct WorkerRecordParams {
  std::string advertise_host;
  uint16_t port = 0;  // the engine's HTTP port
  discovery::Role role = discovery::Role::kBoth;
  uint32_t block_size = 0;
  std::string model;   // served model name
  std::string engine;  // "mock", "vllm", "sglang"
  std::string pd_protocol;      // "vllm", "sglang"; empty: by engine (discovery::pd_protocol)
  uint32_t bootstrap_port = 0;  // an SGLang-style prefill's bootstrap server; 0: none
  // The KV-event sockets as bound (a wildcard host is replaced); empty: none. Pass the PUB
  // endpoint only when the engine binds it (events::publisher_binds).
  std::string kv_endpoint;
  std::string replay_endpoint;
  std::string topic;
};

discovery::WorkerInfo make_worker_record(const WorkerRecordParams& params);

// The registration flags of `infera engine mock` and the launchers, checked the same way (the
// backend's word read by config::parse_discovery_backend): etcd needs a HOST:PORT endpoint and
// a lease of 2..3600 s; k8s is a clear "not yet".
Status validate_registration_flags(config::DiscoveryBackend backend,
                                   const std::string& etcd_endpoint, uint32_t lease_ttl_s);

}  // namespace infera::launcher
