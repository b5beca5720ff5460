#include "infera/launcher/launcher.h"

#include "infera/config/transports.h"
#include "infera/launcher/worker_relays.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "infera/common/log.h"
#include "infera/common/signals.h"
#include "infera/common/subprocess.h"
#include "infera/config/flags.h"
#include "infera/discovery/etcd.h"
#include "infera/events/endpoint.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/http/net.h"
#include "infera/launcher/worker_record.h"

namespace infera::launcher {
namespace json = boost::json;
using std::chrono::milliseconds;

std::string_view engine_kind_name(EngineKind kind) {
  return kind == EngineKind::kVllm ? "vllm" : "sglang";
}

namespace {

constexpr const char* kDefaultKvTransferConfig =
    R"({"kv_connector":"NixlConnector","kv_role":"kv_both"})";

// Ports the kernel reports free right now, all distinct (held open together, then closed).
Result<std::vector<uint16_t>> free_ports(size_t n) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  Status status = ok_status();
  for (size_t i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
      status = unavailable("cannot pick a free port: socket() failed");
      break;
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      status = unavailable("cannot pick a free port: bind() failed");
      break;
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  for (const int fd : fds) ::close(fd);
  if (!status.ok()) return status;
  return ports;
}

// "tcp://*:0" or "tcp://*:*" -> "tcp://*:<port>": the engine must bind a port the record names.
bool has_open_port(std::string_view endpoint) {
  if (!endpoint.starts_with("tcp://")) return false;
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos || colon < 6) return false;
  const std::string_view port = endpoint.substr(colon + 1);
  return port == "0" || port == "*";
}

std::string with_port(std::string_view endpoint, uint16_t port) {
  return std::string(endpoint.substr(0, endpoint.rfind(':') + 1)) + std::to_string(port);
}

std::string usage(EngineKind kind) {
  if (kind == EngineKind::kVllm) {
    return "usage: infera engine vllm --model MODEL [flags] [vLLM flags...]\n\n"
           "Starts `vllm serve MODEL` with prefix caching, --block-size and KV events over ZeroMQ\n"
           "(--kv-events-config) and PYTHONHASHSEED=0; waits for GET /health, registers the\n"
           "worker in etcd under a lease, and on SIGTERM/SIGINT deregisters, forwards the signal\n"
           "and exits with the engine's status. Unknown flags are passed to vLLM verbatim.";
  }
  return "usage: infera engine sglang --model-path MODEL [flags] [SGLang flags...]\n\n"
         "Starts `python3 -m sglang.launch_server --model-path MODEL` with --page-size and KV\n"
         "events over ZeroMQ (--kv-events-config) and PYTHONHASHSEED=0; waits for GET /health,\n"
         "registers the worker in etcd under a lease, and on SIGTERM/SIGINT deregisters, forwards\n"
         "the signal and exits with the engine's status. Unknown flags are passed to SGLang\n"
         "verbatim.";
}

// Everything `infera engine vllm|sglang` reads from its flags: the options, and the flags that
// are resolved into them once all are known. The FlagSet points into it.
struct LauncherFlags {
  LauncherOptions options;
  bool enable_kv_events = false;
  bool prefix_caching = true;
  std::string kv_events_config;
  uint32_t kv_port = 0;
  uint32_t replay_port = 0;
  std::string topic = "kv-events";
  std::string role = "both";
  std::string disaggregation_mode;
  std::string discovery_backend;
  std::string log_level = "info";
  std::string request_transport;  // "": not given (config/transports.h decides)
  std::string kv_event_transport;
  // Resolved: vLLM's NIXL handshake port is the launcher's to pick (see LauncherOptions).
  bool free_nixl_port = false;
};

config::FlagSet launcher_flag_set(LauncherFlags& s) {
  LauncherOptions& o = s.options;
  const bool vllm = o.kind == EngineKind::kVllm;
  config::FlagSet f(usage(o.kind));
  f.add("--model|--model-path", &o.model, "model to serve (required; passed on)", "MODEL");
  f.add("--served-model-name", &o.served_model_name,
        "name the API serves (passed on; registered as the model)", "NAME");
  f.add("--host", &o.host, "address the engine listens on (default 0.0.0.0)", "HOST");
  f.add("--port", &o.port,
        vllm ? "the engine's HTTP port (default 8000; 0 picks a free port)"
             : "the engine's HTTP port (default 30000; 0 picks a free port)",
        "PORT");
  f.add("--advertise-host", &o.advertise_host,
        "host registered in URLs and endpoints (default: --host, or 127.0.0.1 for 0.0.0.0)",
        "HOST");
  f.add("--block-size|--page-size", &o.block_size,
        vllm ? "tokens per KV block, --block-size (default 16)"
             : "tokens per KV page, --page-size (default 16)",
        "N");
  if (vllm) {
    f.add("--enable-prefix-caching", &s.prefix_caching, "always on (KV-aware routing needs it)",
          "");
  }
  f.add("--enable-kv-events", &s.enable_kv_events,
        "publish KV events over ZeroMQ (endpoint and replay on free ports, topic kv-events)", "");
  f.add("--kv-events-config", &s.kv_events_config,
        "the engine's KV-events JSON (vLLM's keys); a port 0 or * is replaced by a free port",
        "JSON");
  f.add("--kv-events-port", &s.kv_port, "port of the KV-event PUB socket (default: free)", "PORT");
  f.add("--kv-events-replay-port", &s.replay_port,
        "port of the replay ROUTER socket (default: free)", "PORT");
  f.add("--kv-events-topic", &s.topic, "topic of the KV events (default kv-events)", "TOPIC");
  if (vllm) {
    f.add("--role", &s.role,
          "prefill, decode or both (default both), registered; prefill and decode get a "
          "--kv-transfer-config",
          "ROLE");
    f.add("--kv-transfer-config", &o.kv_transfer_config,
          "vLLM's KV connector JSON, passed on (default for --role prefill|decode: "
          "{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}, with "
          "VLLM_NIXL_SIDE_CHANNEL_PORT on a free port unless already set)",
          "JSON");
  } else {
    f.add("--role", &s.role,
          "prefill, decode or both (default both), registered and passed on as "
          "--disaggregation-mode",
          "ROLE");
    f.add("--disaggregation-mode", &s.disaggregation_mode,
          "SGLang's name for the role: prefill, decode or null (both)", "MODE");
    f.add("--disaggregation-bootstrap-port", &o.bootstrap_port,
          "a prefill worker's bootstrap server port (default 8998; 0 picks a free port; passed "
          "on and registered)",
          "PORT");
  }
  f.add("--discovery-backend", &s.discovery_backend,
        "static, etcd or k8s: where the worker registers (default: etcd when --etcd-endpoint is "
        "given, else k8s, i.e. nowhere: the router finds the pod)",
        "BACKEND");
  f.add("--etcd-endpoint", &o.etcd_endpoint, "etcd v3 endpoint to register in", "HOST:PORT");
  f.add("--etcd-prefix", &o.etcd_prefix, "etcd key prefix (default infera/workers/)", "PREFIX");
  f.add("--etcd-lease-ttl-s", &o.etcd_lease_ttl_s, "lease of the etcd record (default 10)",
        "SECONDS");
  f.add("--request-transport", &s.request_transport,
        "http or nats (default): nats relays the router's requests from NS.requests.<worker> "
        "to the engine's HTTP port",
        "TRANSPORT");
  f.add("--kv-event-transport", &s.kv_event_transport,
        "zmq or nats (default): nats relays the engine's ZMQ KV events to NS.kv-events.<worker>",
        "TRANSPORT");
  f.add("--nats-server", &o.nats_server,
        "NATS server URL(s) (default $NATS_SERVER, else nats://localhost:4222)", "URL");
  f.add("--namespace", &o.nats_namespace, "prefix of the NATS subjects (default infera)", "NS");
  f.add("--startup-timeout-s", &o.startup_timeout_s,
        "how long the engine may take to answer /health with 200 (default 600)", "SECONDS");
  f.add("--shutdown-timeout-s", &o.shutdown_timeout_s,
        "after forwarding SIGTERM/SIGINT, how long the engine may take to exit before SIGKILL "
        "(default 60)",
        "SECONDS");
  f.add("--dry-run", &o.dry_run,
        "print the engine's command line and environment additions, start nothing", "");
  if (vllm) {
    f.add("--vllm-bin", &o.engine_bin, "the vllm executable (default: vllm on PATH)", "PATH");
  } else {
    f.add("--python-bin", &o.engine_bin, "the Python interpreter (default: python3 on PATH)",
          "PATH");
  }
  f.add("--log-level", &s.log_level, "debug, info (default), warn, error or off", "LEVEL");
  return f;
}

// The values each flag must have on its own.
Status check_values(const LauncherFlags& s) {
  const LauncherOptions& o = s.options;
  const bool vllm = o.kind == EngineKind::kVllm;
  if (o.model.empty()) {
    return invalid_argument(vllm ? "--model is required" : "--model-path is required");
  }
  if (!s.prefix_caching) {
    return invalid_argument("the launcher always enables prefix caching (KV-aware routing)");
  }
  if (o.port > 65535) return invalid_argument("--port must be 0..65535");
  if (s.kv_port > 65535 || s.replay_port > 65535) {
    return invalid_argument("--kv-events-port and --kv-events-replay-port must be 0..65535");
  }
  if (o.host.empty()) return invalid_argument("--host must not be empty");
  if (o.block_size == 0) {
    return invalid_argument(vllm ? "--block-size must be positive"
                                 : "--page-size must be positive");
  }
  if (o.engine_bin.empty()) return invalid_argument("the engine executable must not be empty");
  if (!(o.startup_timeout_s > 0)) return invalid_argument("--startup-timeout-s must be > 0");
  if (!(o.shutdown_timeout_s >= 0)) return invalid_argument("--shutdown-timeout-s must be >= 0");
  return ok_status();
}

// The role (--role, or SGLang's --disaggregation-mode) and, for vLLM, its KV connector.
Status resolve_role(LauncherFlags& s, const config::FlagSet& f) {
  LauncherOptions& o = s.options;
  if (!s.disaggregation_mode.empty()) {
    if (f.was_set("--role")) {
      return invalid_argument("--role and --disaggregation-mode are the same setting; give one");
    }
    s.role = s.disaggregation_mode == "null" ? "both" : s.disaggregation_mode;
  }
  INFERA_ASSIGN_OR_RETURN(o.role, discovery::parse_role(s.role));
  if (o.kind != EngineKind::kVllm) return ok_status();
  if (o.kv_transfer_config.empty() && o.role != discovery::Role::kBoth) {
    o.kv_transfer_config = kDefaultKvTransferConfig;
  }
  if (!o.kv_transfer_config.empty()) {
    INFERA_ASSIGN_OR_RETURN(const std::string connector,
                            parse_kv_transfer_connector(o.kv_transfer_config));
    // Nothing in the process calls setenv or putenv: getenv is safe here.
    s.free_nixl_port =
        connector == "NixlConnector" &&
        std::getenv("VLLM_NIXL_SIDE_CHANNEL_PORT") == nullptr;  // NOLINT(concurrency-mt-unsafe)
  }
  return ok_status();
}

// The bootstrap port, the transports and where the worker registers.
Status check_transports_and_discovery(LauncherFlags& s) {
  LauncherOptions& o = s.options;
  if (o.bootstrap_port > 65535) {
    return invalid_argument("--disaggregation-bootstrap-port must be 0..65535");
  }
  INFERA_ASSIGN_OR_RETURN(config::Transports t,
                          config::resolve_engine_transports(
                              {s.discovery_backend, s.request_transport, s.kv_event_transport,
                               !o.etcd_endpoint.empty()}));
  o.discovery_backend = t.discovery;
  o.request_transport = t.request;
  o.kv_event_transport = t.events;
  INFERA_RETURN_IF_ERROR(config::check_namespace(o.nats_namespace));
  return validate_registration_flags(o.discovery_backend, o.etcd_endpoint, o.etcd_lease_ttl_s);
}

// KV events: vLLM's JSON given, or the endpoint flags (free ports where unset).
Status resolve_kv_events(LauncherFlags& s, const config::FlagSet& f) {
  LauncherOptions& o = s.options;
  const bool endpoint_flags = f.was_set("--kv-events-port") ||
                              f.was_set("--kv-events-replay-port") ||
                              f.was_set("--kv-events-topic");
  if (!s.kv_events_config.empty()) {
    if (endpoint_flags) {
      return invalid_argument(
          "--kv-events-config and --kv-events-port/--kv-events-replay-port/--kv-events-topic "
          "are exclusive (put the endpoints in the JSON)");
    }
    INFERA_ASSIGN_OR_RETURN(KvEventsConfig c, parse_kv_events_config(s.kv_events_config));
    const bool publisher_given = s.kv_events_config.find("\"publisher\"") != std::string::npos;
    // SGLang's config has no switch (the flag enables it); vLLM's --enable-kv-events sets it.
    if (s.enable_kv_events || o.kind != EngineKind::kVllm) c.enable_kv_cache_events = true;
    if (c.enable_kv_cache_events && c.publisher == "null" && !publisher_given) c.publisher = "zmq";
    if (c.enable_kv_cache_events && c.publisher == "zmq") o.kv_events = std::move(c);
  } else if (s.enable_kv_events || endpoint_flags) {
    KvEventsConfig c = default_enabled_kv_events_config();
    c.endpoint = "tcp://*:" + std::to_string(s.kv_port);
    c.replay_endpoint = "tcp://*:" + std::to_string(s.replay_port);
    c.topic = s.topic;
    o.kv_events = std::move(c);
  }
  return ok_status();
}

// Concrete ports everywhere, so the command line and the record agree.
Status pick_free_ports(LauncherOptions& o, bool free_nixl_port) {
  const bool free_bootstrap =
      o.kind == EngineKind::kSglang && o.role == discovery::Role::kPrefill && o.bootstrap_port == 0;
  size_t wanted = (o.port == 0 ? size_t{1} : size_t{0}) + (free_bootstrap ? 1 : 0) +
                  (free_nixl_port ? 1 : 0);
  if (o.kv_events && has_open_port(o.kv_events->endpoint)) ++wanted;
  if (o.kv_events && has_open_port(o.kv_events->replay_endpoint)) ++wanted;
  if (wanted == 0) return ok_status();
  INFERA_ASSIGN_OR_RETURN(std::vector<uint16_t> ports, free_ports(wanted));
  size_t next = 0;
  if (o.port == 0) o.port = ports[next++];
  if (free_bootstrap) o.bootstrap_port = ports[next++];
  if (free_nixl_port) o.nixl_side_channel_port = ports[next++];
  if (o.kv_events && has_open_port(o.kv_events->endpoint)) {
    o.kv_events->endpoint = with_port(o.kv_events->endpoint, ports[next++]);
  }
  if (o.kv_events && has_open_port(o.kv_events->replay_endpoint)) {
    o.kv_events->replay_endpoint = with_port(o.kv_events->replay_endpoint, ports[next++]);
  }
  return ok_status();
}

}  // namespace

