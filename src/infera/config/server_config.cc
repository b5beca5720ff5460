#include "infera/config/server_config.h"

#include <cmath>
#include <string>
#include <utility>

#include "infera/config/flags.h"
#include "infera/config/transports.h"

namespace infera::config {
namespace {

Status validate(const ServerConfig& c) {
  if (c.port > 65535) return invalid_argument("--port must be 0..65535");
  if (c.block_size == 0) return invalid_argument("--block-size must be > 0");
  if (c.io_threads == 0 || c.io_threads > 64) return invalid_argument("--io-threads must be 1..64");
  auto weight_ok = [](double w) { return w >= 0; };
  if (!weight_ok(c.kv_overlap_weight) ||
      (c.kv_prefill_overlap_weight && !weight_ok(*c.kv_prefill_overlap_weight)) ||
      (c.kv_decode_overlap_weight && !weight_ok(*c.kv_decode_overlap_weight))) {
    return invalid_argument("overlap weights must be >= 0");
  }
  if (c.router_temperature < 0) return invalid_argument("--router-temperature must be >= 0");
  if (!(c.max_queue_wait_s >= 0)) return invalid_argument("--max-queue-wait-s must be >= 0");
  if (!(c.drain_delay_s >= 0)) return invalid_argument("--drain-delay-s must be >= 0");
  switch (c.discovery_backend) {
    case DiscoveryBackend::kStatic:
      if (c.workers.empty()) {
        return invalid_argument("--discovery-backend static needs at least one --worker URL");
      }
      break;
    case DiscoveryBackend::kEtcd:
      if (c.etcd_endpoint.empty()) {
        return invalid_argument("--discovery-backend etcd needs --etcd-endpoint HOST:PORT");
      }
      INFERA_RETURN_IF_ERROR(parse_host_port(c.etcd_endpoint).status());
      break;
    case DiscoveryBackend::kKubernetes:
      if (c.k8s_selector.empty() && c.k8s_prefill_selector.empty() &&
          c.k8s_decode_selector.empty() && c.k8s_inference_pool.empty()) {
        return invalid_argument(
            "k8s discovery (the default) needs --k8s-selector, --k8s-prefill-selector and "
            "--k8s-decode-selector, or --k8s-inference-pool; workers named by hand need --worker URL");
      }
      if (c.k8s_prefill_selector.empty() != c.k8s_decode_selector.empty()) {
        return invalid_argument("--k8s-prefill-selector and --k8s-decode-selector go together");
      }
      if (!c.k8s_inference_pool.empty() &&
          !(c.k8s_selector.empty() && c.k8s_prefill_selector.empty())) {
        return invalid_argument("--k8s-inference-pool replaces the --k8s-*-selector flags");
      }
      break;
  }
  for (const std::string& peer : c.peers) INFERA_RETURN_IF_ERROR(parse_peer_url(peer).status());
  INFERA_RETURN_IF_ERROR(check_namespace(c.nats_namespace));
  if (c.max_body_bytes < 1024) return invalid_argument("--max-body-bytes must be >= 1024");
  if (c.max_header_bytes < 1024) return invalid_argument("--max-header-bytes must be >= 1024");
  for (double t : {c.client_idle_timeout_s, c.upstream_connect_timeout_s,
                   c.upstream_first_byte_timeout_s, c.upstream_idle_timeout_s,
                   c.request_timeout_s}) {
    if (!(t > 0)) return invalid_argument("timeouts must be > 0 seconds");
  }
  if (c.active_block_ttl_s <= 0) return invalid_argument("--active-block-ttl-s must be > 0");
  if (!std::isfinite(c.engine_metrics_interval_s) ||
      (c.engine_metrics_interval_s != 0 &&
       (c.engine_metrics_interval_s < 0.05 || c.engine_metrics_interval_s > 3600))) {
    return invalid_argument("--engine-metrics-interval-s must be 0 (off) or 0.05..3600");
  }
  if (!c.admin_host.empty() && c.admin_port < 0) {
    return invalid_argument("--admin-host needs --admin-port");
  }
  if (c.admin_port > 65535) return invalid_argument("--admin-port must be 0..65535");
  if (c.ssl_certfile.empty() != c.ssl_keyfile.empty()) {
    return invalid_argument(
        "--ssl-certfile and --ssl-keyfile go together: TLS on the listener needs the certificate "
        "chain and its private key");
  }
  if (c.admin_host.empty() && c.admin_port >= 0) {
    return invalid_argument("--admin-port needs --admin-host");
  }
  return ok_status();
}

// The flag's text as one of `names` (a flag's value is a word of the contract, never a free
// string past startup).
template <typename E, size_t N>
Result<E> parse_choice(std::string_view flag, std::string_view text,
                       const std::pair<std::string_view, E> (&names)[N],
                       std::string_view supported) {
  for (const auto& [word, value] : names) {
    if (text == word) return value;
  }
  return invalid_argument("unknown " + std::string(flag) + " '" + std::string(text) +
                          "' (supported: " + std::string(supported) + ")");
}

constexpr std::pair<std::string_view, DiscoveryBackend> kBackends[] = {
    {"static", DiscoveryBackend::kStatic},
    {"etcd", DiscoveryBackend::kEtcd},
    {"k8s", DiscoveryBackend::kKubernetes},
    {"kubernetes", DiscoveryBackend::kKubernetes}};
constexpr std::pair<std::string_view, RequestTransport> kRequestTransports[] = {
    {"http", RequestTransport::kHttp}, {"nats", RequestTransport::kNats}};
constexpr std::pair<std::string_view, KvEventTransport> kEventTransports[] = {
    {"zmq", KvEventTransport::kZmq}, {"nats", KvEventTransport::kNats}};

// The words of the flags above, as given (before they become enums).
struct ChoiceWords {
  std::string discovery_backend;  // "": not given (config/transports.h decides)
  std::string request_transport;
  std::string kv_event_transport;
  std::string log_level = "info";
  std::string log_format = "logfmt";
};

Status resolve_choices(const ChoiceWords& w, const FlagSet& f, const ConfigSources& sources,
                       ServerConfig& c) {
  TransportInputs in;
  if (!w.discovery_backend.empty()) {
    INFERA_ASSIGN_OR_RETURN(in.discovery, parse_discovery_backend(w.discovery_backend));
  }
  if (!w.request_transport.empty()) {
    INFERA_ASSIGN_OR_RETURN(in.request, parse_request_transport(w.request_transport));
  }
  if (!w.kv_event_transport.empty()) {
    INFERA_ASSIGN_OR_RETURN(in.events, parse_kv_event_transport(w.kv_event_transport));
  }
  in.workers = !c.workers.empty();
  for (const std::string& spec : c.workers) in.worker_zmq = in.worker_zmq || worker_spec_names_zmq(spec);
  in.events_bind = !c.kv_events_bind.empty();
  in.etcd = !c.etcd_endpoint.empty();
  in.k8s = !c.kubeconfig.empty() || !c.k8s_namespace.empty() || !c.k8s_selector.empty() ||
           !c.k8s_prefill_selector.empty() || !c.k8s_decode_selector.empty() ||
           !c.k8s_inference_pool.empty();
  INFERA_ASSIGN_OR_RETURN(Transports t, resolve_transports(in));
  c.discovery_backend = t.discovery;
  c.request_transport = t.request;
  c.kv_event_transport = t.events;
  INFERA_ASSIGN_OR_RETURN(c.nats_server,
                          resolve_nats_server(f.was_set("--nats-server"), c.nats_server, sources.environment));
  INFERA_ASSIGN_OR_RETURN(c.log_level, parse_log_level(w.log_level));
  INFERA_ASSIGN_OR_RETURN(c.log_format, parse_log_format(w.log_format));
  return ok_status();
}

template <typename E, size_t N>
std::string_view word_of(E value, const std::pair<std::string_view, E> (&names)[N]) {
  for (const auto& [word, v] : names) {
    if (v == value) return word;
  }
  return "?";
}

// --admin-token-file into admin_token: one of the two flags, from any source.
Status read_admin_token(const FlagSet& f, ServerConfig& c) {
  if (!f.was_set("--admin-token-file")) return ok_status();
  if (f.was_set("--admin-token")) {
    return invalid_argument("give --admin-token or --admin-token-file, not both");
  }
  Result<std::string> token = read_token_file(c.admin_token_file);
  if (!token.ok()) return invalid_argument("--admin-token-file: " + token.status().message());
  c.admin_token = std::move(*token);
  return ok_status();
}

// --api-key-file's keys join --api-key's: both flags may be given, from any source.
Status read_api_keys(const FlagSet& f, ServerConfig& c) {
  for (const std::string& key : c.api_keys) {
    if (key.empty()) return invalid_argument("--api-key must not be empty");
  }
  if (!f.was_set("--api-key-file")) return ok_status();
  Result<std::vector<std::string>> keys = read_key_file(c.api_key_file);
  if (!keys.ok()) return invalid_argument("--api-key-file: " + keys.status().message());
  c.api_keys.insert(c.api_keys.end(), keys->begin(), keys->end());
  return ok_status();
}

// --allowed-origins: comma-separated (or repeated) "*" or scheme://host[:port] origins.
Status split_origins(ServerConfig& c) {
  std::vector<std::string> out;
  for (const std::string& value : c.allowed_origins) {
    size_t start = 0;
    while (start <= value.size()) {
      const size_t comma = std::min(value.find(',', start), value.size());
      std::string origin = value.substr(start, comma - start);
      start = comma + 1;
      if (origin.empty()) continue;
      const bool ok = origin == "*" || ((origin.rfind("http://", 0) == 0 || origin.rfind("https://", 0) == 0) &&
                                        origin.find_first_of("/", origin.find("//") + 2) == std::string::npos);
      if (!ok) {
        return invalid_argument("--allowed-origins '" + origin.substr(0, 100) +
                                "': each origin is * or scheme://host[:port], with no path");
      }
      out.push_back(std::move(origin));
    }
  }
  c.allowed_origins = std::move(out);
  return ok_status();
}

// --otlp-sample-ratio is a share, and only means something with a collector to send to.
Status check_tracing(const FlagSet& f, const ServerConfig& c) {
  if (!(c.otlp_sample_ratio >= 0.0 && c.otlp_sample_ratio <= 1.0)) {
    return invalid_argument("--otlp-sample-ratio must be between 0 and 1");
  }
  if (f.was_set("--otlp-sample-ratio") && c.otlp_traces_endpoint.empty()) {
    return invalid_argument("--otlp-sample-ratio needs --otlp-traces-endpoint (no spans are sent without it)");
  }
  return ok_status();
}

// Who may call the server: the API keys, CORS, the admin token and listener.
void add_access_flags(FlagSet& f, ServerConfig& c) {
  f.add("--api-key", &c.api_keys,
        "require 'Authorization: Bearer KEY' on the OpenAI routes; repeatable (any key passes)",
        "KEY");
  f.add("--api-key-file", &c.api_key_file,
        "more keys from PATH, one a line ('#' comments), re-read on reload", "PATH");
  f.add("--strip-authorization", &c.strip_authorization,
        "do not forward the client's Authorization header to workers (default: forwarded)");
  f.add("--allowed-origins", &c.allowed_origins,
        "CORS: origins allowed to call the main listener from a browser, comma-separated or "
        "repeated, * for any (default: none; preflight requests are then refused)",
        "ORIGINS");
  f.add("--admin-token", &c.admin_token,
        "require 'Authorization: Bearer TOKEN' on /v1/admin/* and /metrics", "TOKEN");
  f.add("--admin-token-file", &c.admin_token_file,
        "read --admin-token from PATH, trailing newline trimmed, re-read on reload (env "
        "INFERA_ADMIN_TOKEN_FILE; flags > env > --config file); not with --admin-token",
        "PATH");
  f.add("--ssl-certfile", &c.ssl_certfile,
        "serve HTTPS: the listeners' certificate chain, PEM (with --ssl-keyfile)", "PATH");
  f.add("--ssl-keyfile", &c.ssl_keyfile, "the private key of --ssl-certfile, PEM", "PATH");
  f.add("--upstream-ca-file", &c.upstream_ca_file,
        "CA certificates (PEM bundle) that https:// workers' certificates must chain to "
        "(default: the system's CA store)",
        "PATH");
  f.add("--admin-host", &c.admin_host, "serve admin and metrics on a separate listener", "HOST");
  f.add("--admin-port", &c.admin_port, "port of the separate admin listener (0: any free port, logged)", "PORT");
}

// What the server tells about itself: logs, access lines, traces.
void add_observability_flags(FlagSet& f, ServerConfig& c, ChoiceWords& words) {
  f.add("--log-level", &words.log_level, "debug, info (default), warn or error", "LEVEL");
  f.add("--log-format", &words.log_format,
        "logfmt (default: key=value) or json (one object a line, for log pipelines)", "FORMAT");
  f.add("--access-log", &c.access_log,
        "one info line per request: id, trace, model, route, worker, status, tokens, hits, TTFT, "
        "duration, retries (default on; --access-log=false turns it off)");
  f.add("--otlp-traces-endpoint", &c.otlp_traces_endpoint,
        "send a span per request to this OpenTelemetry collector over OTLP/HTTP JSON, "
        "http://HOST:PORT[/PATH] (PATH default /v1/traces); the worker's spans become its children",
        "URL");
  f.add("--otlp-sample-ratio", &c.otlp_sample_ratio,
        "share of the traces the router starts that are recorded, 0..1 (default 1); a client's "
        "traceparent decides for its own trace",
        "RATIO");
}

void add_nats_flags(FlagSet& f, ServerConfig& c) {
  f.add("--nats-server", &c.nats_server,
        "NATS server URL(s), nats://[user:pass@|token@]HOST:PORT or tls://..., comma-separated "
        "(default $NATS_SERVER, else nats://localhost:4222)",
        "URL");
  f.add("--namespace", &c.nats_namespace, "prefix of the NATS subjects (default infera)", "NS");
  // The routing group's other members (docs/scale-out.md).
  f.add("--peer", &c.peers,
        "another router replica of this --namespace, repeatable: http(s)://HOST:PORT of its "
        "listener (default: router records from discovery)",
        "URL");
}

}  // namespace

Result<std::string> parse_peer_url(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return invalid_argument("--peer '" + std::string(url.substr(0, 256)) + "': " +
                            std::string(why) + " (expected http://HOST:PORT or https://HOST:PORT)");
  };
  std::string_view rest = url;
  std::string_view scheme;
  for (std::string_view s : {"http://", "https://"}) {
    if (rest.substr(0, s.size()) == s) scheme = s;
  }
  if (scheme.empty()) return bad("must start with http:// or https://");
  rest.remove_prefix(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find_first_of("/?#@") != std::string_view::npos) {
    return bad("must not have a path or user");
  }
  auto hp = parse_host_port(rest);
  if (!hp.ok()) return bad("no HOST:PORT");
  if (hp->host.empty()) return bad("no host");
  for (const char c : hp->host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == ':' || c == '_';
    if (!ok) return bad("bad host");
  }
  return std::string(scheme) + std::string(rest);
}

