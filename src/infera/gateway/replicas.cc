#include "infera/gateway/replicas.h"

#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <random>
#include <set>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>

#include "infera/common/log.h"
#include "infera/common/metrics.h"
#include "infera/config/server_config.h"
#include "infera/discovery/kube_config.h"
#include "infera/events/msgpack.h"
#include "infera/gateway/context.h"
#include "infera/http/error.h"
#include "infera/nats/subjects.h"
#include "infera/replica/snapshot.h"

namespace infera::gateway {
namespace json = boost::json;

std::optional<events::StreamSnapshot> ReplicaState::take_seed(const std::string& worker) {
  std::lock_guard lock(mu);
  if (std::chrono::steady_clock::now() > seeds_until) seeds.clear();  // too old to follow
  auto it = seeds.find(worker);
  if (it == seeds.end()) return std::nullopt;
  std::optional<events::StreamSnapshot> out = std::move(it->second);
  seeds.erase(it);
  return out;
}

std::string make_router_id() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "router");
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%08x", rd());
  return std::string(host) + "-" + std::to_string(getpid()) + "-" + suffix;
}

Status start_load_sharing(const config::ServerConfig& config, GatewayContext& g) {
  ReplicaState& r = g.replicas;
  Fleet* fleet = g.fleet.get();
  r.peers = std::make_unique<replica::PeerLoad>(
      replica::PeerLoad::Options{}, r.router_id, g.load, &g.predicted,
      [fleet](std::string_view worker) -> std::optional<kv::WorkerId> {
        const std::shared_ptr<const FleetView> view = fleet->view();
        const FleetMember* m = view->find(worker);
        if (m == nullptr) return std::nullopt;
        return m->slot;
      },
      g.clock);
  if (!g.bus) {
    INFERA_LOG(kInfo, "replica").msg("no NATS connection: this replica shares no load with others")
        .kv("router_id", r.router_id);
    return ok_status();
  }
  replica::LoadBus::Options bo;
  bo.ns = config.nats_namespace;
  bo.router_id = r.router_id;
  r.bus = std::make_unique<replica::LoadBus>(bo, *g.bus, *r.peers, [fleet](kv::WorkerId slot) {
    const std::shared_ptr<const FleetView> view = fleet->view();
    const FleetMember* m = view->by_slot(slot);
    return m == nullptr ? std::string() : m->info.id;
  });
  INFERA_RETURN_IF_ERROR(r.bus->start());
  g.router->set_load_listener(r.bus.get());
  INFERA_LOG(kInfo, "replica").msg("sharing load with router replicas").kv("router_id", r.router_id)
      .kv("subject", r.bus->subject());
  return ok_status();
}