Result<LauncherOptions> parse_launcher_flags(EngineKind kind, std::span<const std::string> args,
                                             bool* help_requested, std::string* help) {
  LauncherFlags s;
  LauncherOptions& o = s.options;
  o.kind = kind;
  o.engine_bin = kind == EngineKind::kVllm ? "vllm" : "python3";
  o.port = kind == EngineKind::kVllm ? 8000 : 30000;  // the engines' own defaults
  // vLLM's own form: `vllm serve MODEL ...`, so a leading positional argument is the model.
  if (!args.empty() && !args[0].empty() && args[0][0] != '-') {
    o.model = args[0];
    args = args.subspan(1);
  }
  config::FlagSet f = launcher_flag_set(s);
  f.enable_config_sources(config::process_config_sources());  // infera's own flags only
  INFERA_RETURN_IF_ERROR(f.parse(args, &o.passthrough));
  *help_requested = f.help_requested();
  if (f.help_requested()) {
    *help = f.help() + "\nAny other flag is passed to the engine unchanged.\n";
    return o;
  }
  INFERA_RETURN_IF_ERROR(check_values(s));
  INFERA_ASSIGN_OR_RETURN(s.options.log_level, parse_log_level(s.log_level));
  INFERA_RETURN_IF_ERROR(resolve_role(s, f));
  INFERA_RETURN_IF_ERROR(check_transports_and_discovery(s));
  INFERA_ASSIGN_OR_RETURN(o.nats_server,
                          config::resolve_nats_server(f.was_set("--nats-server"), o.nats_server,
                                                      config::process_config_sources().environment));
  INFERA_RETURN_IF_ERROR(resolve_kv_events(s, f));
  INFERA_RETURN_IF_ERROR(pick_free_ports(o, s.free_nixl_port));
  if (o.advertise_host.empty()) o.advertise_host = default_advertise_host(o.host);
  return o;
}

