// Membership, one binary, three CTest entries (CMakeLists.txt): MembershipTest (unit: the
// --peer flag, static peers, records, the advertised URL), EtcdMembershipTest (integration, a
// real etcd on free ports) and KubeMembershipTest (integration, the Kubernetes API stand-in).
#include "infera/replica/membership.h"

#include <gtest/gtest.h>

#include <fstream>

#include "infera/config/server_config.h"
#include "infera/discovery/etcd.h"
#include "infera/discovery/kube_api.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/http/net.h"
#include "tests/support/etcd_process.h"
#include "tests/support/kube_apiserver.h"

namespace infera::replica {
namespace {

using namespace std::chrono_literals;
using infera::testing::eventually;

discovery::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::vector<std::string> urls(const std::vector<PeerRecord>& peers) {
  std::vector<std::string> out;
  for (const PeerRecord& p : peers) out.push_back(p.url);
  return out;
}

Result<config::ServerConfig> parse(std::vector<std::string> args) {
  bool help = false;
  std::string text;
  return config::parse_server_flags(args, &help, &text, config::ConfigSources{});
}

// ---------------------------------------------------------------------------------------------
// Unit

TEST(MembershipTest, PeerFlagIsRepeatableAndValidated) {
  auto ok = parse({"--worker", "http://127.0.0.1:9000", "--peer", "http://10.0.0.2:8000", "--peer",
                   "https://[fd00::3]:8443/"});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->peers,
            (std::vector<std::string>{"http://10.0.0.2:8000", "https://[fd00::3]:8443/"}));
  for (const char* bad : {"10.0.0.2:8000", "http://10.0.0.2", "http://10.0.0.2:8000/v1",
                          "ftp://a:1", "http://a:99999", "http://user@a:1", "http://a b:1"}) {
    auto r = parse({"--worker", "http://127.0.0.1:9000", "--peer", bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--peer"), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(*config::parse_peer_url("https://[fd00::3]:8443/"), "https://[fd00::3]:8443");
}

TEST(MembershipTest, StaticPeersAreTheFlagsLessThisReplica) {
  SelfIdentity self{"me", "http://10.0.0.1:8000", ""};
  StaticMembership m({"http://10.0.0.3:8000/", "http://10.0.0.1:8000", "http://10.0.0.2:8000",
                      "http://10.0.0.3:8000"},
                     self);
  std::vector<std::vector<PeerRecord>> heard;
  ASSERT_TRUE(m.start([&](const std::vector<PeerRecord>& p) { heard.push_back(p); }).ok());
  const std::vector<PeerRecord> want = {{"", "http://10.0.0.2:8000", true},
                                        {"", "http://10.0.0.3:8000", true}};
  EXPECT_EQ(m.peers(), want);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0], want);
  EXPECT_EQ(m.health().backend, "static");
  EXPECT_TRUE(m.health().connected);
  m.stop();
}

TEST(MembershipTest, StaticBadUrlFailsStart) {
  StaticMembership m({"http://10.0.0.2:8000", "10.0.0.3:8000"}, {});
  const Status s = m.start();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("10.0.0.3:8000"), std::string::npos) << s.message();
  EXPECT_TRUE(m.peers().empty());
}

TEST(MembershipTest, RouterRecordsRoundTripAndBadOnesAreErrors) {
  const PeerRecord r{"router-a", "http://10.0.0.2:8000", true};
  auto back = parse_router_record(router_record_json(r), "ignored");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, r);
  auto fallback = parse_router_record(R"({"url":"http://10.0.0.2:8000/"})", "from-key");
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ(fallback->router_id, "from-key");
  EXPECT_EQ(fallback->url, "http://10.0.0.2:8000");
  for (const char* bad :
       {"not json", "[]", R"({"router_id":"a"})", R"({"router_id":"a","url":7})",
        R"({"router_id":"a","url":"10.0.0.2:8000"})", R"({"router_id":5,"url":"http://a:1"})",
        R"({"router_id":"a/b","url":"http://a:1"})"}) {
    EXPECT_FALSE(parse_router_record(bad, "k").ok()) << bad;
  }
}

TEST(MembershipTest, AdvertisedUrlPrefersHostThenPodIpThenAnInterface) {
  EXPECT_EQ(advertised_url("10.1.2.3", 8000, env_of({{"POD_IP", "10.9.9.9"}})),
            "http://10.1.2.3:8000");
  EXPECT_EQ(advertised_url("0.0.0.0", 8000, env_of({{"POD_IP", "10.9.9.9"}})),
            "http://10.9.9.9:8000");
  EXPECT_EQ(advertised_url("::", 8000, env_of({{"POD_IP", "fd00::9"}})), "http://[fd00::9]:8000");
  EXPECT_EQ(advertised_url("", 8001, env_of({{"POD_IP", "10.9.9.9"}})), "http://10.9.9.9:8001");
  const std::string guessed = advertised_url("0.0.0.0", 8000, env_of({}));
  EXPECT_TRUE(config::parse_peer_url(guessed).ok()) << guessed;
  EXPECT_EQ(guessed.find("0.0.0.0"), std::string::npos) << guessed;
  auto config = parse({"--worker", "http://127.0.0.1:9000", "--host", "127.0.0.1"});
  ASSERT_TRUE(config.ok());
  const SelfIdentity self = self_identity(*config, "r1", 8123, env_of({{"HOSTNAME", "pod-1"}}));
  EXPECT_EQ(self.url, "http://127.0.0.1:8123");
  EXPECT_EQ(self.pod_name, "pod-1");
  EXPECT_EQ(self.router_id, "r1");
}

TEST(MembershipTest, FactoryPicksStaticForPeersOrStaticDiscovery) {
  http::EventLoop loop(1);
  auto config = parse({"--worker", "http://127.0.0.1:9000", "--peer", "http://10.0.0.2:8000"});
  ASSERT_TRUE(config.ok());
  auto m = make_membership(*config, loop, {"me", "http://10.0.0.1:8000", ""}, env_of({}));
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_TRUE((*m)->start().ok());
  EXPECT_EQ(urls((*m)->peers()), std::vector<std::string>{"http://10.0.0.2:8000"});
  auto etcd = parse({"--etcd-endpoint", "127.0.0.1:2379"});
  ASSERT_TRUE(etcd.ok()) << etcd.status().message();
  auto e = make_membership(*etcd, loop, {"me", "http://10.0.0.1:8000", ""}, env_of({}));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->health().backend, "etcd");
}

// ---------------------------------------------------------------------------------------------
// etcd

class EtcdMembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = infera::testing::EtcdProcess::start();
    ASSERT_TRUE(e.ok()) << e.status().message();
    etcd_ = std::make_unique<infera::testing::EtcdProcess>(std::move(*e));
  }

  std::unique_ptr<EtcdMembership> member(const std::string& id, int port) {
    EtcdMembershipOptions o;
    o.ttl = 10s;  // longer than the waits below: a record that leaves was deleted, not expired
    o.retry_max = 500ms;
    return std::make_unique<EtcdMembership>(
        loop_, etcd_->endpoint(), SelfIdentity{id, "http://127.0.0.1:" + std::to_string(port), ""},
        o);
  }

  // One EtcdClient call, run to completion on the loop.
  template <typename T>
  T run(std::function<net::awaitable<T>(discovery::EtcdClient&)> fn) {
    std::promise<T> result;
    net::co_spawn(
        loop_.context(),
        [&]() -> net::awaitable<void> {
          discovery::EtcdClient c(client_, *http::parse_endpoint(etcd_->endpoint()));
          result.set_value(co_await fn(c));
        },
        net::detached);
    return result.get_future().get();
  }

  http::EventLoop loop_{1};
  http::Client client_;
  std::unique_ptr<infera::testing::EtcdProcess> etcd_;
};

