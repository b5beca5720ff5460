#include "infera/replica/membership.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <boost/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "infera/common/log.h"
#include "infera/config/server_config.h"
#include "infera/discovery/etcd.h"
#include "infera/discovery/kube_api.h"
#include "infera/discovery/kube_pod.h"
#include "infera/discovery/kube_source.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/http/net.h"

namespace infera::replica {
namespace json = boost::json;
namespace {

// The first IPv4 address of an interface that is up and not loopback; empty when none.
std::string first_non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::string found;
  for (ifaddrs* a = list; a && found.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text))) found = text;
  }
  ::freeifaddrs(list);
  return found;
}

bool wildcard_host(std::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

// etcd key segment: no '/', printable, bounded.
Status check_router_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return invalid_argument("router id must be 1..128 characters");
  for (const char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_' || c == ':';
    if (!ok) return invalid_argument("router id '" + std::string(id) + "' has a bad character");
  }
  return ok_status();
}

std::string last_segment(std::string_view key) {
  const size_t slash = key.rfind('/');
  return std::string(slash == std::string_view::npos ? key : key.substr(slash + 1));
}

// The pod as a peer; empty when it is not one (this replica's pod, no IP, finished). An error
// names the bad port annotation, or says there is no port.
Result<std::optional<PeerRecord>> pod_peer(const discovery::KubePod& pod,
                                           const std::string& self_pod) {
  if (!self_pod.empty() && pod.name == self_pod) return std::optional<PeerRecord>();
  INFERA_ASSIGN_OR_RETURN(const uint32_t port, discovery::kube_pod_port(pod));
  if (pod.pod_ip.empty() || pod.phase == "Succeeded" || pod.phase == "Failed") {
    return std::optional<PeerRecord>();
  }
  const bool v6 = pod.pod_ip.find(':') != std::string::npos;
  PeerRecord p;
  p.url = "http://" + (v6 ? "[" + pod.pod_ip + "]" : pod.pod_ip) + ":" + std::to_string(port);
  auto checked = config::parse_peer_url(p.url);
  if (!checked.ok()) {
    return invalid_argument("podIP '" + pod.pod_ip.substr(0, 64) + "' is not an address");
  }
  p.url = std::move(*checked);
  p.ready = pod.ready && !pod.terminating;
  return std::optional<PeerRecord>(std::move(p));
}

}  // namespace

std::string advertised_url(std::string_view host, uint16_t port, const discovery::EnvLookup& env) {
  std::string h(host);
  if (wildcard_host(h)) {
    const std::optional<std::string> pod_ip = env("POD_IP");
    h = pod_ip && !pod_ip->empty() ? *pod_ip : first_non_loopback_ipv4();
    if (h.empty()) h = "127.0.0.1";
  }
  if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
  return "http://" + h + ":" + std::to_string(port);
}

std::string router_record_json(const PeerRecord& record) {
  return json::serialize(json::object{{"router_id", record.router_id}, {"url", record.url}});
}

Result<PeerRecord> parse_router_record(std::string_view text, std::string_view fallback_id) {
  boost::system::error_code ec;
  json::parse_options po;
  po.max_depth = 16;
  const json::value v = json::parse(text, ec, {}, po);
  if (ec || !v.is_object()) return invalid_argument("router record is not a JSON object");
  const json::object& o = v.get_object();
  PeerRecord r;
  const json::value* id = o.if_contains("router_id");
  if (id && !id->is_null() && !id->is_string()) {
    return invalid_argument("router record: 'router_id' must be a string");
  }
  r.router_id = id && id->is_string() ? std::string(id->get_string()) : std::string(fallback_id);
  INFERA_RETURN_IF_ERROR(check_router_id(r.router_id));
  const json::value* url = o.if_contains("url");
  if (!url || !url->is_string()) return invalid_argument("router record: no 'url' string");
  INFERA_ASSIGN_OR_RETURN(r.url, config::parse_peer_url(url->get_string()));
  return r;
}

// ---------------------------------------------------------------------------------------------

Status Membership::start(Listener listener) {
  listener_ = std::move(listener);
  return start_backend();
}

