// Membership: how the router replicas of one --namespace find each other (docs/contracts.md
// section 12). Each backend keeps a snapshot of the peers, this replica left out:
// StaticMembership (the --peer URLs), EtcdMembership (this replica's leased record at
// infera/routers/<router_id>, and a watch of that prefix), KubeMembership (the pods labelled
// app.kubernetes.io/component=infera-router, listed and watched). start()/stop() from the
// owner's (non-loop) thread; the backend runs on the EventLoop it is given; peers() and health()
// from any thread; the listener runs on the backend's strand, never concurrently with itself.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"
#include "infera/discovery/kube_config.h"  // EnvLookup
#include "infera/discovery/kube_health.h"
#include "infera/http/awaitable.h"

namespace infera::http {
class EventLoop;
}  // namespace infera::http
namespace infera::config {
struct ServerConfig;
}  // namespace infera::config
namespace infera::discovery {
class EtcdPrefixWatch;
class EtcdRegistration;
class KubeApi;
struct KubePod;
}  // namespace infera::discovery

namespace infera::replica {

struct PeerRecord {
  std::string router_id;  // empty when the backend does not know it (static, k8s)
  std::string url;        // http(s)://HOST:PORT of the peer's main listener
  bool ready = true;  // k8s: the pod's Ready condition (and not terminating); else unknown: true
  bool operator==(const PeerRecord&) const = default;
};

// How the backend is doing, for /v1/admin and /metrics (like discovery::SourceHealth).
struct MembershipHealth {
  std::string backend;           // "static", "etcd", "k8s"
  bool connected = true;         // the last call to the backend succeeded
  std::string last_error;        // why it is not connected, or the last skipped record
  uint64_t invalid_records = 0;  // etcd values or pods skipped as malformed
  uint64_t resyncs = 0;          // full re-reads (range, list) since start
};

// This replica, to register it (etcd) and to leave it out of peers(): a peer whose url is
// `url`, whose router_id is `router_id`, or (k8s) whose pod is `pod_name` is this replica.
struct SelfIdentity {
  std::string router_id;  // etcd: the key's last segment; letters, digits, '.', '-', '_', ':'
  std::string url;        // advertised_url(): what peers reach this replica's listener at
  std::string pod_name;   // k8s: this pod's name ($HOSTNAME); empty: by URL only
};

// http://HOST:PORT that peers reach this replica at: `host` (--host) unless it is a wildcard
// (empty, 0.0.0.0, ::, [::]), then $POD_IP (the downward API), else the first non-loopback IPv4
// address of this machine, else 127.0.0.1. An IPv6 address is bracketed.
std::string advertised_url(std::string_view host, uint16_t port, const discovery::EnvLookup& env);

// The router record at infera/routers/<router_id>: {"router_id": ..., "url": ...}, and back. A
// record without router_id takes `fallback_id` (the key's last segment); the url must pass
// config::parse_peer_url. Untrusted bytes: never throws.
std::string router_record_json(const PeerRecord& record);
Result<PeerRecord> parse_router_record(std::string_view json, std::string_view fallback_id);

class Membership {
 public:
  using Listener = std::function<void(const std::vector<PeerRecord>&)>;
  virtual ~Membership() = default;

  // Begins; `listener` (may be empty) hears each new peer list, the first one included. Errors:
  // a bad URL, router id or endpoint (nothing runs); etcd: the first registration did not
  // succeed within its timeout (it keeps trying, and the watch runs).
  Status start(Listener listener = {});
  // Stops (etcd: deletes this replica's record); no listener call starts after it returns.
  // Bounded: every network wait has a deadline. Idempotent.
  void stop();
  // The peers as last seen, sorted by URL; empty before the first read. Any thread.
  std::vector<PeerRecord> peers() const;
  virtual MembershipHealth health() const = 0;
  virtual std::string describe() const = 0;

 protected:
  explicit Membership(SelfIdentity self) : self_(std::move(self)) {}
  virtual Status start_backend() = 0;
  virtual void stop_backend() = 0;
  // Replaces the peers with `records` less this replica, and tells the listener if they changed.
  // One caller at a time (the backend's strand, or start()).
  void publish(std::vector<PeerRecord> records);
  const SelfIdentity& self() const { return self_; }

 private:
  SelfIdentity self_;
  Listener listener_;
  mutable std::mutex mu_;
  std::vector<PeerRecord> peers_;  // guarded by mu_
  bool published_ = false;         // publish()'s side only
};

// The --peer URLs, validated at start() (config::parse_peer_url); the listener hears them once,
// from start(). ready is unknown, so true.
class StaticMembership final : public Membership {
 public:
  StaticMembership(std::vector<std::string> urls, SelfIdentity self);
  ~StaticMembership() override { stop(); }
  MembershipHealth health() const override;
  std::string describe() const override;

