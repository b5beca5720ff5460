#include "infera/discovery/kube_source.h"

#include "infera/common/log.h"
#include "infera/http/net.h"

namespace infera::discovery {

struct KubeWorkerSource::Watcher {
  size_t index = 0;
  KubeSelector selector;
  KubePodRules rules;
  std::string label_selector;  // in force: the selector's, or the InferencePool's
  std::string resource_version;
  std::map<std::string, WorkerInfo> routable;  // by pod uid
  bool listed = false;                          // a list succeeded once
  net::cancellation_signal cancel;
  std::promise<void> done;
};

namespace {

std::string pods_path(const std::string& ns) {
  return "/api/v1/namespaces/" + url_query_escape(ns) + "/pods";
}

}  // namespace

net::awaitable<Result<KubePodList>> list_pods(KubeApi& api, std::string ns,
                                              std::string label_selector, size_t max_pods,
                                              const std::atomic<bool>& stop) {
  KubePodList all;
  std::string continue_token;
  do {
    std::string target = pods_path(ns) + "?limit=500";
    if (!label_selector.empty()) target += "&labelSelector=" + url_query_escape(label_selector);
    if (!continue_token.empty()) target += "&continue=" + url_query_escape(continue_token);
    auto body = co_await api.get(std::move(target));
    if (!body.ok()) co_return body.status();
    auto page = parse_kube_pod_list(*body);
    if (!page.ok()) co_return page.status();
    if (all.items.size() + page->items.size() > max_pods) {
      co_return resource_exhausted("selector '" + label_selector + "' matches more than " +
                                   std::to_string(max_pods) + " pods");
    }
    for (KubePod& pod : page->items) all.items.push_back(std::move(pod));
    for (std::string& bad : page->skipped) all.skipped.push_back(std::move(bad));
    all.resource_version = std::move(page->resource_version);
    continue_token = std::move(page->continue_token);
  } while (!continue_token.empty() && !stop.load());
  co_return all;
}

net::awaitable<Status> watch_pods(KubeApi& api, std::string ns, std::string label_selector,
                                  std::string* resource_version, std::chrono::seconds timeout,
                                  KubePodWatchHandlers handlers, const std::atomic<bool>& stop) {
  std::string target = pods_path(ns) + "?watch=1&allowWatchBookmarks=true" +
                       "&timeoutSeconds=" + std::to_string(timeout.count()) +
                       "&resourceVersion=" + url_query_escape(*resource_version);
  if (!label_selector.empty()) target += "&labelSelector=" + url_query_escape(label_selector);
  bool first = true;
  co_return co_await api.watch(
      std::move(target),
      [&](std::string_view line) -> Status {
        if (first) {  // the stream opened: the API server is back
          first = false;
          if (handlers.on_open) handlers.on_open();
        }
        auto ev = parse_kube_watch_event(line);
        if (!ev.ok()) {
          if (handlers.on_invalid) handlers.on_invalid(ev.status());
          return ok_status();  // one bad line does not end the stream
        }
        using Type = KubeWatchEvent::Type;
        if (ev->type == Type::kError) {
          if (ev->error_code == 410) return out_of_range("watch expired: " + ev->error_message);
          return unavailable("watch error " + std::to_string(ev->error_code) + ": " +
                             ev->error_message);
        }
        if (!ev->pod.resource_version.empty()) *resource_version = ev->pod.resource_version;
        if (ev->type == Type::kBookmark) return ok_status();
        if (handlers.on_pod) handlers.on_pod(ev->pod, ev->type != Type::kDeleted);
        return ok_status();
      },
      stop);
}

net::awaitable<void> list_watch_loop(std::function<net::awaitable<Status>()> list,
                                     std::function<net::awaitable<Status>()> watch,
                                     std::function<void(bool, const Status&)> on_connected,
                                     KubeListWatchOptions options, const std::atomic<bool>& stop) {
  auto backoff = options.retry_min;
  auto backoff_wait = [&]() -> net::awaitable<bool> {
    const bool waited = co_await pause_for(backoff);
    backoff = std::min(backoff * 2, options.retry_max);
    co_return waited && !stop.load();
  };
  while (!stop.load()) {
    if (Status s = co_await list(); !s.ok()) {
      if (stop.load()) break;
      on_connected(false, s);
      if (!co_await backoff_wait()) break;
      continue;
    }
    on_connected(true, ok_status());
    backoff = options.retry_min;
    const auto reconcile_at = std::chrono::steady_clock::now() + options.reconcile_interval;
    while (!stop.load() && std::chrono::steady_clock::now() < reconcile_at) {
      const Status ended = co_await watch();
      if (stop.load()) break;
      if (ended.code() == StatusCode::kOutOfRange) {
        INFERA_LOG(kInfo, "discovery")
            .msg("k8s watch expired; re-listing")
            .kv("error", ended.message());
        break;
      }
      // The server's timeoutSeconds, or a quiet stream that outlived the read deadline
      // (KubeApi::watch): resume from the last version, without calling the API server
      // unreachable.
      if (ended.ok()) {
        backoff = options.retry_min;
        continue;
      }
      on_connected(false, ended);
      if (!co_await backoff_wait()) break;
    }
  }
}

KubeWorkerSource::KubeWorkerSource(http::EventLoop& loop, std::unique_ptr<KubeApi> api,
                                   KubeSourceOptions options)
    : loop_(loop),
      api_(std::move(api)),
      options_(std::move(options)),
      strand_(std::make_shared<net::strand<net::io_context::executor_type>>(
          net::make_strand(loop_.context()))),
      health_({"discovery", "workers", "skipping pod"}, api_->describe(), true) {
  if (!options_.inference_pool.empty() && options_.selectors.empty()) {
    options_.selectors.push_back({});  // the pool's selector, resolved at each list
  }
  for (size_t i = 0; i < options_.selectors.size(); ++i) {
    auto w = std::make_unique<Watcher>();
    w->index = i;
    w->selector = options_.selectors[i];
    w->rules.role = w->selector.role;
    w->label_selector = w->selector.label_selector;
    watchers_.push_back(std::move(w));
  }
}

KubeWorkerSource::~KubeWorkerSource() { stop(); }

std::string KubeWorkerSource::describe() const {
  std::string d = "k8s " + api_->describe() + " namespace " + options_.ns;
  if (!options_.inference_pool.empty()) d += " inference-pool " + options_.inference_pool;
  for (const KubeSelector& s : options_.selectors) {
    if (s.label_selector.empty()) continue;
    d += " selector '" + s.label_selector + "'";
    if (s.role) d += " (" + std::string(role_name(*s.role)) + ")";
  }
  return d;
}

SourceHealth KubeWorkerSource::health() const { return health_.get(); }

void KubeWorkerSource::start(Listener listener) {
  listener_ = std::move(listener);
  started_ = true;
  for (auto& w : watchers_) {
    done_.push_back(w->done.get_future());
    net::co_spawn(*strand_, run(w->index),
                  net::bind_cancellation_slot(w->cancel.slot(), [this, raw = w.get()](
                                                                    const std::exception_ptr& e) {
                    if (e && !stop_.load()) {
                      INFERA_LOG(kError, "discovery").msg("k8s watcher stopped by an exception");
                    }
                    raw->done.set_value();
                  }));
  }
}

void KubeWorkerSource::stop() {
  if (!started_) return;
  started_ = false;
  stop_.store(true);
  // Cancels each watcher's pending read or backoff on its strand; each then returns at once.
  // The strand is shared with the posted handler, which may run after a watcher has returned.
  std::vector<net::cancellation_signal*> signals;
  for (auto& w : watchers_) signals.push_back(&w->cancel);
  net::post(*strand_, [signals, strand = strand_] {
    for (auto* s : signals) s->emit(net::cancellation_type::terminal);
  });
  for (auto& f : done_) f.wait();
  // The posted emit may not have run yet; it touches the signals, so wait for it too.
  std::promise<void> drained;
  net::post(*strand_, [&drained] { drained.set_value(); });
  drained.get_future().wait();
  done_.clear();
}

bool KubeWorkerSource::apply(Watcher& w, const KubePod& pod, bool present) {
  std::optional<WorkerInfo> worker;
  if (present) {
    auto r = kube_pod_worker(pod, w.rules);
    if (r.ok()) {
      worker = std::move(*r);
    } else {
      health_.note_invalid(pod.ns + "/" + pod.name, r.status());
    }
  }
  const auto it = w.routable.find(pod.uid);
  if (!worker) {
    if (it == w.routable.end()) return false;
    w.routable.erase(it);
    return true;
  }
  if (it != w.routable.end() && it->second == *worker) return false;
  w.routable[pod.uid] = std::move(*worker);
  return true;
}

void KubeWorkerSource::publish() {
  // One worker per id (two selectors may match one pod): the first selector's wins.
  std::map<std::string, WorkerInfo> by_id;
  for (const auto& w : watchers_) {
    for (const auto& [uid, info] : w->routable) by_id.emplace(info.id, info);
  }
  auto set = std::make_shared<WorkerSet>();
  set->reserve(by_id.size());
  for (auto& [id, info] : by_id) set->push_back(std::move(info));
  if (listener_) listener_(std::move(set));
}

net::awaitable<Status> KubeWorkerSource::resolve_pool(Watcher& w) {
  const std::string path = "/apis/inference.networking.k8s.io/v1/namespaces/" +
                           url_query_escape(options_.ns) + "/inferencepools/" +
                           url_query_escape(options_.inference_pool);
  auto body = co_await api_->get(path);
  if (!body.ok()) co_return body.status();
  auto pool = parse_kube_inference_pool(*body);
  if (!pool.ok()) {
    co_return invalid_argument("InferencePool " + options_.inference_pool + ": " +
                               std::string(pool.status().message()));
  }
  if (w.label_selector != pool->label_selector || w.rules.target_port != pool->target_port) {
    INFERA_LOG(kInfo, "discovery").msg("InferencePool read").kv("pool", options_.inference_pool)
        .kv("selector", pool->label_selector).kv("target_port", pool->target_port);
  }
  w.label_selector = pool->label_selector;
  w.rules.target_port = pool->target_port;
  co_return ok_status();
}

net::awaitable<Status> KubeWorkerSource::list(Watcher& w) {
  if (!options_.inference_pool.empty() && w.selector.label_selector.empty()) {
    if (Status s = co_await resolve_pool(w); !s.ok()) co_return s;
  }
  // On failure the routable set stays as it was: keep routing to what was known.
  auto listed = co_await list_pods(*api_, options_.ns, w.label_selector, options_.max_pods, stop_);
  if (!listed.ok()) co_return listed.status();
  for (const std::string& bad : listed->skipped) {
    health_.note_invalid(bad, data_loss("malformed pod"));
  }
  std::map<std::string, WorkerInfo> before = std::move(w.routable);
  w.routable.clear();
  for (const KubePod& pod : listed->items) apply(w, pod, true);
  w.resource_version = listed->resource_version;
  health_.note_listed(listed->items.size());
  // The first list is always delivered, empty or not: the fleet then knows discovery answered.
  if (before != w.routable || !w.listed) publish();
  w.listed = true;
  co_return ok_status();
}

net::awaitable<Status> KubeWorkerSource::watch(Watcher& w) {
  KubePodWatchHandlers h;
  h.on_open = [this] { health_.set_connected(true, ok_status()); };
  h.on_invalid = [this](const Status& why) { health_.note_invalid("watch event", why); };
  h.on_pod = [this, &w](const KubePod& pod, bool present) {
    if (apply(w, pod, present)) publish();
  };
  co_return co_await watch_pods(*api_, options_.ns, w.label_selector, &w.resource_version,
                                options_.watch_timeout, std::move(h), stop_);
}

net::awaitable<void> KubeWorkerSource::run(size_t index) {
  Watcher& w = *watchers_[index];
  KubeListWatchOptions lo;
  lo.retry_min = options_.retry_min;
  lo.retry_max = options_.retry_max;
  lo.reconcile_interval = options_.reconcile_interval;
  // Named, not temporaries in the co_await's operand (GCC 12, http/awaitable.h).
  std::function<net::awaitable<Status>()> list_fn = [this, &w] { return list(w); };
  std::function<net::awaitable<Status>()> watch_fn = [this, &w] { return watch(w); };
  std::function<void(bool, const Status&)> connected_fn = [this](bool up, const Status& why) {
    health_.set_connected(up, why);
  };
  co_await list_watch_loop(std::move(list_fn), std::move(watch_fn), std::move(connected_fn), lo,
                           stop_);
}

}  // namespace infera::discovery