void Membership::stop() {
  stop_backend();
}

std::vector<PeerRecord> Membership::peers() const {
  std::lock_guard lock(mu_);
  return peers_;
}

void Membership::publish(std::vector<PeerRecord> records) {
  std::erase_if(records, [&](const PeerRecord& r) {
    return (!self_.url.empty() && r.url == self_.url) ||
           (!self_.router_id.empty() && r.router_id == self_.router_id);
  });
  std::sort(records.begin(), records.end(), [](const PeerRecord& a, const PeerRecord& b) {
    return std::tie(a.url, a.router_id, a.ready) < std::tie(b.url, b.router_id, b.ready);
  });
  records.erase(std::unique(records.begin(), records.end()), records.end());
  {
    std::lock_guard lock(mu_);
    if (published_ && peers_ == records) return;
    peers_ = records;
    published_ = true;
  }
  if (listener_) listener_(records);
}

// ---------------------------------------------------------------------------------------------

StaticMembership::StaticMembership(std::vector<std::string> urls, SelfIdentity self)
    : Membership(std::move(self)), urls_(std::move(urls)) {}

Status StaticMembership::start_backend() {
  std::vector<PeerRecord> records;
  for (const std::string& url : urls_) {
    PeerRecord r;
    INFERA_ASSIGN_OR_RETURN(r.url, config::parse_peer_url(url));
    records.push_back(std::move(r));
  }
  publish(std::move(records));
  return ok_status();
}

MembershipHealth StaticMembership::health() const {
  MembershipHealth h;
  h.backend = "static";
  return h;
}

std::string StaticMembership::describe() const {
  return "static " + std::to_string(urls_.size()) + " --peer URL(s)";
}

// ---------------------------------------------------------------------------------------------

EtcdMembership::EtcdMembership(http::EventLoop& loop, std::string endpoint, SelfIdentity self,
                               EtcdMembershipOptions options)
    : Membership(std::move(self)),
      loop_(loop),
      endpoint_(std::move(endpoint)),
      options_(std::move(options)) {
  if (!options_.prefix.empty() && options_.prefix.back() != '/') options_.prefix += '/';
}

EtcdMembership::~EtcdMembership() {
  stop();
}

std::string EtcdMembership::describe() const {
  return "etcd " + endpoint_ + " prefix " + options_.prefix;
}

MembershipHealth EtcdMembership::health() const {
  MembershipHealth h;
  h.backend = "etcd";
  h.connected = watch_ && watch_->connected();
  h.invalid_records = invalid_.load();
  h.resyncs = watch_ ? watch_->resyncs() : 0;
  h.last_error = watch_ && !h.connected ? watch_->last_error() : std::string();
  if (h.last_error.empty()) {
    std::lock_guard lock(error_mu_);
    h.last_error = last_invalid_;
  }
  return h;
}

Status EtcdMembership::start_backend() {
  if (watch_) return failed_precondition("etcd membership already started");
  INFERA_RETURN_IF_ERROR(check_router_id(self().router_id));
  INFERA_ASSIGN_OR_RETURN(const std::string url, config::parse_peer_url(self().url));
  INFERA_ASSIGN_OR_RETURN(const http::Endpoint endpoint, http::parse_endpoint(endpoint_));
  discovery::EtcdSourceOptions wo;
  wo.prefix = options_.prefix;
  wo.retry_min = options_.retry_min;
  wo.retry_max = options_.retry_max;
  watch_ = std::make_unique<discovery::EtcdPrefixWatch>(loop_, endpoint, wo);
  discovery::EtcdRegistrationOptions ro;
  ro.ttl = options_.ttl;
  PeerRecord me{self().router_id, url, true};
  registration_ = std::make_unique<discovery::EtcdRegistration>(
      loop_, endpoint, options_.prefix + me.router_id, router_record_json(me), ro);
  discovery::EtcdPrefixWatch::Handlers h;
  h.on_reset = [this](const std::vector<discovery::EtcdKeyValue>& kvs) {
    records_.clear();
    for (const auto& kv : kvs) apply(kv.key, kv.value, false);
    publish_records();
  };
  h.on_event = [this](const discovery::EtcdWatchEvent& ev) {
    apply(ev.kv.key, ev.kv.value, ev.deleted);
    publish_records();
  };
  // The watch first: peers are known as soon as the registration is.
  watch_->start(std::move(h));
  return registration_->start(options_.register_timeout);
}