namespace {

json::object outcomes_json(const replica::PeerLoad& peers) {
  json::object out;
  const auto counts = peers.outcomes();
  for (size_t i = 0; i < counts.size(); ++i) {
    out[replica::apply_outcome_name(static_cast<replica::ApplyOutcome>(i))] = counts[i];
  }
  return out;
}

json::object routers_json(const GatewayContext& g) {
  const ReplicaState& r = g.replicas;
  json::object sharing;
  sharing["enabled"] = r.bus != nullptr;
  if (r.bus) {
    const replica::LoadBusStats s = r.bus->stats();
    sharing["subject"] = r.bus->subject();
    sharing["published"] = s.published;
    sharing["publish_failed"] = s.publish_failed;
    sharing["received"] = s.received;
    sharing["malformed"] = s.malformed;
  }
  json::array peers;
  if (r.peers) {
    sharing["outcomes"] = outcomes_json(*r.peers);
    const replica::PeerDepartures left = r.peers->departures();
    sharing["peers_left"] = json::object{
        {"goodbye", left.goodbye}, {"silent", left.silent}, {"gone", left.gone}};
    const Nanos now = g.clock.now();
    for (const replica::PeerStats& p : r.peers->peers()) {
      peers.push_back(json::object{{"router_id", p.router_id},
                                   {"last_seq", p.last_seq},
                                   {"ops", p.ops},
                                   {"lost", p.lost},
                                   {"requests", p.requests},
                                   {"last_heard_s_ago", to_seconds(now - p.last_heard)}});
    }
  }
  json::object warm;
  {
    std::lock_guard lock(r.mu);
    warm = json::object{{"warm", r.warm.load()},       {"source", r.report.source},
                        {"workers", r.report.workers}, {"seeded", r.report.seeded},
                        {"blocks", r.report.blocks},   {"took_s", r.report.took_s},
                        {"note", r.report.note}};
  }
  warm["snapshots_served"] = r.snapshots_served.load();
  json::object membership{{"backend", "none"}};
  json::array members;
  if (r.membership) {
    const replica::MembershipHealth h = r.membership->health();
    membership = json::object{{"backend", h.backend},         {"describe", r.membership->describe()},
                              {"connected", h.connected},     {"last_error", h.last_error},
                              {"invalid_records", h.invalid_records}, {"resyncs", h.resyncs}};
    for (const replica::PeerRecord& p : r.membership->peers()) {
      members.push_back(json::object{{"router_id", p.router_id}, {"url", p.url}, {"ready", p.ready}});
    }
  }
  membership["members"] = std::move(members);
  return json::object{{"router_id", r.router_id},
                      {"namespace", g.config.nats_namespace},
                      {"load_sharing", std::move(sharing)},
                      {"warm_start", std::move(warm)},
                      {"membership", std::move(membership)},
                      {"peers", std::move(peers)}};
}

}  // namespace

Status start_membership(const config::ServerConfig& config, GatewayContext& g, uint16_t port) {
  ReplicaState& r = g.replicas;
  if (config.discovery_backend == config::DiscoveryBackend::kStatic && config.peers.empty()) {
    return ok_status();  // no sibling to look for
  }
  const discovery::EnvLookup env = discovery::process_env();
  INFERA_ASSIGN_OR_RETURN(r.membership,
                          replica::make_membership(config, *g.loop,
                                                   replica::self_identity(config, r.router_id, port, env),
                                                   env));
  // A sibling that left: its load goes now rather than after its silence.
  auto known = std::make_shared<std::set<std::string>>();
  replica::PeerLoad* peers = r.peers.get();
  const Status started = r.membership->start([known, peers](const std::vector<replica::PeerRecord>& list) {
    std::set<std::string> now;
    for (const replica::PeerRecord& p : list) {
      if (!p.router_id.empty()) now.insert(p.router_id);
    }
    for (const std::string& id : *known) {
      if (!now.contains(id) && peers->drop_peer(id)) {
        INFERA_LOG(kInfo, "replica").msg("a router replica left; its load is dropped").kv("router_id", id);
      }
    }
    *known = std::move(now);
  });
  if (!started.ok()) {
    INFERA_LOG(kWarn, "replica").msg("router membership is not up yet; it keeps trying")
        .kv("backend", r.membership->describe()).kv("error", started.message());
  }
  INFERA_LOG(kInfo, "replica").msg("router membership").kv("backend", r.membership->describe())
      .kv("router_id", r.router_id);
  return ok_status();
}