std::string kv_events_config_json(EngineKind kind, const KvEventsConfig& c) {
  const KvEventsConfig defaults;
  json::object o;
  if (kind == EngineKind::kVllm) o["enable_kv_cache_events"] = c.enable_kv_cache_events;
  o["publisher"] = c.publisher;
  o["endpoint"] = c.endpoint;
  if (!c.replay_endpoint.empty()) o["replay_endpoint"] = c.replay_endpoint;
  o["topic"] = c.topic;
  if (c.buffer_steps != defaults.buffer_steps) o["buffer_steps"] = c.buffer_steps;
  if (c.hwm != defaults.hwm) o["hwm"] = c.hwm;
  if (c.max_queue_size != defaults.max_queue_size) o["max_queue_size"] = c.max_queue_size;
  return json::serialize(o);
}

LaunchPlan plan_launch(const LauncherOptions& o) {
  LaunchPlan plan;
  std::vector<std::string>& a = plan.argv;
  if (o.kind == EngineKind::kVllm) {
    a = {o.engine_bin,
         "serve",
         o.model,
         "--host",
         o.host,
         "--port",
         std::to_string(o.port),
         "--block-size",
         std::to_string(o.block_size),
         "--enable-prefix-caching"};
  } else {
    // SGLang's radix cache (its prefix cache) is on unless --disable-radix-cache.
    a = {o.engine_bin,
         "-m",
         "sglang.launch_server",
         "--model-path",
         o.model,
         "--host",
         o.host,
         "--port",
         std::to_string(o.port),
         "--page-size",
         std::to_string(o.block_size)};
  }
  if (!o.served_model_name.empty()) {
    a.push_back("--served-model-name");
    a.push_back(o.served_model_name);
  }
  if (o.kv_events) {
    a.push_back("--kv-events-config");
    a.push_back(kv_events_config_json(o.kind, *o.kv_events));
  }
  if (o.kind == EngineKind::kSglang && o.role != discovery::Role::kBoth) {
    a.push_back("--disaggregation-mode");
    a.push_back(std::string(discovery::role_name(o.role)));
    if (o.role == discovery::Role::kPrefill) {
      a.push_back("--disaggregation-bootstrap-port");
      a.push_back(std::to_string(o.bootstrap_port));
    }
  }
  if (o.kind == EngineKind::kVllm && !o.kv_transfer_config.empty()) {
    a.push_back("--kv-transfer-config");
    a.push_back(o.kv_transfer_config);
  }
  a.insert(a.end(), o.passthrough.begin(), o.passthrough.end());
  plan.env = {{"PYTHONHASHSEED", "0"}};
  if (o.nixl_side_channel_port != 0) {
    plan.env.emplace_back("VLLM_NIXL_SIDE_CHANNEL_PORT", std::to_string(o.nixl_side_channel_port));
  }

  WorkerRecordParams r;
  r.advertise_host = o.advertise_host;
  r.port = static_cast<uint16_t>(o.port);
  r.role = o.role;
  r.block_size = o.block_size;
  r.model = o.served_name();
  r.engine = std::string(engine_kind_name(o.kind));
  if (o.kind == EngineKind::kSglang && o.role == discovery::Role::kPrefill) {
    r.bootstrap_port = o.bootstrap_port;
  }
  // With NATS events the router needs no endpoint: the launcher's relay reads them here.
  if (o.kv_events && o.kv_event_transport == config::KvEventTransport::kZmq) {
    if (events::publisher_binds(o.kv_events->endpoint)) r.kv_endpoint = o.kv_events->endpoint;
    r.replay_endpoint = o.kv_events->replay_endpoint;
  }
  if (o.kv_events) r.topic = o.kv_events->topic;
  plan.worker = make_worker_record(r);
  return plan;
}