void EtcdMembership::stop_backend() {
  if (registration_) registration_->stop();  // deletes the record, revokes the lease
  if (watch_) watch_->stop();
}

void EtcdMembership::apply(const std::string& key, const std::string& value, bool deleted) {
  if (deleted) {
    records_.erase(key);
    return;
  }
  auto r = parse_router_record(value, last_segment(key));
  if (!r.ok()) {
    invalid_.fetch_add(1);
    {
      std::lock_guard lock(error_mu_);
      last_invalid_ = key + ": " + std::string(r.status().message());
    }
    INFERA_LOG(kWarn, "replica")
        .msg("skipping malformed router record")
        .kv("key", key)
        .kv("error", r.status().message());
    records_.erase(key);
    return;
  }
  records_[key] = std::move(*r);
}

void EtcdMembership::publish_records() {
  std::vector<PeerRecord> records;
  records.reserve(records_.size());
  for (const auto& [key, r] : records_) records.push_back(r);
  publish(std::move(records));
}

// ---------------------------------------------------------------------------------------------

struct KubeMembership::State {
  explicit State(net::io_context& context) : strand(net::make_strand(context)) {}
  net::strand<net::io_context::executor_type> strand;
  net::cancellation_signal cancel;
  std::promise<void> done;
  std::map<std::string, PeerRecord> pods;  // by pod uid; strand-side
  std::string resource_version;            // strand-side
};

KubeMembership::KubeMembership(http::EventLoop& loop, std::unique_ptr<discovery::KubeApi> api,
                               SelfIdentity self, KubeMembershipOptions options)
    : Membership(std::move(self)),
      loop_(loop),
      api_(std::move(api)),
      options_(std::move(options)),
      state_(std::make_shared<State>(loop_.context())),
      health_({"replica", "peers", "skipping router pod"}, api_->describe(), false) {}

KubeMembership::~KubeMembership() {
  stop();
}

std::string KubeMembership::describe() const {
  return "k8s " + api_->describe() + " namespace " + options_.ns + " selector '" +
         options_.label_selector + "'";
}

MembershipHealth KubeMembership::health() const {
  const discovery::SourceHealth h = health_.get();
  MembershipHealth out;
  out.backend = "k8s";
  out.connected = h.connected;
  out.last_error = h.last_error;
  out.invalid_records = h.invalid_records;
  out.resyncs = h.resyncs;
  return out;
}

Status KubeMembership::start_backend() {
  if (started_) return failed_precondition("k8s membership already started");
  started_ = true;
  done_ = state_->done.get_future();
  net::co_spawn(state_->strand, run(),
                net::bind_cancellation_slot(
                    state_->cancel.slot(), [this, state = state_](const std::exception_ptr& e) {
                      if (e && !stop_.load()) {
                        INFERA_LOG(kError, "replica").msg("k8s membership stopped by an exception");
                      }
                      state->done.set_value();
                    }));
  return ok_status();
}

void KubeMembership::stop_backend() {
  if (!started_) return;
  started_ = false;
  stop_.store(true);
  // Cancels the pending read or backoff on the strand; the loop then returns at once. The
  // posted handler holds the state: it may run after the loop has returned on its own.
  net::post(state_->strand,
            [state = state_] { state->cancel.emit(net::cancellation_type::terminal); });
  done_.wait();
}

void KubeMembership::apply(const discovery::KubePod& pod, bool present) {
  std::optional<PeerRecord> peer;
  if (present) {
    auto r = pod_peer(pod, self().pod_name);
    if (r.ok()) {
      peer = std::move(*r);
    } else {
      health_.note_invalid(pod.ns + "/" + pod.name, r.status());
    }
  }
  if (peer) {
    state_->pods[pod.uid] = std::move(*peer);
  } else {
    state_->pods.erase(pod.uid);
  }
}

