// libFuzzer target for the Kubernetes discovery parsers (API server bytes are untrusted): the
// input is parsed as a watch line, a pod list, a pod and an InferencePool; none may crash, and a
// pod that parses must turn into a worker or an error, never anything else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "infera/discovery/kube_pod.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera::discovery;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto ev = parse_kube_watch_event(text); ev.ok()) (void)kube_pod_worker(ev->pod, {});
  if (auto list = parse_kube_pod_list(text); list.ok()) {
    for (const KubePod& p : list->items) (void)kube_pod_worker(p, KubePodRules{Role::kDecode, 8000});
  }
  if (auto pod = parse_kube_pod(text); pod.ok()) (void)kube_pod_worker(*pod, {});
  (void)parse_kube_inference_pool(text);
  return 0;
}