namespace {

constexpr auto kFirstListingWait = std::chrono::seconds(2);
constexpr auto kSnapshotTimeout = std::chrono::seconds(10);
constexpr size_t kMaxSnapshotBytes = size_t{1} << 30;
// A copy waits this long for its worker to join this replica's fleet.
constexpr auto kSeedLifetime = std::chrono::seconds(60);

replica::IndexSnapshot take_snapshot(const GatewayContext& g) {
  replica::IndexSnapshot snap;
  snap.router_id = g.replicas.router_id;
  snap.block_size = g.config.block_size;
  const std::shared_ptr<const FleetView> view = g.fleet->view();
  for (const FleetMember& m : view->members) {
    std::optional<events::StreamSnapshot> s = g.fleet->stream_snapshot(m);
    if (!s || s->stale) continue;  // nothing trustworthy to copy: the sibling replays instead
    snap.workers.push_back(replica::WorkerSnapshot{m.info.id, std::move(*s)});
  }
  return snap;
}

// The peers to ask, ready ones first, after the membership's first listing (or the wait).
net::awaitable<std::vector<replica::PeerRecord>> siblings(const replica::Membership& membership) {
  net::steady_timer timer(co_await net::this_coro::executor);
  const auto until = std::chrono::steady_clock::now() + kFirstListingWait;
  std::vector<replica::PeerRecord> peers = membership.peers();
  while (peers.empty() && std::chrono::steady_clock::now() < until) {
    timer.expires_after(std::chrono::milliseconds(50));
    co_await timer.async_wait(net::use_awaitable);
    peers = membership.peers();
  }
  std::stable_partition(peers.begin(), peers.end(), [](const auto& p) { return p.ready; });
  co_return peers;
}

// One sibling's snapshot, or why not.
net::awaitable<Result<replica::IndexSnapshot>> fetch_snapshot(GatewayContext& g, http::Client& client,
                                                               const std::string& url) {
  const Result<http::Endpoint> to = http::parse_endpoint(url);
  if (!to.ok()) co_return to.status();
  http::Request req;
  req.target = "/v1/admin/kv-snapshot";
  if (const auto token = g.admin_token.load(); !token->empty()) {
    req.headers.push_back({"Authorization", "Bearer " + *token});
  }
  auto got = co_await client.request(*to, std::move(req),
                                     std::chrono::steady_clock::now() + kSnapshotTimeout);
  if (!got.ok()) co_return got.status();
  if (got->status != 200) {
    co_return unavailable("answered " + std::to_string(got->status) + " (not ready, or no snapshot)");
  }
  Result<replica::IndexSnapshot> snap = replica::decode_snapshot(events::byte_span(got->body));
  if (snap.ok() && snap->block_size != g.config.block_size) {
    co_return failed_precondition("its block size " + std::to_string(snap->block_size) +
                                  " differs from ours");
  }
  co_return snap;
}

net::awaitable<void> warm_start(GatewayContext& g, std::function<void()> then) {
  const auto started = std::chrono::steady_clock::now();
  ReplicaState& r = g.replicas;
  WarmReport report;
  http::ClientOptions co;
  co.max_body_bytes = kMaxSnapshotBytes;
  co.response_timeout = kSnapshotTimeout;
  co.read_timeout = kSnapshotTimeout;
  http::Client client(co);
  const std::vector<replica::PeerRecord> peers = co_await siblings(*r.membership);
  if (peers.empty()) report.note = "no sibling replica found";
  for (const replica::PeerRecord& peer : peers) {
    Result<replica::IndexSnapshot> snap = co_await fetch_snapshot(g, client, peer.url);
    if (!snap.ok()) {
      report.note += (report.note.empty() ? "" : "; ") + peer.url + ": " + snap.status().message();
      continue;
    }
    report.source = peer.url;
    report.workers = snap->workers.size();
    std::lock_guard lock(r.mu);
    for (replica::WorkerSnapshot& w : snap->workers) {
      report.blocks += w.stream.dump.gpu.size();
      r.seeds.insert_or_assign(std::move(w.name), std::move(w.stream));
    }
    r.seeds_until = std::chrono::steady_clock::now() + kSeedLifetime;
    break;
  }
  report.took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFERA_LOG(kInfo, "replica").msg(report.source.empty() ? "warm start: no sibling's copy; "
                                                            "mirrors rebuild from replay"
                                                          : "warm start: index copied from a sibling")
      .kv("source", report.source).kv("workers", report.workers).kv("blocks", report.blocks)
      .kv("took_s", report.took_s).kv("note", report.note);
  {
    std::lock_guard lock(r.mu);
    r.report = std::move(report);
  }
  then();  // discovery: the workers join, and their streams take their copies
  r.warm.store(true);
}

}  // namespace