void KubeMembership::publish_pods() {
  std::vector<PeerRecord> records;
  records.reserve(state_->pods.size());
  for (const auto& [uid, r] : state_->pods) records.push_back(r);
  publish(std::move(records));
}

net::awaitable<Status> KubeMembership::list() {
  // On failure the peers stay as they were.
  auto listed = co_await discovery::list_pods(*api_, options_.ns, options_.label_selector,
                                              options_.max_pods, stop_);
  if (!listed.ok()) co_return listed.status();
  for (const std::string& bad : listed->skipped) {
    health_.note_invalid(bad, data_loss("malformed pod"));
  }
  state_->pods.clear();
  for (const discovery::KubePod& pod : listed->items) apply(pod, true);
  state_->resource_version = listed->resource_version;
  health_.note_listed(listed->items.size());
  publish_pods();
  co_return ok_status();
}

net::awaitable<Status> KubeMembership::watch() {
  discovery::KubePodWatchHandlers h;
  h.on_open = [this] { health_.set_connected(true, ok_status()); };
  h.on_invalid = [this](const Status& why) { health_.note_invalid("watch event", why); };
  h.on_pod = [this](const discovery::KubePod& pod, bool present) {
    apply(pod, present);
    publish_pods();
  };
  co_return co_await discovery::watch_pods(*api_, options_.ns, options_.label_selector,
                                           &state_->resource_version, options_.watch_timeout,
                                           std::move(h), stop_);
}

net::awaitable<void> KubeMembership::run() {
  discovery::KubeListWatchOptions lo;
  lo.retry_min = options_.retry_min;
  lo.retry_max = options_.retry_max;
  lo.reconcile_interval = options_.reconcile_interval;
  // Named, not temporaries in the co_await's operand (GCC 12, http/awaitable.h).
  std::function<net::awaitable<Status>()> list_fn = [this] { return list(); };
  std::function<net::awaitable<Status>()> watch_fn = [this] { return watch(); };
  std::function<void(bool, const Status&)> connected_fn = [this](bool up, const Status& why) {
    health_.set_connected(up, why);
  };
  co_await discovery::list_watch_loop(std::move(list_fn), std::move(watch_fn),
                                      std::move(connected_fn), lo, stop_);
}

// ---------------------------------------------------------------------------------------------

SelfIdentity self_identity(const config::ServerConfig& config, std::string router_id, uint16_t port,
                           const discovery::EnvLookup& env) {
  SelfIdentity self;
  self.router_id = std::move(router_id);
  self.url = advertised_url(config.host, port, env);
  self.pod_name = env("HOSTNAME").value_or("");
  return self;
}

Result<std::unique_ptr<Membership>> make_membership(const config::ServerConfig& config,
                                                    http::EventLoop& loop, SelfIdentity self,
                                                    const discovery::EnvLookup& env) {
  if (!config.peers.empty() || config.discovery_backend == config::DiscoveryBackend::kStatic) {
    return std::unique_ptr<Membership>(
        std::make_unique<StaticMembership>(config.peers, std::move(self)));
  }
  if (config.discovery_backend == config::DiscoveryBackend::kEtcd) {
    return std::unique_ptr<Membership>(
        std::make_unique<EtcdMembership>(loop, config.etcd_endpoint, std::move(self)));
  }
  INFERA_ASSIGN_OR_RETURN(discovery::KubeConfig kube,
                          discovery::load_kube_config(config.kubeconfig, env));
  KubeMembershipOptions ko;
  ko.ns = !config.k8s_namespace.empty() ? config.k8s_namespace
                                        : (!kube.ns.empty() ? kube.ns : std::string("default"));
  discovery::KubeApiOptions ao;
  ao.read_timeout = ko.watch_timeout + std::chrono::seconds(30);  // the server ends each watch
  INFERA_ASSIGN_OR_RETURN(auto api, discovery::KubeApi::create(std::move(kube), ao));
  return std::unique_ptr<Membership>(
      std::make_unique<KubeMembership>(loop, std::move(api), std::move(self), std::move(ko)));
}

}  // namespace infera::replica