TEST_F(EtcdMembershipTest, TwoReplicasSeeEachOtherAndAStoppedOneLeaves) {
  auto a = member("router-a", 18001);
  auto b = member("router-b", 18002);
  ASSERT_TRUE(a->start().ok());
  ASSERT_TRUE(b->start().ok());
  const std::vector<PeerRecord> want_a = {{"router-b", "http://127.0.0.1:18002", true}};
  const std::vector<PeerRecord> want_b = {{"router-a", "http://127.0.0.1:18001", true}};
  ASSERT_TRUE(eventually([&] { return a->peers() == want_a && b->peers() == want_b; }));
  // The record itself: the documented key and JSON.
  auto range = run<Result<discovery::EtcdClient::Range>>(
      [](discovery::EtcdClient& c) { return c.range_prefix("infera/routers/"); });
  ASSERT_TRUE(range.ok());
  ASSERT_EQ(range->kvs.size(), 2u);
  EXPECT_EQ(range->kvs[0].key, "infera/routers/router-a");
  EXPECT_EQ(range->kvs[0].value, R"({"router_id":"router-a","url":"http://127.0.0.1:18001"})");
  EXPECT_TRUE(a->health().connected);
  EXPECT_EQ(a->health().backend, "etcd");
  b->stop();  // deletes its record
  ASSERT_TRUE(eventually([&] { return a->peers().empty(); }, 3s));
  a->stop();
}

TEST_F(EtcdMembershipTest, ACrashedReplicaLeavesWhenItsLeaseRunsOut) {
  auto a = member("router-a", 18011);
  ASSERT_TRUE(a->start().ok());
  const std::string record = router_record_json({"router-dead", "http://127.0.0.1:18012", true});
  // A record under a lease nobody keeps alive: a replica that died without stop().
  ASSERT_TRUE(run<Status>([&](discovery::EtcdClient& c) -> net::awaitable<Status> {
                auto lease = co_await c.grant_lease(1s);
                if (!lease.ok()) co_return lease.status();
                co_return co_await c.put("infera/routers/router-dead", record, *lease);
              }).ok());
  ASSERT_TRUE(eventually([&] { return a->peers().size() == 1; }));
  EXPECT_TRUE(eventually([&] { return a->peers().empty(); }, 10s));
  a->stop();
}

TEST_F(EtcdMembershipTest, GarbageRecordsAreSkippedAndCounted) {
  ASSERT_TRUE(run<Status>([](discovery::EtcdClient& c) {
                return c.put("infera/routers/garbage", "not json");
              }).ok());
  auto a = member("router-a", 18021);
  auto b = member("router-b", 18022);
  ASSERT_TRUE(a->start().ok());
  ASSERT_TRUE(b->start().ok());
  ASSERT_TRUE(eventually([&] { return a->peers().size() == 1; }));
  EXPECT_EQ(a->peers()[0].router_id, "router-b");
  EXPECT_EQ(a->health().invalid_records, 1u);
  EXPECT_NE(a->health().last_error.find("infera/routers/garbage"), std::string::npos)
      << a->health().last_error;
  // One arriving by the watch too.
  ASSERT_TRUE(run<Status>([](discovery::EtcdClient& c) {
                return c.put("infera/routers/bad-url", R"({"router_id":"x","url":"nowhere"})");
              }).ok());
  ASSERT_TRUE(eventually([&] { return a->health().invalid_records == 2; }));
  EXPECT_EQ(a->peers().size(), 1u);
  b->stop();
  a->stop();
}

TEST_F(EtcdMembershipTest, BadRouterIdIsAStartError) {
  auto a = member("has/slash", 18031);
  EXPECT_EQ(a->start().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Kubernetes

std::string router_pod(const std::string& name, const std::string& ports,
                       const std::string& annotations = "",
                       const std::string& component = "infera-router") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\n  labels:\n    app.kubernetes.io/component: " + component + "\n" +
         (annotations.empty() ? "" : "  annotations:\n" + annotations) +
         "spec:\n  containers:\n  - name: router\n    image: infera:latest\n" +
         (ports.empty() ? "" : "    ports:\n" + ports);
}

class KubeMembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = infera::testing::KubeApiServer::start(0.3);
    ASSERT_TRUE(s.ok()) << s.status().message();
    api_server_ = std::make_unique<infera::testing::KubeApiServer>(std::move(*s));
  }
  void TearDown() override {
    if (membership_) membership_->stop();
  }

  void start(SelfIdentity self) {
    auto config = discovery::load_kubeconfig(api_server_->kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status().message();
    discovery::KubeApiOptions ao;
    ao.read_timeout = 5s;
    auto api = discovery::KubeApi::create(*config, ao);
    ASSERT_TRUE(api.ok()) << api.status().message();
    KubeMembershipOptions o;
    o.retry_min = 50ms;
    o.retry_max = 400ms;
    membership_ = std::make_unique<KubeMembership>(loop_, std::move(*api), std::move(self), o);
    ASSERT_TRUE(membership_->start().ok());
  }
  void create(const std::string& manifest) {
    const std::string path = (api_server_->dir() / "manifest.yaml").string();
    std::ofstream(path) << manifest;
    std::string out;
    ASSERT_EQ(api_server_->kubectl({"create", "-f", path}, &out), 0) << out;
  }
  void ready(const std::string& name, const std::string& ip, bool is_ready = true) {
    ASSERT_EQ(api_server_->set_ready(name, is_ready, ip), 200);
  }

  std::unique_ptr<infera::testing::KubeApiServer> api_server_;
  http::EventLoop loop_{1};
  std::unique_ptr<KubeMembership> membership_;
};

const std::string kHttpSecond =
    "    - name: metrics\n      containerPort: 9090\n    - name: http\n      containerPort: 8000\n";
const std::string kOnlyFirst = "    - name: api\n      containerPort: 7000\n";

TEST_F(KubeMembershipTest, RouterPodsArePeersWithTheirReadiness) {
  create(router_pod("r-annotated", kHttpSecond, "    infera.ai/port: \"8100\"\n"));
  create(router_pod("r-named", kHttpSecond));
  create(router_pod("r-first", kOnlyFirst));
  create(router_pod("r-not-ready", kHttpSecond));
  create(router_pod("r-no-ip", kHttpSecond));  // Pending: never given an IP
  create(router_pod("r-self", kHttpSecond));
  create(router_pod("w-worker", kHttpSecond, "", "infera-worker"));
  ready("r-annotated", "10.0.0.1");
  ready("r-named", "10.0.0.2");
  ready("r-first", "10.0.0.3");
  ready("r-not-ready", "10.0.0.4", false);
  ready("r-self", "10.0.0.5");
  ready("w-worker", "10.0.0.6");
  start({"", "http://10.0.0.99:8000", "r-self"});
  const std::vector<PeerRecord> want = {{"", "http://10.0.0.1:8100", true},
                                        {"", "http://10.0.0.2:8000", true},
                                        {"", "http://10.0.0.3:7000", true},
                                        {"", "http://10.0.0.4:8000", false}};
  ASSERT_TRUE(eventually([&] { return membership_->peers() == want; }))
      << ::testing::PrintToString(urls(membership_->peers()));
  const MembershipHealth h = membership_->health();
  EXPECT_EQ(h.backend, "k8s");
  EXPECT_TRUE(h.connected);
  EXPECT_EQ(h.invalid_records, 0u);
}

TEST_F(KubeMembershipTest, WatchEventsAddChangeAndRemovePeers) {
  create(router_pod("r0", kHttpSecond));
  ready("r0", "10.0.1.1");
  // This replica is excluded by its URL too (no pod name given).
  create(router_pod("r-me", kHttpSecond));
  ready("r-me", "10.0.1.9");
  start({"", "http://10.0.1.9:8000", ""});
  ASSERT_TRUE(eventually([&] {
    return urls(membership_->peers()) == std::vector<std::string>{"http://10.0.1.1:8000"};
  }));
  create(router_pod("r1", kHttpSecond));
  ready("r1", "10.0.1.2");
  ASSERT_TRUE(eventually([&] { return membership_->peers().size() == 2; }));
  ready("r1", "10.0.1.2", false);
  ASSERT_TRUE(eventually([&] {
    const auto p = membership_->peers();
    return p.size() == 2 && p[1].url == "http://10.0.1.2:8000" && !p[1].ready;
  }));
  std::string out;
  ASSERT_EQ(api_server_->kubectl({"delete", "pod", "r0", "--grace-period=0", "--force"}, &out), 0)
      << out;
  ASSERT_TRUE(eventually([&] {
    const auto p = membership_->peers();
    return p.size() == 1 && p[0].url == "http://10.0.1.2:8000";
  }));
  // A pod with a bad port annotation is skipped and counted.
  create(router_pod("r-bad", kHttpSecond, "    infera.ai/port: \"http\"\n"));
  ready("r-bad", "10.0.1.3");
  ASSERT_TRUE(eventually([&] { return membership_->health().invalid_records >= 1; }));
  EXPECT_EQ(membership_->peers().size(), 1u);
}

}  // namespace
}  // namespace infera::replica