std::string shell_quote(std::string_view word) {
  bool plain = !word.empty();
  for (const char c : word) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || c == '.' || c == '/' || c == ':' || c == '=' ||
                      c == '@' || c == '%' || c == '+' || c == ',';
    plain = plain && safe;
  }
  if (plain) return std::string(word);
  std::string out = "'";
  for (const char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string format_dry_run(const LaunchPlan& plan) {
  std::string out;
  for (size_t i = 0; i < plan.argv.size(); ++i) {
    if (i > 0) out += ' ';
    out += shell_quote(plan.argv[i]);
  }
  out += '\n';
  for (const auto& [name, value] : plan.env) out += name + "=" + shell_quote(value) + "\n";
  return out;
}

// ---------------------------------------------------------------------------------------------
// Running the engine

namespace {

net::awaitable<int> health_status(http::Client* client, http::Endpoint to) {
  http::Request request;
  request.method = http::Method::kGet;
  request.target = "/health";
  auto response = co_await client->request(to, std::move(request));
  co_return response.ok() ? response->status : 0;
}

// Forwards `sig` and waits for the engine (bounded), then SIGKILL. The engine's exit status.
int stop_engine(Subprocess& engine, int sig, milliseconds timeout, std::string_view name) {
  engine.signal(sig);
  std::optional<int> status = engine.wait_for(timeout);
  if (!status) {
    INFERA_LOG(kWarn, "launcher")
        .msg("engine did not exit in time; killing it")
        .kv("engine", name)
        .kv("timeout_ms", static_cast<int64_t>(timeout.count()));
    engine.signal(SIGKILL);
    status = engine.wait_for(milliseconds(10'000));
  }
  return status.value_or(1);
}

// Its own process group: a terminal's Ctrl-C reaches the launcher only, which forwards it to
// the engine and its workers once. Spawned before the signals are blocked, since a child
// inherits the signal mask.
Result<Subprocess> spawn_engine(const LaunchPlan& plan, const std::string& name) {
  SpawnOptions spawn_options;
  spawn_options.env = plan.env;
  spawn_options.new_process_group = true;
  spawn_options.kill_with_parent = true;
  Result<Subprocess> spawned = Subprocess::spawn(plan.argv, spawn_options);
  if (spawned.ok()) {
    INFERA_LOG(kInfo, "launcher")
        .msg("engine started")
        .kv("engine", name)
        .kv("pid", static_cast<int64_t>(spawned->pid()))
        .kv("url", plan.worker.url);
  }
  return spawned;
}

// A started engine through health, registration and serving, on the main thread, in that
// order; each step returns the launcher's exit code when the run ends there.
class EngineRun {
 public:
  // `signals` are blocked already, so the event loop's thread inherits the mask.
  EngineRun(const LauncherOptions& options, const LaunchPlan& plan, Subprocess& engine,
            const TerminationSignals& signals)
      : name_(engine_kind_name(options.kind)),
        options_(options),
        plan_(plan),
        engine_(engine),
        signals_(signals),
        shutdown_timeout_(static_cast<int64_t>(options.shutdown_timeout_s * 1000.0)) {}

  // 1. Waits for GET /health == 200, the engine's exit, a signal, or the startup deadline.
  std::optional<int> await_health();
  // 2. With NATS transports, starts the relays to the engine's sockets and port.
  std::optional<int> start_relays();
  // 3. Registers (routers start sending here once the record appears).
  std::optional<int> register_worker(const std::optional<http::Endpoint>& etcd);
  // 4. Serves until a signal or the engine's exit; deregisters, then stops the engine.
  int serve();

 private:
  int stop(int sig) { return stop_engine(engine_, sig, shutdown_timeout_, name_); }

  const std::string name_;
  const LauncherOptions& options_;
  const LaunchPlan& plan_;
  Subprocess& engine_;
  const TerminationSignals& signals_;
  const milliseconds shutdown_timeout_;
  http::EventLoop loop_{1};
  std::unique_ptr<discovery::EtcdRegistration> registration_;
  std::unique_ptr<WorkerRelays> relays_;
};

std::optional<int> EngineRun::start_relays() {
  WorkerRelayOptions r;
  r.nats_server = options_.nats_server;
  r.ns = options_.nats_namespace;
  r.worker_id = plan_.worker.id;
  r.events = options_.kv_events && options_.kv_event_transport == config::KvEventTransport::kNats;
  if (r.events) {
    r.kv_endpoint = options_.kv_events->endpoint;
    r.replay_endpoint = options_.kv_events->replay_endpoint;
    r.topic = options_.kv_events->topic;
  }
  r.requests = options_.request_transport == config::RequestTransport::kNats;
  r.engine = {is_wildcard_host(options_.host) ? "127.0.0.1" : options_.host,
              static_cast<uint16_t>(options_.port)};
  auto started = WorkerRelays::start(r);
  if (!started.ok()) {
    std::fprintf(stderr, "infera engine %s: %s\n", name_.c_str(), started.status().message().c_str());
    stop(SIGTERM);
    return 1;
  }
  relays_ = std::move(*started);
  return std::nullopt;
}

std::optional<int> EngineRun::await_health() {
  http::ClientOptions co;
  co.connect_timeout = milliseconds(2'000);
  co.write_timeout = milliseconds(5'000);
  co.response_timeout = milliseconds(10'000);
  co.read_timeout = milliseconds(10'000);
  http::Client client(co);
  const http::Endpoint health{is_wildcard_host(options_.host) ? "127.0.0.1" : options_.host,
                              static_cast<uint16_t>(options_.port)};
  const auto deadline = std::chrono::steady_clock::now() +
                        milliseconds(static_cast<int64_t>(options_.startup_timeout_s * 1000.0));
  for (;;) {
    if (!engine_.running()) {
      const int status = engine_.wait_for(milliseconds(0)).value_or(1);
      INFERA_LOG(kError, "launcher")
          .msg("engine exited before it became healthy")
          .kv("engine", name_)
          .kv("status", static_cast<int64_t>(status));
      return status == 0 ? 1 : status;
    }
    const int code =
        net::co_spawn(loop_.context(), health_status(&client, health), net::use_future).get();
    if (code == 200) return std::nullopt;
    if (std::chrono::steady_clock::now() > deadline) {
      INFERA_LOG(kError, "launcher")
          .msg("engine not healthy in time; stopping it")
          .kv("engine", name_)
          .kv("startup_timeout_s", options_.startup_timeout_s);
      stop(SIGTERM);
      return 1;
    }
    // The pause between probes; a signal or the engine's exit ends it early.
    if (const int sig = signals_.wait_for(milliseconds(500)); sig != 0) {
      INFERA_LOG(kInfo, "launcher")
          .msg("signal during startup")
          .kv("signal", termination_signal_name(sig));
      return stop(sig);
    }
  }
}

std::optional<int> EngineRun::register_worker(const std::optional<http::Endpoint>& etcd) {
  if (etcd) {
    discovery::EtcdRegistrationOptions ro;
    ro.prefix = options_.etcd_prefix;
    ro.ttl = std::chrono::seconds(options_.etcd_lease_ttl_s);
    registration_ = std::make_unique<discovery::EtcdRegistration>(loop_, *etcd, plan_.worker, ro);
    if (Status s = registration_->start(milliseconds(10'000)); !s.ok()) {
      std::fprintf(stderr, "infera engine %s: etcd registration failed: %s\n", name_.c_str(),
                   s.message().c_str());
      registration_->stop();
      stop(SIGTERM);
      return 1;
    }
  }
  INFERA_LOG(kInfo, "launcher")
      .msg("engine ready")
      .kv("engine", name_)
      .kv("url", plan_.worker.url)
      .kv("kv_events", plan_.worker.kv_endpoint)
      .kv("replay", plan_.worker.replay_endpoint)
      .kv("registered", registration_ ? registration_->key() : std::string("(static)"));
  std::printf("infera engine %s: ready on %s\n", name_.c_str(), plan_.worker.url.c_str());
  std::fflush(stdout);
  return std::nullopt;
}

int EngineRun::serve() {
  int sig = 0;
  while (sig == 0 && engine_.running()) sig = signals_.wait_for(milliseconds(1'000));
  if (registration_) registration_->stop();  // routers stop sending here first
  if (relays_) relays_->stop_requests();
  int status = 0;
  if (sig != 0) {
    INFERA_LOG(kInfo, "launcher")
        .msg("stopping the engine")
        .kv("engine", name_)
        .kv("signal", termination_signal_name(sig));
    status = stop(sig);
  } else {
    status = engine_.wait_for(milliseconds(0)).value_or(1);
    INFERA_LOG(kWarn, "launcher")
        .msg("engine exited")
        .kv("engine", name_)
        .kv("status", static_cast<int64_t>(status));
  }
  registration_.reset();
  relays_.reset();  // after the engine: its last KV events are relayed
  loop_.stop();
  return status;
}

}  // namespace

int run_launcher(EngineKind kind, std::span<const std::string> args) {
  const std::string name(engine_kind_name(kind));
  bool help_requested = false;
  std::string help;
  Result<LauncherOptions> parsed = parse_launcher_flags(kind, args, &help_requested, &help);
  if (!parsed.ok()) {
    std::fprintf(stderr, "infera engine %s: %s\n", name.c_str(), parsed.status().message().c_str());
    return 2;
  }
  if (help_requested) {
    std::fputs(help.c_str(), stdout);
    return 0;
  }
  const LauncherOptions& o = *parsed;
  const LaunchPlan plan = plan_launch(o);
  if (o.dry_run) {
    std::fputs(format_dry_run(plan).c_str(), stdout);
    return 0;
  }
  set_log_level(o.log_level);
  std::optional<http::Endpoint> etcd;
  if (o.discovery_backend == config::DiscoveryBackend::kEtcd) {
    auto endpoint = http::parse_endpoint(o.etcd_endpoint);
    if (!endpoint.ok()) {
      std::fprintf(stderr, "infera engine %s: --etcd-endpoint: %s\n", name.c_str(),
                   endpoint.status().message().c_str());
      return 2;
    }
    etcd = *endpoint;
  }

  Result<Subprocess> spawned = spawn_engine(plan, name);
  if (!spawned.ok()) {
    std::fprintf(stderr, "infera engine %s: %s\n", name.c_str(),
                 spawned.status().message().c_str());
    return 1;
  }
  // From here on every thread started inherits the mask: SIGTERM/SIGINT/SIGCHLD are taken by
  // the waits on this thread only.
  const TerminationSignals signals = block_termination_signals(/*wake_on_child_exit=*/true);
  std::signal(SIGPIPE, SIG_IGN);
  EngineRun run(o, plan, *spawned, signals);
  if (std::optional<int> status = run.await_health()) return *status;
  if (std::optional<int> status = run.start_relays()) return *status;
  if (std::optional<int> status = run.register_worker(etcd)) return *status;
  return run.serve();
}

}  // namespace infera::launcher
