// `infera server --discovery-backend k8s` end to end: the real binary against the Kubernetes
// API stand-in (tests/support/k8s, over TLS with its test CA and a bearer token), with real
// `infera engine mock` processes as the pods' containers. Pods are created with kubectl from the
// example manifest deploy/k8s/examples/mock-worker-pod.yaml, annotated with the engines' ports
// by kubectl, and made Ready or not through the status subresource, as a kubelet would. Prints
// KUBE_* lines with the times the targets name and FAULT_ROW lines (docs/reliability.md).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/e2e/e2e_support.h"
#include "tests/support/kube_apiserver.h"

namespace infera::e2e {
namespace {

using infera::testing::KubeApiServer;

// A mock engine and the pod that stands for it.
struct PodEngine {
  std::string pod;
  std::unique_ptr<InferaProcess> engine;
};

std::string port_of(const std::string& endpoint) { return endpoint.substr(endpoint.rfind(':') + 1); }

class KubeE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = KubeApiServer::start(0.5);
    ASSERT_TRUE(s.ok()) << s.status().message();
    api_ = std::make_unique<KubeApiServer>(std::move(*s));
  }

  // Creates the example pod under `name`, pointed at `engine`'s ports, and makes it Ready.
  void add_pod(PodEngine& p, bool make_ready = true) {
    std::string manifest = read_text(fs::path(INFERA_SOURCE_DIR) / "deploy/k8s/examples/mock-worker-pod.yaml");
    const std::string from = "name: mock-worker-0";
    const auto at = manifest.find(from);
    ASSERT_NE(at, std::string::npos) << "the example pod's name moved";
    manifest.replace(at, from.size(), "name: " + p.pod);
    const std::string path = (api_->dir() / (p.pod + ".yaml")).string();
    std::ofstream(path) << manifest;
    std::string out;
    ASSERT_EQ(api_->kubectl({"create", "-f", path}, &out), 0) << out;
    ASSERT_EQ(api_->kubectl({"annotate", "pod", p.pod, "--overwrite",
                             "infera.ai/port=" + std::to_string(p.engine->port()),
                             "infera.ai/kv-events-port=" + port_of(p.engine->kv_endpoint()),
                             "infera.ai/kv-replay-port=" + port_of(p.engine->replay_endpoint())},
                            &out),
              0)
        << out;
    if (make_ready) {
      ASSERT_EQ(api_->set_ready(p.pod, true), 200);
    }
  }

  std::unique_ptr<InferaProcess> start_k8s_server(const std::string& name,
                                                  const std::string& kubeconfig = "kubeconfig") {
    return start_server(name, {"--router-policy", "kv-aware", "--discovery-backend", "k8s",
                               "--kubeconfig", api_->kubeconfig(kubeconfig), "--k8s-selector",
                               "app.kubernetes.io/component=infera-worker"});
  }

