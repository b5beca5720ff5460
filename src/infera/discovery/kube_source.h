// KubeWorkerSource: the server's fleet from the Kubernetes API (docs/contracts.md section 8).
// For each label selector (the pods of one role, or of every role with the role read from the
// llm-d.ai/role label), or for an InferencePool's selector: list the pods, then watch from the
// list's resourceVersion with bookmarks; a 410 (expired) or a periodic reconcile re-lists; a
// dropped watch resumes from the last version seen. While the API server is away the last known
// fleet stays in use and calls are retried with backoff; health() says so. A pod that does not
// parse, or carries a bad annotation, is skipped with one log line. Runs on the EventLoop it is
// given (one strand); start/stop from a non-loop thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "infera/discovery/kube_api.h"
#include "infera/discovery/kube_health.h"
#include "infera/discovery/kube_pod.h"
#include "infera/discovery/source.h"
#include "infera/http/event_loop.h"

namespace infera::discovery {

// The pieces of a pod informer, shared by KubeWorkerSource and the router replicas' membership
// (replica/membership.h). Coroutines on the caller's executor; each call has KubeApi's deadlines.

// Every pod of namespace `ns` matching `label_selector` (empty: all), read 500 a page; more than
// `max_pods` is kResourceExhausted. The list's resourceVersion is where a watch starts.
net::awaitable<Result<KubePodList>> list_pods(KubeApi& api, std::string ns,
                                              std::string label_selector, size_t max_pods,
                                              const std::atomic<bool>& stop);

struct KubePodWatchHandlers {
  std::function<void(const KubePod& pod, bool present)> on_pod;  // present = false: deleted
  std::function<void(const Status& why)> on_invalid;  // a line that did not parse; skipped
  std::function<void()> on_open;                      // the first line arrived
};
// Watches those pods from *resource_version (advanced by each event and bookmark), with
// bookmarks; the server ends the watch after `timeout`. Ends as KubeApi::watch does; an ERROR
// event is kOutOfRange when it is 410 (expired: list again), kUnavailable otherwise.
net::awaitable<Status> watch_pods(KubeApi& api, std::string ns, std::string label_selector,
                                  std::string* resource_version, std::chrono::seconds timeout,
                                  KubePodWatchHandlers handlers, const std::atomic<bool>& stop);

struct KubeListWatchOptions {
  std::chrono::milliseconds retry_min{200};
  std::chrono::milliseconds retry_max{10'000};
  std::chrono::seconds reconcile_interval{300};  // full re-list, even when the watch is healthy
};
// The informer's loop: list(), then watch() again and again. A watch that ends ok (the server's
// timeout, a stream quiet past the read deadline) resumes at once; kOutOfRange re-lists; any
// other failure reports disconnected and backs off (retry_min doubling to retry_max) before
// resuming; a failed list likewise before listing again; every reconcile_interval, a re-list.
// on_connected(true) after each good list. Returns once `stop` is set or it is cancelled.
net::awaitable<void> list_watch_loop(
    std::function<net::awaitable<Status>()> list, std::function<net::awaitable<Status>()> watch,
    std::function<void(bool connected, const Status& why)> on_connected,
    KubeListWatchOptions options, const std::atomic<bool>& stop);

struct KubeSelector {
  std::string label_selector;  // a labelSelector query ("app=vllm,tier in (a,b)")
  std::optional<Role> role;    // empty: each pod's llm-d.ai/role label
};

struct KubeSourceOptions {
  std::string ns = "default";
  std::vector<KubeSelector> selectors;
  std::string inference_pool;  // an InferencePool's name: its selector and port, re-read at re-lists
  std::chrono::milliseconds retry_min{200};
  std::chrono::milliseconds retry_max{10'000};
  std::chrono::seconds reconcile_interval{300};  // full re-list, even when the watch is healthy
  std::chrono::seconds watch_timeout{240};       // the server ends each watch after this
  size_t max_pods = 20'000;  // per selector; more is refused as an oversized fleet (logged)
};

class KubeWorkerSource final : public WorkerSource {
 public:
  KubeWorkerSource(http::EventLoop& loop, std::unique_ptr<KubeApi> api, KubeSourceOptions options);
  ~KubeWorkerSource() override;

  void start(Listener listener) override;
  void stop() override;
  std::string describe() const override;
  SourceHealth health() const override;

 private:
  struct Watcher;  // one selector's strand-side state (kube_source.cc)
  net::awaitable<void> run(size_t index);
  net::awaitable<Status> list(Watcher& w);
  net::awaitable<Status> watch(Watcher& w);
  net::awaitable<Status> resolve_pool(Watcher& w);
  // Applies one pod as seen now (present = false: deleted); true when the routable set changed.
  bool apply(Watcher& w, const KubePod& pod, bool present);
  void publish();

  http::EventLoop& loop_;
  std::unique_ptr<KubeApi> api_;
  KubeSourceOptions options_;
  std::shared_ptr<net::strand<net::io_context::executor_type>> strand_;
  std::vector<std::unique_ptr<Watcher>> watchers_;
  Listener listener_;
  std::atomic<bool> stop_{false};
  KubeHealth health_;
  std::vector<std::future<void>> done_;
  bool started_ = false;
};

}  // namespace infera::discovery