std::string_view name(DiscoveryBackend backend) { return word_of(backend, kBackends); }
Result<DiscoveryBackend> parse_discovery_backend(std::string_view word) {
  return parse_choice("--discovery-backend", word, kBackends, "static, etcd, k8s");
}
Result<RequestTransport> parse_request_transport(std::string_view word) {
  return parse_choice("--request-transport", word, kRequestTransports, "http, nats");
}
Result<KvEventTransport> parse_kv_event_transport(std::string_view word) {
  return parse_choice("--kv-event-transport", word, kEventTransports, "zmq, nats");
}
std::string_view name(RequestTransport transport) {
  return word_of(transport, kRequestTransports);
}
std::string_view name(KvEventTransport transport) { return word_of(transport, kEventTransports); }

Result<ServerConfig> parse_server_flags(std::span<const std::string> args, bool* help_requested,
                                        std::string* help) {
  return parse_server_flags(args, help_requested, help, process_config_sources());
}

Result<ServerConfig> parse_server_flags(std::span<const std::string> args, bool* help_requested,
                                        std::string* help, const ConfigSources& sources) {
  ServerConfig c;
  ChoiceWords words;
  FlagSet f("usage: infera server [flags]\n\nThe gateway: an OpenAI-compatible, KV-aware proxy in "
            "front of a fleet of vLLM, SGLang or mock engines.");
  f.add("--host", &c.host, "address to listen on (default 0.0.0.0)", "HOST");
  f.add("--port", &c.port, "port to listen on (default 8000; 0 picks a free port)", "PORT");
  f.add("--io-threads", &c.io_threads, "threads serving HTTP (default 2)", "N");
  f.add("--router-policy", &c.router_policy,
        "kv-aware (default), round-robin, random or least-loaded", "POLICY");
  f.add("--router-tokenizer-path", &c.tokenizer_path,
        "tokenizer directory or Hugging Face id (offline cache) used to hash prompts", "PATH_OR_ID");
  f.add("--kv-overlap-weight", &c.kv_overlap_weight,
        "weight of uncached blocks in the cost (default 1.0; 0 = pure load balance)", "W");
  f.add("--kv-prefill-overlap-weight", &c.kv_prefill_overlap_weight,
        "weight for choosing prefill workers (default: --kv-overlap-weight)", "W");
  f.add("--kv-decode-overlap-weight", &c.kv_decode_overlap_weight,
        "weight for choosing decode workers (default: --kv-overlap-weight)", "W");
  f.add("--router-temperature", &c.router_temperature,
        "0 (default): lowest cost wins; > 0: softmax sampling over normalised costs", "T");
  f.add("--router-seed", &c.router_seed, "seed for tie-breaking (default: random)", "N");
  f.add("--block-size|--page-size", &c.block_size,
        "tokens per KV block; must equal every worker's (default 16)", "N");
  f.add("--active-block-ttl-s", &c.active_block_ttl_s,
        "in-flight requests older than this stop counting as load (default 300)", "SECONDS");
  f.add("--engine-metrics-interval-s", &c.engine_metrics_interval_s,
        "poll each worker's /metrics for its own load (vllm:num_requests_waiting, "
        "vllm:num_requests_running, vllm:kv_cache_usage_perc); 0 = off (default 1)",
        "SECONDS");
  add_load_model_flags(f, &c.load_model);
  f.add("--discovery-backend", &words.discovery_backend,
        "static, etcd or k8s (default k8s, unless --worker or --etcd-endpoint implies static or etcd)",
        "BACKEND");
  f.add("--kubeconfig", &c.kubeconfig,
        "k8s: a kubeconfig file (current context) for out-of-cluster use; default $KUBECONFIG, "
        "else the pod's service account",
        "PATH");
  f.add("--k8s-namespace", &c.k8s_namespace,
        "k8s: the namespace of the worker pods (default: the kubeconfig context's, or the pod's own)",
        "NAMESPACE");
  f.add("--k8s-selector", &c.k8s_selector,
        "k8s: label selector of worker pods; each pod's role from its llm-d.ai/role label",
        "SELECTOR");
  f.add("--k8s-prefill-selector", &c.k8s_prefill_selector,
        "k8s: label selector of prefill worker pods (with --k8s-decode-selector)", "SELECTOR");
  f.add("--k8s-decode-selector", &c.k8s_decode_selector,
        "k8s: label selector of decode worker pods (with --k8s-prefill-selector)", "SELECTOR");
  f.add("--k8s-inference-pool", &c.k8s_inference_pool,
        "k8s: read the pod selector and target port from this Gateway API InferencePool", "NAME");
  f.add("--etcd-endpoint", &c.etcd_endpoint, "etcd v3 endpoint for --discovery-backend etcd",
        "HOST:PORT");
  f.add("--etcd-prefix", &c.etcd_prefix, "etcd key prefix of worker records (default infera/workers/)",
        "PREFIX");
  f.add("--worker", &c.workers,
        "static worker, repeatable: URL[,kv=ENDPOINT][,replay=ENDPOINT][,topic=T]"
        "[,role=prefill|decode|both]",
        "SPEC");
  f.add("--request-transport", &words.request_transport,
        "http or nats (default nats, unless a --worker with kv= implies http)", "TRANSPORT");
  f.add("--kv-event-transport", &words.kv_event_transport,
        "zmq or nats (default nats, unless a --worker with kv= implies zmq)", "TRANSPORT");
  add_nats_flags(f, c);
  f.add("--kv-events-bind", &c.kv_events_bind,
        "bind a SUB socket here for engines that connect to the router: a worker without kv= is "
        "heard by its topic= (default: its host:port); implies --kv-event-transport zmq",
        "ENDPOINT");
  f.add("--max-body-bytes", &c.max_body_bytes, "largest request body (default 16 MiB)", "BYTES");
  f.add("--max-header-bytes", &c.max_header_bytes, "largest request header (default 16 KiB)",
        "BYTES");
  f.add("--max-prompt-tokens", &c.max_prompt_tokens, "longest prompt accepted (default 1048576)",
        "N");
  f.add("--max-messages", &c.max_messages, "most chat messages accepted (default 10000)", "N");
  f.add("--max-json-depth", &c.max_json_depth, "deepest JSON nesting accepted (default 64)", "N");
  f.add("--client-idle-timeout-s", &c.client_idle_timeout_s,
        "client read / keep-alive idle deadline (default 60)", "SECONDS");
  f.add("--upstream-connect-timeout-s", &c.upstream_connect_timeout_s,
        "connecting to a worker (default 5)", "SECONDS");
  f.add("--upstream-first-byte-timeout-s", &c.upstream_first_byte_timeout_s,
        "waiting for a worker's first response byte (default 600)", "SECONDS");
  f.add("--upstream-idle-timeout-s", &c.upstream_idle_timeout_s,
        "longest pause inside a worker's stream (default 300)", "SECONDS");
  f.add("--request-timeout-s", &c.request_timeout_s, "whole request, stream included (default 3600)",
        "SECONDS");
  f.add("--retries", &c.retries, "other workers tried when one fails before any byte (default 2)",
        "N");
  f.add("--max-inflight-per-worker", &c.max_inflight_per_worker,
        "requests in flight per worker before queueing (default 0 = unlimited)", "N");
  f.add("--max-queue", &c.max_queue, "requests waiting for a worker below its in-flight cap before 429 (default 4096)", "N");
  f.add("--max-queue-wait-s", &c.max_queue_wait_s,
        "longest a request waits in that queue before 429 (default 30)", "SECONDS");
  f.add("--shutdown-grace-s", &c.shutdown_grace_s,
        "on SIGTERM, how long in-flight streams may finish (default 30)", "SECONDS");
  f.add("--drain-delay-s", &c.drain_delay_s,
        "on SIGTERM, how long /readyz fails while everything is still served, before the "
        "listener closes (default 0; a second SIGTERM or SIGINT ends it early)",
        "SECONDS");
  add_access_flags(f, c);
  add_observability_flags(f, c, words);
  f.enable_config_sources(sources);
  INFERA_RETURN_IF_ERROR(f.parse(args));
  *help_requested = f.help_requested();
  if (f.help_requested()) {
    *help = f.help();
    return c;
  }
  INFERA_RETURN_IF_ERROR(read_admin_token(f, c));
  INFERA_RETURN_IF_ERROR(read_api_keys(f, c));
  INFERA_RETURN_IF_ERROR(split_origins(c));
  INFERA_RETURN_IF_ERROR(check_tracing(f, c));
  INFERA_RETURN_IF_ERROR(resolve_choices(words, f, sources, c));
  INFERA_RETURN_IF_ERROR(validate(c));
  return c;
}

}  // namespace infera::config