  std::unique_ptr<KubeApiServer> api_;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TEST_F(KubeE2eTest, ExamplePodsJoinWhenReadyAndTheDocumentedCheckPasses) {
  PodEngine a{"mock-worker-a", start_engine("k8s_a", {"--speedup-ratio", "1"})};
  PodEngine b{"mock-worker-b", start_engine("k8s_b", {"--speedup-ratio", "1"})};
  ASSERT_TRUE(a.engine->ready() && b.engine->ready());
  add_pod(a);
  add_pod(b, false);  // Pending: not routable yet
  auto server = start_k8s_server("k8s_server");
  ASSERT_TRUE(server->ready());
  const uint16_t s = server->port();
  ASSERT_TRUE(eventually([&] { return fleet_is(s, {a.engine->id()}); })) << server->log();

  const auto t_ready = std::chrono::steady_clock::now();
  ASSERT_EQ(api_->set_ready(b.pod, true), 200);
  ASSERT_TRUE(eventually([&] {
    auto t = workers(s);
    return t && t->count(b.engine->id()) && t->at(b.engine->id()).state == "healthy";
  }));
  std::printf("KUBE_READY_TO_ROUTABLE_MS %.0f\n", ms_since(t_ready));
  ASSERT_TRUE(eventually([&] { return fleet_is(s, {a.engine->id(), b.engine->id()}); }));

  // The documented check on the discovered fleet: a repeated long prefix goes to the worker
  // that caches it.
  const std::vector<uint32_t> prefix = token_ids(7, 2048);
  const Reply first = post(s, "/v1/completions", completion_body(prefix, 4, true));
  ASSERT_EQ(first.status, 200) << first.body;
  std::string owner;
  ASSERT_TRUE(eventually([&] {
    for (const std::string& id : {a.engine->id(), b.engine->id()}) {
      if (block_count(s, id) == 128) owner = id;
    }
    return !owner.empty() && fleet_is(s, {a.engine->id(), b.engine->id()});
  }));
  const Reply second = post(s, "/v1/completions", completion_body(concat(prefix, token_ids(8, 32)), 4, true));
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_GE(int_at(usage_of(second), "prompt_tokens_details/cached_tokens"), 2048 - 16);
  auto table = workers(s);
  ASSERT_TRUE(table.has_value());
  EXPECT_EQ(table->at(owner).requests, 2);

  // NotReady leaves routing.
  const auto t_not_ready = std::chrono::steady_clock::now();
  ASSERT_EQ(api_->set_ready(b.pod, false), 200);
  ASSERT_TRUE(eventually([&] {
    auto t = workers(s);
    return t && !t->count(b.engine->id());
  }));
  std::printf("KUBE_NOT_READY_TO_GONE_MS %.0f\n", ms_since(t_not_ready));
  const Reply r = get(s, "/v1/admin/workers");
  EXPECT_EQ(string_at(parse_json(r.body), "discovery/backend").rfind("k8s https://127.0.0.1:", 0), 0u) << r.body;
  EXPECT_NE(r.body.find("\"connected\":true"), std::string::npos) << r.body;
}

TEST_F(KubeE2eTest, FaultsLoseNoRequest) {
  PodEngine a{"mock-worker-a", start_engine("k8s_fa", {"--speedup-ratio", "1"})};
  PodEngine b{"mock-worker-b", start_engine("k8s_fb", {"--speedup-ratio", "1"})};
  ASSERT_TRUE(a.engine->ready() && b.engine->ready());
  add_pod(a);
  add_pod(b);
  auto server = start_k8s_server("k8s_fault_server", "kubeconfig-files");  // tokenFile
  ASSERT_TRUE(server->ready());
  const uint16_t s = server->port();
  ASSERT_TRUE(eventually([&] { return fleet_is(s, {a.engine->id(), b.engine->id()}); })) << server->log();

  // Steady load for the whole test: every request must succeed.
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0}, failed{0};
  std::thread load([&] {
    for (uint64_t i = 0; !stop.load(); ++i) {
      const Reply rep = post(s, "/v1/completions", completion_body(token_ids(100 + i % 8, 256), 8, i % 2 == 0));
      ++sent;
      if (rep.status != 200 || !rep.complete) ++failed;
    }
  });
  // One reliability-table row per fault: the requests sent since the previous row. Any
  // request that did not complete counts as lost (the test then fails).
  int sent_before = 0, failed_before = 0;
  auto row = [&](const char* fault, const std::string& what) {
    const int floor = sent.load() + 5;  // a few requests after the fault's effect, too
    ASSERT_TRUE(eventually([&] { return sent.load() >= floor; }));
    const int n = sent.load() - sent_before, lost = failed.load() - failed_before;
    sent_before += n;
    failed_before += lost;
    std::printf("FAULT_ROW | %s (%s) | %d | %d | | 0 | %d | |\n", fault, what.c_str(), n, n - lost, lost);
  };