 private:
  Status start_backend() override;
  void stop_backend() override {}
  std::vector<std::string> urls_;
};

struct EtcdMembershipOptions {
  std::string prefix = "infera/routers/";
  std::chrono::seconds ttl{10};  // this replica's record outlives a crash by this long at most
  std::chrono::milliseconds retry_min{200};  // backoff of the watch while etcd is away
  std::chrono::milliseconds retry_max{5'000};
  std::chrono::milliseconds register_timeout{10'000};  // start() waits this long for the put
};

// Registers this replica (discovery::EtcdRegistration: leased, kept alive at ttl/3, re-created
// when the lease is lost, deleted on stop) and mirrors the prefix (discovery::EtcdPrefixWatch:
// range, watch, resync with backoff; the last peers stay while etcd is away). A value that does
// not parse is skipped, counted and logged; ready is unknown, so true.
class EtcdMembership final : public Membership {
 public:
  // `endpoint`: etcd's HOST:PORT (--etcd-endpoint).
  EtcdMembership(http::EventLoop& loop, std::string endpoint, SelfIdentity self,
                 EtcdMembershipOptions options = {});
  ~EtcdMembership() override;
  MembershipHealth health() const override;
  std::string describe() const override;

 private:
  Status start_backend() override;
  void stop_backend() override;
  // On the watch's strand.
  void apply(const std::string& key, const std::string& value, bool deleted);
  void publish_records();

  http::EventLoop& loop_;
  std::string endpoint_;
  EtcdMembershipOptions options_;
  std::unique_ptr<discovery::EtcdPrefixWatch> watch_;
  std::unique_ptr<discovery::EtcdRegistration> registration_;
  std::map<std::string, PeerRecord> records_;  // by etcd key; watch-side only
  std::atomic<uint64_t> invalid_{0};
  mutable std::mutex error_mu_;
  std::string last_invalid_;  // guarded by error_mu_
};

struct KubeMembershipOptions {
  std::string ns = "default";
  std::string label_selector = "app.kubernetes.io/component=infera-router";
  std::chrono::milliseconds retry_min{200};
  std::chrono::milliseconds retry_max{10'000};
  std::chrono::seconds reconcile_interval{300};  // full re-list, even when the watch is healthy
  std::chrono::seconds watch_timeout{240};       // the API server ends each watch after this
  size_t max_pods = 1'000;  // more router pods than this is refused as a wrong selector
};

// The router pods of a namespace, listed and watched (discovery's informer pieces: list_pods,
// watch_pods, list_watch_loop; resync on 410 and every reconcile_interval; the last peers stay
// while the API server is away). A peer is a pod with an IP, not Succeeded or Failed:
// url http://<podIP>:<port>, the port by discovery::kube_pod_port (annotation infera.ai/port,
// else the container port named http, else the first); ready = Ready and not terminating;
// router_id empty. A pod with a bad port is skipped, counted and logged once.
class KubeMembership final : public Membership {
 public:
  KubeMembership(http::EventLoop& loop, std::unique_ptr<discovery::KubeApi> api, SelfIdentity self,
                 KubeMembershipOptions options = {});
  ~KubeMembership() override;
  MembershipHealth health() const override;
  std::string describe() const override;

 private:
  struct State;  // the strand, the cancellation and the pods (membership.cc)
  Status start_backend() override;
  void stop_backend() override;
  net::awaitable<void> run();
  net::awaitable<Status> list();
  net::awaitable<Status> watch();
  void apply(const discovery::KubePod& pod, bool present);
  void publish_pods();

  http::EventLoop& loop_;
  std::unique_ptr<discovery::KubeApi> api_;
  KubeMembershipOptions options_;
  std::shared_ptr<State> state_;
  std::atomic<bool> stop_{false};
  discovery::KubeHealth health_;
  std::future<void> done_;
  bool started_ = false;
};

// This process as a replica: router_id as given, url = advertised_url(config.host, port, env)
// (`port`: the main listener's bound port), pod_name = $HOSTNAME.
SelfIdentity self_identity(const config::ServerConfig& config, std::string router_id, uint16_t port,
                           const discovery::EnvLookup& env);

// The membership `config` names: --peer URLs when given (static); else the discovery backend's
// router records: etcd (--etcd-endpoint), k8s (--kubeconfig, in the namespace the workers are
// found in: --k8s-namespace, else the context's or the pod's, else default); static discovery
// without --peer: no peers. A bad kubeconfig is an error here; the rest, at start().
Result<std::unique_ptr<Membership>> make_membership(const config::ServerConfig& config,
                                                    http::EventLoop& loop, SelfIdentity self,
                                                    const discovery::EnvLookup& env);

}  // namespace infera::replica
