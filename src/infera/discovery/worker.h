// WorkerInfo: what the fleet knows about one engine worker, from a static --worker flag or an
// etcd record (docs/contracts.md section 8), and the two text forms it travels in: the pinned
// `--worker URL[,kv=..][,replay=..][,topic=..][,role=..]` syntax and the JSON record engines
// register under `infera/workers/<role>/<host:port>`. Plain values; any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"

namespace infera::discovery {

enum class Role { kBoth, kPrefill, kDecode };
std::string_view role_name(Role role);  // "both", "prefill", "decode"
Result<Role> parse_role(std::string_view text);

// How a split request reaches a prefill/decode pair (shared/wire/KV_EVENTS.md section 4): vLLM's
// two calls in sequence (kv_transfer_params), or SGLang's one body sent to both at once
// (bootstrap_host/port/room).
enum class PdProtocol { kVllm, kSglang };
std::string_view pd_protocol_name(PdProtocol protocol);  // "vllm", "sglang"
Result<PdProtocol> parse_pd_protocol(std::string_view text);

struct WorkerInfo {
  std::string id;   // host:port of the URL: the worker id of the admin API
  std::string url;  // http://host:port or https://host:port (TLS), no trailing slash
  Role role = Role::kBoth;
  std::string kv_endpoint;      // ZMQ PUB endpoint of its KV events; empty: load-only worker
  std::string replay_endpoint;  // ZMQ ROUTER replay endpoint; empty: gaps cannot be repaired
  std::string topic;            // ZMQ topic of its events
  uint32_t block_size = 0;      // tokens per block it reported; 0: not reported
  std::string model;            // served model name; empty: unknown (learned from /v1/models)
  std::string engine;           // "vllm", "sglang", "mock"; empty: unknown (vLLM protocol)
  uint32_t bootstrap_port = 0;  // SGLang disaggregation bootstrap port; 0: none
  // The disaggregation protocol it speaks, when its engine name does not say (the mock speaks
  // either): "vllm", "sglang"; empty: SGLang's for engine "sglang", else vLLM's.
  std::string pd_protocol;
  uint32_t dp_size = 1;         // data-parallel ranks publishing events (ports offset by rank)

  bool operator==(const WorkerInfo&) const = default;
};

// An immutable view of the fleet, swapped atomically by the worker source's owner.
using WorkerSet = std::vector<WorkerInfo>;
using WorkerSetPtr = std::shared_ptr<const WorkerSet>;

// The protocol of a split request on this worker (pd_protocol, else by engine).
PdProtocol pd_protocol(const WorkerInfo& worker);

// `--worker URL[,kv=ENDPOINT][,replay=ENDPOINT][,topic=T][,role=prefill|decode|both]`, plus the
// optional model=, engine=, bootstrap_port= and pd_protocol= keys.
Result<WorkerInfo> parse_worker_flag(std::string_view spec);
// The etcd record (JSON object) and back.
std::string worker_record_json(const WorkerInfo& worker);
Result<WorkerInfo> parse_worker_record(std::string_view json);
// `<prefix><role>/<host:port>`, e.g. infera/workers/both/127.0.0.1:30000.
std::string worker_key(std::string_view prefix, const WorkerInfo& worker);
// "http(s)://host:port[/]" -> "host:port", validating scheme, host and port.
Result<std::string> worker_id_from_url(std::string_view url);

}  // namespace infera::discovery
