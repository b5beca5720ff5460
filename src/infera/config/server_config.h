// ServerConfig: every setting of `infera server`, with the product documentation's flag names
// (docs/contracts.md section 2: those names are a contract) and defaults, parsed and validated once
// at startup. Immutable afterwards; any thread may read it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/log.h"
#include "infera/common/status.h"
#include "infera/config/config_sources.h"
#include "infera/config/load_model_flags.h"

namespace infera::config {

// The values docs/contracts.md section 2 names for the discovery and transport flags. Every name
// parses; the ones this build cannot serve yet are a startup error naming what to pass instead.
enum class DiscoveryBackend { kStatic, kEtcd, kKubernetes };
enum class RequestTransport { kHttp, kNats };
enum class KvEventTransport { kZmq, kNats };
std::string_view name(DiscoveryBackend backend);
std::string_view name(RequestTransport transport);
std::string_view name(KvEventTransport transport);
// The --discovery-backend word as the enum ("unknown --discovery-backend 'x' (supported: ...)"
// otherwise): the server, `infera engine mock` and the launchers read it the same way.
Result<DiscoveryBackend> parse_discovery_backend(std::string_view word);
Result<RequestTransport> parse_request_transport(std::string_view word);
Result<KvEventTransport> parse_kv_event_transport(std::string_view word);

struct ServerConfig {
  // Listener
  std::string host = "0.0.0.0";
  uint32_t port = 8000;
  uint32_t io_threads = 2;
  // Routing
  std::string router_policy = "kv-aware";  // a name in routing's policy registry (make_policy)
  std::string tokenizer_path;  // --router-tokenizer-path: a directory or a Hugging Face id
  double kv_overlap_weight = 1.0;
  std::optional<double> kv_prefill_overlap_weight;
  std::optional<double> kv_decode_overlap_weight;
  double router_temperature = 0.0;
  uint64_t router_seed = 0;  // 0: seeded from the system's entropy
  uint32_t block_size = 16;  // --block-size / --page-size
  double active_block_ttl_s = 300;  // in-flight requests older than this stop counting as load
  LoadModelFlags load_model;        // --kv-load-model and its terms (routing/load_model.h)
  // Discovery and transports
  // Resolved by config/transports.h: explicit flags, else what other settings imply, else the
  // production defaults (k8s, nats, nats).
  DiscoveryBackend discovery_backend = DiscoveryBackend::kKubernetes;
  std::string etcd_endpoint;  // HOST:PORT
  std::string etcd_prefix = "infera/workers/";
  std::string kubeconfig;            // k8s: empty = $KUBECONFIG, else in-cluster
  std::string k8s_namespace;         // empty: the kubeconfig context's / the pod's, else default
  std::string k8s_selector;          // pods of any role (llm-d.ai/role label)
  std::string k8s_prefill_selector;  // with k8s_decode_selector: role from the selector
  std::string k8s_decode_selector;
  std::string k8s_inference_pool;    // an InferencePool's name: selector and port from it
  std::vector<std::string> workers;  // --worker specs (static discovery)
  RequestTransport request_transport = RequestTransport::kNats;
  KvEventTransport kv_event_transport = KvEventTransport::kNats;
  std::string nats_server = "nats://localhost:4222";  // --nats-server, else $NATS_SERVER
  std::string nats_namespace = "infera";              // --namespace: the subjects' prefix
  std::string kv_events_bind;  // optional: a SUB endpoint the router binds for engines that connect
  // --peer URLs (repeatable): the other router replicas of this --namespace, named by hand
  // (replica/membership.h); each http(s)://HOST:PORT, checked by parse_peer_url.
  std::vector<std::string> peers;
  // Limits and timeouts
  uint64_t max_body_bytes = 16ull << 20;
  uint32_t max_header_bytes = 16u << 10;
  uint32_t max_prompt_tokens = 1u << 20;
  uint32_t max_messages = 10000;
  uint32_t max_json_depth = 64;
  double client_idle_timeout_s = 60;     // keep-alive idle, and each client read
  double upstream_connect_timeout_s = 5;
  double upstream_first_byte_timeout_s = 600;  // queueing on a busy engine can be long
  double upstream_idle_timeout_s = 300;  // gap between two chunks of a stream
  double engine_metrics_interval_s = 1;  // each worker's /metrics polled for its load; 0: off
  double request_timeout_s = 3600;       // whole request, stream included
  uint32_t retries = 2;                  // other workers tried when one fails before any byte
  uint32_t max_inflight_per_worker = 0;  // 0: unlimited
  uint32_t max_queue = 4096;             // requests waiting for a worker slot before 429
  double max_queue_wait_s = 30;          // longest wait in that queue before 429
  double shutdown_grace_s = 30;
  // Lifecycle: on SIGTERM, /readyz fails at once and everything is still served for this long
  // before the listener closes (load balancers stop sending first). A reload (SIGHUP) compares
  // configs whole, so a setting added here is reported at least as "other settings".
  double drain_delay_s = 0;
  bool operator==(const ServerConfig&) const = default;
  // Inference API keys: when any is set, the OpenAI routes (/v1/completions,
  // /v1/chat/completions, /v1/models, /tokenize) need 'Authorization: Bearer KEY' with one of
  // them (compared in constant time; 401 otherwise).
  std::vector<std::string> api_keys;  // --api-key (repeatable) and --api-key-file's keys
  std::string api_key_file;           // --api-key-file: one key a line; a reload re-reads it
  bool strip_authorization = false;   // --strip-authorization: the client's header stays here
  // CORS on the main listener: "*" or exact origins (scheme://host[:port]); empty: none.
  std::vector<std::string> allowed_origins;
  // TLS. The listeners' certificate chain and its key (PEM files, both or neither; vLLM's flag
  // names): with them the main and admin listeners speak HTTPS only. https:// workers are
  // verified against upstream_ca_file (a PEM bundle) when set, else the system's CA store.
  std::string ssl_certfile;
  std::string ssl_keyfile;
  std::string upstream_ca_file;
  // Admin API
  std::string admin_token;  // bearer token for /v1/admin/* and /metrics when set
  std::string admin_token_file;  // --admin-token-file: admin_token's source; a reload re-reads it
  std::string admin_host;   // separate listener for admin + metrics when set
  int64_t admin_port = -1;  // -1: not set; 0: any free port (logged at startup)
  LogLevel log_level = LogLevel::kInfo;
  LogFormat log_format = LogFormat::kLogfmt;  // --log-format logfmt|json
  bool access_log = true;  // one info line per request (--access-log=false: none)
  // Tracing: the OTLP/HTTP collector the router's spans go to ("": no spans, and the client's
  // trace headers pass to the worker unchanged), and the share of new traces recorded.
  std::string otlp_traces_endpoint;
  double otlp_sample_ratio = 1.0;
};

// A --peer URL, "http(s)://HOST:PORT" (IPv6 in brackets; a trailing '/' is dropped; no path,
// query or user), as "scheme://HOST:PORT"; an error names the flag and the value.
Result<std::string> parse_peer_url(std::string_view url);

// Parses and validates `infera server` flags. On --help returns ok with `help` filled and
// *help_requested set. Beneath the flags: the --config file and INFERA_<FLAG> variables of
// `sources` (config_sources.h; the three-argument form reads this process's environment), and
// --admin-token-file. Every call reads them anew, so a reload (SIGHUP) calls it again with the
// same args and gets the config as the file, the token file and the environment say now.
Result<ServerConfig> parse_server_flags(std::span<const std::string> args, bool* help_requested,
                                        std::string* help);
Result<ServerConfig> parse_server_flags(std::span<const std::string> args, bool* help_requested,
                                        std::string* help, const ConfigSources& sources);

}  // namespace infera::config