void start_warm_start(GatewayContext& g, std::function<void()> then) {
  if (!g.replicas.membership) {
    g.replicas.warm.store(true);
    then();
    return;
  }
  net::co_spawn(g.loop->context(), warm_start(g, std::move(then)), net::detached);
}

void add_replica_metrics(const GatewayContext& g, metrics::Registry& out) {
  const ReplicaState& r = g.replicas;
  out.gauge("infera_router_warm", "1 once this replica's warm start is over (/readyz may pass).")
      .set(r.warm.load() ? 1 : 0);
  if (!r.peers) return;
  uint64_t lost = 0;
  const std::vector<replica::PeerStats> peers = r.peers->peers();
  for (const replica::PeerStats& p : peers) lost += p.lost;
  out.gauge("infera_router_peers", "Sibling replicas heard on the bus (not silent for 5 s).")
      .set(static_cast<double>(peers.size()));
  out.counter("infera_router_load_ops_lost_total",
              "Siblings' load ops the bus lost (gaps in their sequence numbers).")
      .inc(static_cast<double>(lost));
  const auto outcomes = r.peers->outcomes();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    out.counter("infera_router_load_ops_received_total",
                "Load ops received on the bus, by what became of them.",
                {{"outcome", std::string(replica::apply_outcome_name(static_cast<replica::ApplyOutcome>(i)))}})
        .inc(static_cast<double>(outcomes[i]));
  }
  const replica::PeerDepartures left = r.peers->departures();
  for (const auto& [reason, n] : {std::pair{"goodbye", left.goodbye}, std::pair{"silent", left.silent},
                                  std::pair{"gone", left.gone}}) {
    out.counter("infera_router_peers_left_total",
                "Sibling replicas dropped with their load, by why: said goodbye (stopped), fell "
                "silent for 5 s (killed, cut off), or gone from the membership.",
                {{"reason", reason}})
        .inc(static_cast<double>(n));
  }
  // Without a bus nothing is shared: the bus's counters stay 0 (and are still there to alert on).
  const replica::LoadBusStats s = r.bus ? r.bus->stats() : replica::LoadBusStats{};
  out.counter("infera_router_load_ops_published_total", "This replica's load ops sent to the bus.")
      .inc(static_cast<double>(s.published));
  out.counter("infera_router_load_ops_publish_failed_total",
              "Load ops the bus refused (away, or its buffer full): not shared.")
      .inc(static_cast<double>(s.publish_failed));
  out.counter("infera_router_load_ops_malformed_total",
              "Messages on the load subject that were not version-1 load ops (ignored).")
      .inc(static_cast<double>(s.malformed));
}

void add_replica_routes(GatewayContext& g, http::Routes& routes) {
  routes.add(http::Method::kGet, "/v1/admin/kv-snapshot",
             [&g](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
               if (auto denied = check_admin(g, r)) co_return std::move(*denied);
               if (!g.replicas.warm.load()) {
                 co_return http::error_response(
                     unavailable("this router replica is warming up itself; ask another"));
               }
               http::Response resp;
               resp.headers.push_back({"Content-Type", "application/x-msgpack"});
               resp.body = replica::encode_snapshot(take_snapshot(g));
               g.replicas.snapshots_served.fetch_add(1, std::memory_order_relaxed);
               co_return resp;
             });
  routes.add(http::Method::kGet, "/v1/admin/routers",
             [&g](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
               if (auto denied = check_admin(g, r)) co_return std::move(*denied);
               co_return http::Response::json(200, json::serialize(routers_json(g)));
             });
}

}  // namespace infera::gateway
