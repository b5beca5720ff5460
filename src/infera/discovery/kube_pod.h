// What Kubernetes discovery reads from the API server's JSON (docs/contracts.md section 8), and
// how a Pod becomes a worker: routable when Ready and not terminating; URL and id from its IP
// and port (annotation `infera.ai/port`, else the container port named `http`, else the
// InferencePool's target port, else the first container port); KV-event, replay, topic, engine
// and SGLang bootstrap from documented annotations; the role from the selector that found it,
// else the label `llm-d.ai/role`. Every parser takes untrusted bytes and never throws. Pure.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"
#include "infera/discovery/worker.h"

namespace infera::discovery {

// The documented annotations, labels and defaults.
inline constexpr std::string_view kPortAnnotation = "infera.ai/port";
inline constexpr std::string_view kKvEventsPortAnnotation = "infera.ai/kv-events-port";
inline constexpr std::string_view kKvReplayPortAnnotation = "infera.ai/kv-replay-port";
inline constexpr std::string_view kKvTopicAnnotation = "infera.ai/kv-topic";
inline constexpr std::string_view kEngineAnnotation = "infera.ai/engine";
inline constexpr std::string_view kBootstrapPortAnnotation = "sglang.ai/bootstrap-port";
inline constexpr std::string_view kRoleLabel = "llm-d.ai/role";
inline constexpr uint32_t kDefaultKvEventsPort = 5557;
inline constexpr uint32_t kDefaultKvReplayPort = 5558;
inline constexpr std::string_view kDefaultKvTopic = "kv-events";
inline constexpr std::string_view kDefaultEngine = "vllm";

struct KubePod {
  std::string uid;
  std::string name;
  std::string ns;
  std::string resource_version;
  std::string pod_ip;
  std::string phase;
  bool ready = false;        // condition Ready is "True"
  bool terminating = false;  // metadata.deletionTimestamp is set
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  struct Port {
    std::string name;
    uint32_t number = 0;
  };
  std::vector<Port> ports;  // every container's ports, in order
};

struct KubePodList {
  std::vector<KubePod> items;
  std::vector<std::string> skipped;  // items that did not parse: "name: why"
  std::string resource_version;
  std::string continue_token;  // non-empty: more pages
};

struct KubeWatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kError;
  KubePod pod;               // added, modified, deleted (bookmark: resource_version only)
  int error_code = 0;        // ERROR: the Status object's code (410: resource version expired)
  std::string error_message;
};

// The JSON of a Pod, a PodList, one line of a watch stream.
Result<KubePod> parse_kube_pod(std::string_view json);
Result<KubePodList> parse_kube_pod_list(std::string_view json);
Result<KubeWatchEvent> parse_kube_watch_event(std::string_view line);

// What an InferencePool (Gateway API Inference Extension, v1 and v1alpha2 shapes) gives
// discovery: its label selector, written as a labelSelector query, and its first target port.
struct KubeInferencePool {
  std::string label_selector;
  uint32_t target_port = 0;
};
Result<KubeInferencePool> parse_kube_inference_pool(std::string_view json);

// How pods found by one selector become workers.
struct KubePodRules {
  std::optional<Role> role;  // the selector's role; empty: from the llm-d.ai/role label
  uint32_t target_port = 0;  // an InferencePool's target port; 0: none
};

// The port of the pod's HTTP server: annotation `infera.ai/port`, else the container port named
// `http`, else `target_port` (an InferencePool's; 0: none), else the first container port. An
// error names the bad annotation, or says there is no port.
Result<uint32_t> kube_pod_port(const KubePod& pod, uint32_t target_port = 0);

// The pod as a worker; empty when it is not routable now (not Ready, terminating, no IP, not
// Running). An error names the bad annotation or label: the pod is skipped, and logged.
Result<std::optional<WorkerInfo>> kube_pod_worker(const KubePod& pod, const KubePodRules& rules);

}  // namespace infera::discovery