  // 1. The API server goes away: the fleet stays, requests keep succeeding; it comes back.
  api_->kill();
  ASSERT_TRUE(eventually([&] {
    return metric_sum(get(s, "/metrics").body, "infera_discovery_connected") == 0;
  }));
  const int before = sent.load();
  ASSERT_TRUE(eventually([&] { return sent.load() >= before + 5; }));
  EXPECT_TRUE(fleet_is(s, {a.engine->id(), b.engine->id()}) || workers(s)->size() == 2);
  ASSERT_TRUE(api_->restart().ok());
  ASSERT_TRUE(eventually([&] {
    return metric_sum(get(s, "/metrics").body, "infera_discovery_connected") == 1;
  }));
  row("k8s API server down, then back", "last known fleet kept; watch resumed");

  // 2. The watch expires (410): re-list.
  const double resyncs = metric_sum(get(s, "/metrics").body, "infera_discovery_resyncs_total");
  ASSERT_TRUE(api_->control("expire"));
  ASSERT_TRUE(eventually([&] {
    return metric_sum(get(s, "/metrics").body, "infera_discovery_resyncs_total") > resyncs;
  }));
  row("k8s watch expired (410)", "re-listed");

  // 3. Garbage on the watch stream: skipped and counted.
  ASSERT_TRUE(api_->control("inject", R"({"line":"{\"type\":\"MODIFIED\",\"object\":{\"metadata\":"})"));
  ASSERT_TRUE(eventually([&] {
    return metric_sum(get(s, "/metrics").body, "infera_discovery_invalid_records_total") >= 1;
  }));
  row("k8s malformed watch event", "skipped, counted");

  // 4. A pod deleted mid-stream: its stream completes, then it leaves the fleet.
  std::atomic<bool> streamed{false};
  Reply long_stream;
  std::thread streamer([&] {
    long_stream = post(s, "/v1/completions", completion_body(token_ids(999, 64), 200, true));
    streamed = true;
  });
  std::string busy;
  ASSERT_TRUE(eventually([&] {
    auto t = workers(s);
    if (!t) return false;
    for (const auto& [id, w] : *t) {
      if (w.inflight > 0 && (id == a.engine->id() || id == b.engine->id())) busy = id;
    }
    return !busy.empty();
  }));
  const std::string pod = busy == a.engine->id() ? a.pod : b.pod;
  std::string out;
  ASSERT_EQ(api_->kubectl({"delete", "pod", pod, "--grace-period=0", "--force"}, &out), 0) << out;
  ASSERT_TRUE(eventually([&] { auto t = workers(s); return t && !t->count(busy); }));
  streamer.join();
  EXPECT_TRUE(streamed.load());
  EXPECT_EQ(long_stream.status, 200);
  EXPECT_TRUE(long_stream.complete) << long_stream.body.substr(0, 300);
  row("k8s pod deleted mid-stream", "stream completed; worker left routing");

  // 5. The token is rotated (the file rewritten, the old one refused) and the watches dropped:
  // the next connection reads the new token, and the deleted pod's return is seen.
  ASSERT_TRUE(api_->control("tokens", R"({"tokens":["rotated-e2e-token"]})"));
  ASSERT_TRUE(api_->control("drop-watches"));
  PodEngine& gone = busy == a.engine->id() ? a : b;
  add_pod(gone);
  ASSERT_TRUE(eventually([&] { auto t = workers(s); return t && t->count(busy) == 1; })) << server->log();
  EXPECT_EQ(metric_sum(get(s, "/metrics").body, "infera_discovery_connected"), 1);
  row("k8s token rotated (file re-read)", "next connection authenticated");

  stop = true;
  load.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(sent.load(), 10);
}

// The role of each worker in /v1/admin/workers, by id.
std::map<std::string, std::string> roles(uint16_t server) {
  std::map<std::string, std::string> out;
  const Reply r = get(server, "/v1/admin/workers");
  const json::value v = parse_json(r.body);
  if (const json::value* list = find(v, "workers"); list && list->is_array()) {
    for (const json::value& w : list->get_array()) out[string_at(w, "worker_id")] = string_at(w, "role");
  }
  return out;
}

// --k8s-namespace with --k8s-prefill-selector / --k8s-decode-selector, and
// --k8s-inference-pool, read by the binary: only the pods they name join, with their roles.
TEST_F(KubeE2eTest, NamespaceRoleSelectorsAndInferencePoolFlagsChooseThePods) {
  auto pod = [](const std::string& name, const std::string& labels, int port) {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  labels:\n" + labels +
           "  annotations:\n    infera.ai/port: \"" + std::to_string(port) + "\"\nspec:\n  containers:\n"
           "  - name: engine\n    image: infera:latest\n";
  };
  auto create = [&](const std::string& ns, const std::string& name, const std::string& yaml) {
    const std::string path = (api_->dir() / (ns + "-" + name + ".yaml")).string();
    std::ofstream(path) << yaml;
    std::string out;
    ASSERT_EQ(api_->kubectl({"-n", ns, "create", "-f", path}, &out), 0) << out;
    ASSERT_EQ(api_->set_ready(name, true, "127.0.0.1", ns), 200);
  };
  create("ml", "p0", pod("p0", "    tier: prefill\n    pool: a\n", 31001));
  create("ml", "d0", pod("d0", "    tier: decode\n", 31002));
  create("ml", "x0", pod("x0", "    tier: other\n    pool: a\n", 31003));
  create("default", "p1", pod("p1", "    tier: prefill\n", 31004));  // another namespace
  auto split = start_server("k8s_split", {"--discovery-backend", "k8s", "--kubeconfig", api_->kubeconfig(),
                                          "--k8s-namespace", "ml", "--k8s-prefill-selector", "tier=prefill",
                                          "--k8s-decode-selector", "tier=decode"});
  ASSERT_TRUE(split->ready());
  const std::map<std::string, std::string> want = {{"127.0.0.1:31001", "prefill"}, {"127.0.0.1:31002", "decode"}};
  ASSERT_TRUE(eventually([&] { return roles(split->port()) == want; })) << get(split->port(), "/v1/admin/workers").body;

  const std::string pool = (api_->dir() / "pool.yaml").string();
  std::ofstream(pool) << "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata:\n"
                         "  name: pool-a\nspec:\n  selector:\n    matchLabels:\n      pool: a\n"
                         "  targetPorts:\n  - number: 8000\n";
  std::string out;
  ASSERT_EQ(api_->kubectl({"-n", "ml", "apply", "-f", pool}, &out), 0) << out;
  auto pooled = start_server("k8s_pool", {"--discovery-backend", "k8s", "--kubeconfig", api_->kubeconfig(),
                                          "--k8s-namespace", "ml", "--k8s-inference-pool", "pool-a"});
  ASSERT_TRUE(pooled->ready());
  const std::map<std::string, std::string> pool_want = {{"127.0.0.1:31001", "both"}, {"127.0.0.1:31003", "both"}};
  ASSERT_TRUE(eventually([&] { return roles(pooled->port()) == pool_want; })) << get(pooled->port(), "/v1/admin/workers").body;
}

TEST_F(KubeE2eTest, BadKubeconfigIsAStartupErrorNamingIt) {
  const std::string bad = (api_->dir() / "bad-kubeconfig").string();
  std::ofstream(bad) << "current-context: nowhere\n";
  const std::string log = (api_->dir() / "bad.log").string();
  auto code = run_process({kBinary, "server", "--host", "127.0.0.1", "--port", "0", "--discovery-backend",
                           "k8s", "--kubeconfig", bad, "--k8s-selector", "app=x"},
                          Ms(20'000), log);
  ASSERT_TRUE(code.ok()) << code.status().message();
  EXPECT_NE(*code, 0);
  EXPECT_NE(read_text(log).find("context 'nowhere' not found"), std::string::npos) << read_text(log);
}

}  // namespace
}  // namespace infera::e2e
