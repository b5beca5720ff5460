#include "infera/mock/mock_options.h"

#include <cstdlib>

#include "infera/common/log.h"
#include "infera/config/flags.h"
#include "infera/config/transports.h"
#include "infera/launcher/worker_record.h"

namespace infera::mock {

using launcher::default_advertise_host;
using launcher::default_enabled_kv_events_config;
using launcher::KvEventsConfig;
using launcher::parse_kv_events_config;
using launcher::parse_kv_transfer_connector;
using launcher::validate_registration_flags;

namespace {

Status validate(const MockOptions& o) {
  if (o.port > 65535) return invalid_argument("--port must be 0..65535");
  if (o.host.empty()) return invalid_argument("--host must not be empty");
  if (o.model.empty()) return invalid_argument("--model must not be empty");
  if (o.io_threads == 0 || o.io_threads > 64) return invalid_argument("--io-threads must be 1..64");
  if (!(o.shutdown_grace_s >= 0)) return invalid_argument("--shutdown-grace-s must be >= 0");
  if (o.bootstrap_port > 65535) {
    return invalid_argument("--disaggregation-bootstrap-port must be 0..65535");
  }
  if (!(o.kv_transfer_timeout_s > 0) || o.kv_transfer_timeout_s > 3600) {
    return invalid_argument("--kv-transfer-timeout-s must be in (0, 3600]");
  }
  if (Status s = validate(o.engine); !s.ok()) {
    // The core's field names, as flags.
    std::string m = s.message();
    for (const auto& [field, flag] :
         {std::pair<std::string, std::string>{"block_size", "--block-size"},
          {"num_gpu_blocks", "--num-gpu-blocks"},
          {"max_num_seqs", "--max-num-seqs"},
          {"max_num_batched_tokens", "--max-num-batched-tokens"},
          {"speedup_ratio", "--speedup-ratio"},
          {"kv_block_bytes", "--kv-block-bytes"},
          {"kv_transfer_bandwidth_gb_s", "--kv-transfer-bandwidth-gb-s"}}) {
      if (m.rfind(field, 0) == 0) m.replace(0, field.size(), flag);
    }
    return invalid_argument(m);
  }
  INFERA_RETURN_IF_ERROR(
      validate_registration_flags(o.discovery_backend, o.etcd_endpoint, o.etcd_lease_ttl_s));
  return ok_status();
}

// Everything `infera engine mock` reads from its flags: the options, and the flags that are
// resolved into them once all are known. The FlagSet points into it.
struct MockFlags {
  MockOptions options;
  bool enable_kv_events = false;
  bool no_prefix_caching = false;
  std::string kv_events_config;
  std::string kv_events_format = "map";
  std::string role = "both";
  std::string pd_protocol = "vllm";
  std::string disaggregation_mode;
  std::string kv_transfer_config;
  std::string request_transport;  // "": not given (config/transports.h decides)
  std::string kv_event_transport;
  std::string discovery_backend;
  std::string log_level = "info";
  std::vector<std::string> lora_modules;
  bool enable_lora = false;
};

config::FlagSet mock_flag_set(MockFlags& s) {
  MockOptions& o = s.options;
  config::FlagSet f(
      "usage: infera engine mock [flags]\n\n"
      "A simulated vLLM engine on the CPU: OpenAI API, paged prefix cache with LRU eviction,\n"
      "continuous batching on a timing model, vLLM KV events over ZeroMQ, etcd registration.");
  f.add("--model|--model-path", &o.model, "model name (default infera-mock)", "NAME");
  f.add("--served-model-name", &o.served_model_name,
        "name the API reports and accepts (default: --model)", "NAME");
  f.add("--tokenizer", &o.tokenizer,
        "tokenizer directory or Hugging Face id (offline cache); default: synthetic text",
        "PATH_OR_ID");
  f.add("--host", &o.host, "address to listen on (default 0.0.0.0)", "HOST");
  f.add("--port", &o.port, "port to listen on (default 8000; 0 picks a free port)", "PORT");
  f.add("--advertise-host", &o.advertise_host,
        "host registered in URLs and endpoints when listening on a wildcard (default: --host, "
        "or 127.0.0.1 for 0.0.0.0)",
        "HOST");
  f.add("--io-threads", &o.io_threads, "threads serving HTTP and the engine (default 2)", "N");
  f.add("--shutdown-grace-s", &o.shutdown_grace_s,
        "on SIGTERM/SIGINT, how long in-flight streams may finish (default 30)", "SECONDS");
  f.add("--block-size|--page-size", &o.engine.block_size, "tokens per KV block (default 16)", "N");
  f.add("--num-gpu-blocks|--num-gpu-blocks-override", &o.engine.num_gpu_blocks,
        "KV cache size in blocks, including vLLM's null block (default 16384)", "N");
  f.add("--max-num-seqs", &o.engine.max_num_seqs, "requests running at once (default 256)", "N");
  f.add("--max-num-batched-tokens", &o.engine.max_num_batched_tokens,
        "tokens per scheduler step, chunked prefill (default 8192)", "N");
  f.add("--max-model-len", &o.engine.max_model_len,
        "prompt + output limit per request (default: what the cache holds)", "N");
  f.add("--speedup-ratio", &o.engine.speedup_ratio,
        "divide every modelled step time by this (default 1)", "R");
  f.add("--enable-prefix-caching", &o.engine.enable_prefix_caching,
        "prefix caching (default true)", "BOOL");
  f.add("--no-enable-prefix-caching", &s.no_prefix_caching, "turn prefix caching off", "");
  f.add("--enable-kv-events", &s.enable_kv_events,
        "publish KV events (alone: endpoint tcp://*:5557, replay tcp://*:5558, topic kv-events)",
        "");
  f.add("--kv-events-config", &s.kv_events_config,
        "vLLM's KVEventsConfig JSON: enable_kv_cache_events, publisher, endpoint, "
        "replay_endpoint, buffer_steps, hwm, max_queue_size, topic",
        "JSON");
  f.add("--kv-events-format", &s.kv_events_format,
        "map (current vLLM, default) or array (older vLLM)", "map|array");
  f.add("--hash-seed", &o.engine.hash_seed,
        "seed of the engine's own block hash (default: $PYTHONHASHSEED, else 0)", "SEED");
  f.add("--seed", &o.engine.output_seed, "seed of the deterministic output (default 0)", "N");
  f.add("--role", &s.role, "prefill, decode or both (default both)", "ROLE");
  f.add("--pd-protocol", &s.pd_protocol,
        "disaggregation protocol as a prefill or decode worker: vllm (kv_transfer_params, "
        "two calls; default) or sglang (bootstrap_host/port/room, one body to both)",
        "vllm|sglang");
  f.add("--disaggregation-mode", &s.disaggregation_mode,
        "SGLang's flag: prefill, decode or null (both); the role with --pd-protocol sglang",
        "MODE");
  f.add("--disaggregation-bootstrap-port", &o.bootstrap_port,
        "SGLang-style prefill: port of the bootstrap server decode engines pull from "
        "(default 8998; 0 picks a free port)",
        "PORT");
  f.add("--kv-transfer-config", &s.kv_transfer_config,
        "vLLM's KV connector JSON, checked and otherwise ignored: this engine answers "
        "kv_transfer_params requests as vLLM's NixlConnector with kv_role kv_both does",
        "JSON");
  f.add("--kv-block-bytes", &o.engine.kv_block_bytes,
        "bytes of one KV block moved from prefill to decode (default 2097152: 16 tokens of a "
        "Llama-3-8B-like model in fp16)",
        "BYTES");
  f.add("--kv-transfer-bandwidth-gb-s", &o.engine.kv_transfer_bandwidth_gb_s,
        "prefill-to-decode link bandwidth in GB/s (10^9 bytes; default 25, a 200 Gb/s NIC); a "
        "pull of n blocks takes n x --kv-block-bytes / bandwidth / --speedup-ratio",
        "GB_S");
  f.add("--kv-transfer-timeout-s", &o.kv_transfer_timeout_s,
        "how long a prefill holds its blocks for the decode side, and either side waits for "
        "the other (default 120)",
        "SECONDS");
  f.add("--discovery-backend", &s.discovery_backend,
        "static, etcd or k8s: where the engine registers (default k8s, i.e. nowhere: the router "
        "finds the pod; --etcd-endpoint implies etcd)",
        "BACKEND");
  f.add("--etcd-endpoint", &o.etcd_endpoint, "etcd v3 endpoint for --discovery-backend etcd",
        "HOST:PORT");
  f.add("--etcd-prefix", &o.etcd_prefix, "etcd key prefix (default infera/workers/)", "PREFIX");
  f.add("--etcd-lease-ttl-s", &o.etcd_lease_ttl_s,
        "lease of the etcd record: it disappears this long after the process dies (default 10)",
        "SECONDS");
  f.add("--request-transport", &s.request_transport,
        "http or nats (default): nats also serves the router's requests from NS.requests.<worker>",
        "TRANSPORT");
  f.add("--kv-event-transport", &s.kv_event_transport,
        "zmq or nats (default): nats relays the KV events to NS.kv-events.<worker>", "TRANSPORT");
  f.add("--nats-server", &o.nats_server,
        "NATS server URL(s) (default $NATS_SERVER, else nats://localhost:4222)", "URL");
  f.add("--namespace", &o.nats_namespace, "prefix of the NATS subjects (default infera)", "NS");
  f.add("--enable-lora", &s.enable_lora,
        "serve LoRA adapters (what --lora-modules needs, as in vLLM)", "");
  f.add("--lora-modules", &s.lora_modules,
        "a LoRA adapter served under its own model name, repeatable: NAME=PATH (its blocks are "
        "cached apart from the base model's, and its KV events name it)",
        "NAME=PATH");
  f.add("--log-level", &s.log_level, "debug, info (default), warn, error or off", "LEVEL");
  return f;
}

// --lora-modules NAME=PATH entries into the options' adapters, each under a name of its own.
Status resolve_lora_modules(MockFlags& s) {
  MockOptions& o = s.options;
  if (!s.lora_modules.empty() && !s.enable_lora) {
    return invalid_argument("--lora-modules needs --enable-lora");
  }
  for (const std::string& spec : s.lora_modules) {
    const size_t eq = spec.find('=');
    LoraModule m;
    if (eq != std::string::npos) {
      m.name = spec.substr(0, eq);
      m.path = spec.substr(eq + 1);
    }
    if (m.name.empty() || m.path.empty()) {
      return invalid_argument("--lora-modules takes NAME=PATH, got '" + spec + "'");
    }
    if (m.name == o.served_name() || o.lora_for(m.name)) {
      return invalid_argument("--lora-modules: the model name '" + m.name + "' is taken");
    }
    o.lora_modules.push_back(std::move(m));
  }
  return ok_status();
}

// The role and disaggregation protocol (--role and --pd-protocol, or SGLang's
// --disaggregation-mode), the KV connector given, and the transports.
Status resolve_disaggregation(MockFlags& s, const config::FlagSet& f) {
  MockOptions& o = s.options;
  if (!s.disaggregation_mode.empty()) {
    if (f.was_set("--role") || f.was_set("--pd-protocol")) {
      return invalid_argument(
          "--disaggregation-mode is SGLang's --role with --pd-protocol sglang; give one form");
    }
    s.role = s.disaggregation_mode == "null" ? "both" : s.disaggregation_mode;
    s.pd_protocol = "sglang";
  }
  INFERA_ASSIGN_OR_RETURN(o.role, discovery::parse_role(s.role));
  INFERA_ASSIGN_OR_RETURN(o.pd_protocol, discovery::parse_pd_protocol(s.pd_protocol));
  if (!s.kv_transfer_config.empty()) {
    INFERA_RETURN_IF_ERROR(parse_kv_transfer_connector(s.kv_transfer_config).status());
  }
  return ok_status();
}

// --kv-events-format: map, array, or any wire format's own name.
Result<events::WireFormat> parse_kv_events_format(const std::string& name) {
  if (name == "map") return events::WireFormat::kVllmMap;
  if (name == "array") return events::WireFormat::kVllmArray;
  auto format = events::parse_wire_format(name);
  if (!format.ok()) {
    return invalid_argument(
        "--kv-events-format must be map or array (or a wire format name such as "
        "vllm-array-v010), got '" +
        name + "'");
  }
  return *format;
}

// KV events: --kv-events-config, --enable-kv-events, or both; they need prefix caching.
Status resolve_kv_events(MockFlags& s) {
  MockOptions& o = s.options;
  if (!s.kv_events_config.empty()) {
    INFERA_ASSIGN_OR_RETURN(KvEventsConfig c, parse_kv_events_config(s.kv_events_config));
    // --enable-kv-events turns on a config that leaves the switch out (vLLM's
    // --enable-kv-events sets enable_kv_cache_events on the config given).
    if (s.enable_kv_events) {
      c.enable_kv_cache_events = true;
      if (c.publisher == "null" && s.kv_events_config.find("\"publisher\"") == std::string::npos) {
        c.publisher = "zmq";
      }
    }
    if (c.enable_kv_cache_events && c.publisher == "zmq") o.kv_events = std::move(c);
  } else if (s.enable_kv_events) {
    o.kv_events = default_enabled_kv_events_config();
  }
  if (o.kv_events && !o.engine.enable_prefix_caching) {
    return invalid_argument("KV events need prefix caching (drop --no-enable-prefix-caching)");
  }
  o.engine.enable_kv_events = o.kv_events.has_value();
  return ok_status();
}

}  // namespace

Result<MockOptions> parse_mock_flags(std::span<const std::string> args, bool* help_requested,
                                     std::string* help) {
  MockFlags s;
  MockOptions& o = s.options;
  // Nothing in the process calls setenv or putenv, so no thread can change the environment.
  // NOLINTNEXTLINE(concurrency-mt-unsafe)
  if (const char* seed = std::getenv("PYTHONHASHSEED"); seed != nullptr && *seed != '\0') {
    o.engine.hash_seed = seed;
  }
  config::FlagSet f = mock_flag_set(s);
  f.enable_config_sources(config::process_config_sources());
  INFERA_RETURN_IF_ERROR(f.parse(args));
  *help_requested = f.help_requested();
  if (f.help_requested()) {
    *help = f.help();
    return std::move(o);
  }
  if (s.no_prefix_caching) o.engine.enable_prefix_caching = false;
  INFERA_RETURN_IF_ERROR(resolve_lora_modules(s));
  INFERA_ASSIGN_OR_RETURN(o.log_level, parse_log_level(s.log_level));
  INFERA_ASSIGN_OR_RETURN(config::Transports t,
                          config::resolve_engine_transports(
                              {s.discovery_backend, s.request_transport, s.kv_event_transport,
                               !o.etcd_endpoint.empty()}));
  o.discovery_backend = t.discovery;
  o.request_transport = t.request;
  o.kv_event_transport = t.events;
  INFERA_ASSIGN_OR_RETURN(o.nats_server,
                          config::resolve_nats_server(f.was_set("--nats-server"), o.nats_server,
                                                      config::process_config_sources().environment));
  INFERA_RETURN_IF_ERROR(config::check_namespace(o.nats_namespace));
  INFERA_RETURN_IF_ERROR(resolve_disaggregation(s, f));
  INFERA_ASSIGN_OR_RETURN(o.kv_events_format, parse_kv_events_format(s.kv_events_format));
  INFERA_RETURN_IF_ERROR(resolve_kv_events(s));
  // Events relayed over NATS need no port outside this host: the defaults bind loopback.
  if (o.kv_events && o.kv_event_transport == config::KvEventTransport::kNats &&
      s.kv_events_config.empty()) {
    o.kv_events->endpoint = "tcp://127.0.0.1:*";
    o.kv_events->replay_endpoint = "tcp://127.0.0.1:*";
  }
  if (o.advertise_host.empty()) o.advertise_host = default_advertise_host(o.host);
  INFERA_RETURN_IF_ERROR(validate(o));
  return std::move(o);
}

}  // namespace infera::mock
