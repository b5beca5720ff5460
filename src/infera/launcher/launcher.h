// `infera engine vllm` and `infera engine sglang`: launchers of the real engines
// (docs/contracts.md section 1). A launcher builds the engine's command line (prefix caching, the
// block/page size, KV events over ZeroMQ on chosen ports, PYTHONHASHSEED=0, unknown flags passed
// through verbatim), starts it as a child in its own process group, waits for GET /health to
// answer 200, registers the worker in etcd under a kept-alive lease (the same record as
// `infera engine mock`: worker_record.h), and on SIGTERM/SIGINT deregisters, forwards the
// signal and exits with the engine's status. If the engine exits first it deregisters and
// exits with the engine's status. `--dry-run` prints the command and the environment additions.
// run_launcher is called once by run_engine_command on the main thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "infera/common/log.h"
#include "infera/common/status.h"
#include "infera/config/server_config.h"
#include "infera/discovery/worker.h"
#include "infera/launcher/kv_events_config.h"

namespace infera::launcher {

enum class EngineKind { kVllm, kSglang };
std::string_view engine_kind_name(EngineKind kind);  // "vllm", "sglang"

struct LauncherOptions {
  EngineKind kind = EngineKind::kVllm;
  std::string model;              // --model / --model-path (required)
  std::string served_model_name;  // --served-model-name (passed on; the record's model)
  std::string host = "0.0.0.0";
  uint32_t port = 8000;        // 8000 (vLLM) / 30000 (SGLang); 0 picks a free port at parsing
  std::string advertise_host;  // resolved: --advertise-host, else --host (127.0.0.1 for wildcards)
  uint32_t block_size = 16;    // --block-size (vLLM) / --page-size (SGLang)
  // Resolved KV events: endpoints with concrete ports; nullopt: events off.
  std::optional<KvEventsConfig> kv_events;

  discovery::Role role = discovery::Role::kBoth;
  // SGLang: a prefill worker's bootstrap server (--disaggregation-bootstrap-port), registered
  // for the gateway's bootstrap_port.
  uint32_t bootstrap_port = 8998;
  // vLLM: the KV connector's JSON (--kv-transfer-config), passed on; for --role prefill|decode
  // it defaults to NixlConnector with kv_role kv_both (the connector vLLM's PD examples use).
  std::string kv_transfer_config;
  // vLLM with NixlConnector: the NIXL handshake port (VLLM_NIXL_SIDE_CHANNEL_PORT) the launcher
  // picked free, because two engines on one host must not share vLLM's default 5600; 0: not
  // set by the launcher (the variable was already in its environment, or no NIXL).
  uint32_t nixl_side_channel_port = 0;
  // etcd when --etcd-endpoint is given
  // config/transports.h: explicit flags, else --etcd-endpoint implies etcd, else k8s (no
  // registration) and nats for both transports.
  config::DiscoveryBackend discovery_backend = config::DiscoveryBackend::kKubernetes;
  config::RequestTransport request_transport = config::RequestTransport::kNats;
  config::KvEventTransport kv_event_transport = config::KvEventTransport::kNats;
  std::string nats_server = "nats://localhost:4222";  // --nats-server, else $NATS_SERVER
  std::string nats_namespace = "infera";              // --namespace
  std::string etcd_endpoint;
  std::string etcd_prefix = "infera/workers/";
  uint32_t etcd_lease_ttl_s = 10;

  double startup_timeout_s = 600;  // engine start to /health 200
  double shutdown_timeout_s = 60;  // signal forwarded to engine exit, then SIGKILL
  bool dry_run = false;
  std::string engine_bin;                // "vllm" / "python3" (PATH), or --vllm-bin / --python-bin
  std::vector<std::string> passthrough;  // unknown flags, verbatim, in order
  LogLevel log_level = LogLevel::kInfo;

  const std::string& served_name() const {
    return served_model_name.empty() ? model : served_model_name;
  }
};

// Parses `infera engine vllm|sglang` flags (args after the engine name). --port 0 and unset KV
// event ports are picked free now, so the command line and the record name real ports.
Result<LauncherOptions> parse_launcher_flags(EngineKind kind, std::span<const std::string> args,
                                             bool* help_requested, std::string* help);

// The engine's --kv-events-config JSON: vLLM's keys, or SGLang's (no enable_kv_cache_events).
std::string kv_events_config_json(EngineKind kind, const KvEventsConfig& config);

struct LaunchPlan {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // added to the launcher's environment
  discovery::WorkerInfo worker;                          // the record to register
};
LaunchPlan plan_launch(const LauncherOptions& options);

// A word for a POSIX shell: unchanged when it needs no quoting, else in single quotes.
std::string shell_quote(std::string_view word);
// The --dry-run output: the command line (shell-quoted) on the first line, then one NAME=VALUE
// line per environment addition.
std::string format_dry_run(const LaunchPlan& plan);

// Runs the launcher; returns the process exit code (the engine's status, 1 when startup
// failed, 2 for bad usage).
int run_launcher(EngineKind kind, std::span<const std::string> args);

}  // namespace infera::launcher
