// MockOptions: every setting of `infera engine mock` (docs/contracts.md section 2: vLLM's flag
// names are a contract), parsed from flags and validated once at startup by parse_mock_flags; vLLM's
// --kv-events-config JSON is parsed into KvEventsConfig with vLLM's exact keys
// (launcher/kv_events_config.h, shared with the launchers). Plain values: built on the main
// thread, immutable afterwards, readable from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/log.h"
#include "infera/common/status.h"
#include "infera/config/server_config.h"
#include "infera/discovery/worker.h"
#include "infera/engine/engine_config.h"
#include "infera/events/encoder.h"
#include "infera/launcher/kv_events_config.h"
#include "infera/mock/openai_api.h"

namespace infera::mock {

struct MockOptions {
  // Model identity: --model (alias --model-path) and --served-model-name (default: the model).
  std::string model = "infera-mock";
  std::string served_model_name;
  // --tokenizer PATH_OR_ID: a directory or Hugging Face id (tokenizer::resolve_model_dir). Empty:
  // the synthetic codec (word-hash prompt ids, a fixed word list for output text).
  std::string tokenizer;

  // HTTP listener. --port 0 picks a free port (printed on the ready line).
  std::string host = "0.0.0.0";
  uint32_t port = 8000;
  // The host put into registered URLs and endpoints when --host (or an endpoint) is a wildcard.
  std::string advertise_host;
  uint32_t io_threads = 2;
  double shutdown_grace_s = 30;  // SIGTERM: in-flight streams get this long to finish

  // The core model: --block-size/--page-size, --num-gpu-blocks, --max-num-seqs,
  // --max-num-batched-tokens, --max-model-len, --speedup-ratio, --seed, --hash-seed,
  // --enable-prefix-caching.
  engine::EngineConfig engine;

  // KV events: set when events are enabled (--enable-kv-events and/or --kv-events-config with
  // enable_kv_cache_events true and publisher "zmq").
  std::optional<launcher::KvEventsConfig> kv_events;
  events::WireFormat kv_events_format = events::WireFormat::kVllmMap;

  // Discovery: static (nothing to do) or etcd (a leased record under etcd_prefix).
  discovery::Role role = discovery::Role::kBoth;
  // Disaggregation (shared/wire/KV_EVENTS.md section 4): the protocol the engine registers and
  // speaks as a prefill or decode worker; the bootstrap port of an SGLang-style prefill engine
  // (SGLang's --disaggregation-bootstrap-port, default 8998; 0 picks a free port); how long a
  // prefill holds its blocks for the decode side, and how long either side waits for the other.
  // The link's bytes per block and bandwidth are in `engine`.
  discovery::PdProtocol pd_protocol = discovery::PdProtocol::kVllm;
  uint32_t bootstrap_port = 8998;
  double kv_transfer_timeout_s = 120;
  // config/transports.h: explicit flags, else --etcd-endpoint implies etcd, else k8s (no
  // registration) and nats for both transports.
  config::DiscoveryBackend discovery_backend = config::DiscoveryBackend::kKubernetes;
  config::RequestTransport request_transport = config::RequestTransport::kNats;
  config::KvEventTransport kv_event_transport = config::KvEventTransport::kNats;
  std::string nats_server = "nats://localhost:4222";  // --nats-server, else $NATS_SERVER
  std::string nats_namespace = "infera";              // --namespace
  std::string etcd_endpoint;  // HOST:PORT
  std::string etcd_prefix = "infera/workers/";
  uint32_t etcd_lease_ttl_s = 10;

  LogLevel log_level = LogLevel::kInfo;

  // LoRA adapters, served under their own names (--lora-modules NAME=PATH, repeatable).
  std::vector<LoraModule> lora_modules;

  // The model name the API reports and accepts.
  const std::string& served_name() const {
    return served_model_name.empty() ? model : served_model_name;
  }
  // For a request's `model`: "" for the base model (or none given), the adapter's name for a
  // LoRA adapter (viewing these options); nullopt for a model this engine does not serve.
  std::optional<std::string_view> lora_for(std::string_view requested) const {
    if (requested.empty() || requested == served_name()) return std::string_view();
    for (const LoraModule& a : lora_modules) {
      if (a.name == requested) return a.name;
    }
    return std::nullopt;
  }
};

// Parses and validates `infera engine mock` flags (args after `mock`). --hash-seed defaults to
// $PYTHONHASHSEED, else "0", as vLLM's own hash seed does. On --help returns ok with *help
// filled and *help_requested set.
Result<MockOptions> parse_mock_flags(std::span<const std::string> args, bool* help_requested,
                                     std::string* help);

}  // namespace infera::mock
