// KubeWorkerSource against the Kubernetes API stand-in over TLS: pods created with kubectl from
// manifests, made Ready or not through the status subresource (the kubelet's part), deleted;
// faults from the stand-in's control endpoints (watch expired, watches dropped, tokens
// rotated, garbage lines) and from killing it. The fleet is what the source last delivered.
#include "infera/discovery/kube_source.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <mutex>

#include "tests/support/kube_apiserver.h"

namespace infera::discovery {
namespace {

using testing_support = infera::testing::KubeApiServer;  // the stand-in
using namespace std::chrono_literals;

// The fleet as delivered, and a wait for a condition on it.
class FleetProbe {
 public:
  WorkerSource::Listener listener() {
    return [this](WorkerSetPtr set) {
      std::lock_guard lock(mu_);
      latest_ = std::move(set);
      ++deliveries_;
      cv_.notify_all();
    };
  }
  template <class Pred>
  bool wait(Pred pred, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return latest_ && pred(*latest_); });
  }
  WorkerSet latest() {
    std::lock_guard lock(mu_);
    return latest_ ? *latest_ : WorkerSet{};
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  WorkerSetPtr latest_;
  int deliveries_ = 0;
};

bool has(const WorkerSet& set, const std::string& id, Role role = Role::kBoth) {
  for (const WorkerInfo& w : set) {
    if (w.id == id) return w.role == role;
  }
  return false;
}

std::string pod_manifest(const std::string& name, int port, const std::string& extra_labels = "",
                         const std::string& extra_annotations = "") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\n  labels:\n    app.kubernetes.io/component: infera-worker\n" + extra_labels +
         "  annotations:\n    infera.ai/port: \"" + std::to_string(port) + "\"\n" + extra_annotations +
         "spec:\n  containers:\n  - name: engine\n    image: infera:latest\n    ports:\n"
         "    - name: http\n      containerPort: 8000\n";
}

class KubeSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = testing_support::start(0.3);
    ASSERT_TRUE(s.ok()) << s.status().message();
    api_server_ = std::make_unique<testing_support>(std::move(*s));
    loop_ = std::make_unique<http::EventLoop>(1);
  }
  void TearDown() override {
    if (source_) source_->stop();
    source_.reset();
    loop_.reset();
  }

  void start_source(KubeSourceOptions options, const std::string& variant = "kubeconfig",
                    std::chrono::milliseconds read_timeout = 5s) {
    auto config = load_kubeconfig(api_server_->kubeconfig(variant));
    ASSERT_TRUE(config.ok()) << config.status().message();
    KubeApiOptions ao;
    ao.read_timeout = read_timeout;
    auto api = KubeApi::create(*config, ao);
    ASSERT_TRUE(api.ok()) << api.status().message();
    options.retry_min = 50ms;
    options.retry_max = 400ms;
    source_ = std::make_unique<KubeWorkerSource>(*loop_, std::move(*api), std::move(options));
    source_->start(probe_.listener());
  }
  static KubeSourceOptions selector(const std::string& s = "app.kubernetes.io/component=infera-worker") {
    KubeSourceOptions o;
    o.selectors.push_back({s, std::nullopt});
    return o;
  }

  void create(const std::string& manifest) {
    const std::string path = (api_server_->dir() / "manifest.yaml").string();
    std::ofstream(path) << manifest;
    std::string out;
    ASSERT_EQ(api_server_->kubectl({"create", "-f", path}, &out), 0) << out;
  }
  void ready(const std::string& name, bool is_ready = true) {
    ASSERT_EQ(api_server_->set_ready(name, is_ready), 200);
  }

  std::unique_ptr<testing_support> api_server_;
  std::unique_ptr<http::EventLoop> loop_;
  FleetProbe probe_;
  std::unique_ptr<KubeWorkerSource> source_;
};

TEST_F(KubeSourceTest, PodJoinsWhenReadyAndLeavesWhenNotReadyOrDeleted) {
  create(pod_manifest("w0", 30001));
  create("apiVersion: v1\nkind: Pod\nmetadata:\n  name: other\n  labels:\n"
         "    app.kubernetes.io/component: something-else\nspec:\n  containers:\n  - name: e\n"
         "    image: x\n    ports:\n    - name: http\n      containerPort: 8000\n");
  start_source(selector());
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.empty(); }));  // Pending: not routable
  ready("w0");
  ready("other");
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return has(s, "127.0.0.1:30001"); }));
  EXPECT_EQ(probe_.latest().size(), 1u);  // the selector holds: `other` never joins
  const WorkerInfo w = probe_.latest().front();
  EXPECT_EQ(w.url, "http://127.0.0.1:30001");
  EXPECT_EQ(w.kv_endpoint, "tcp://127.0.0.1:5557");
  ready("w0", false);
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.empty(); }));
  ready("w0");
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 1; }));
  std::string out;
  ASSERT_EQ(api_server_->kubectl({"delete", "pod", "w0", "--grace-period=0", "--force"}, &out), 0) << out;
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.empty(); }));
  EXPECT_TRUE(source_->health().connected);
}

TEST_F(KubeSourceTest, TerminatingPodLeavesBeforeItIsGone) {
  create(pod_manifest("w1", 30002));
  ready("w1");
  start_source(selector());
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 1; }));
  // A graceful delete: the pod stays, with a deletionTimestamp, for its grace period.
  ASSERT_EQ(api_server_->request("DELETE", "/api/v1/namespaces/default/pods/w1",
                                 R"({"gracePeriodSeconds":30})", "application/json"), 200);
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.empty(); }));
}

TEST_F(KubeSourceTest, RolesComeFromLabelOrFromTheSelector) {
  create(pod_manifest("p0", 30010, "    llm-d.ai/role: prefill\n"));
  create(pod_manifest("d0", 30011, "    llm-d.ai/role: decode\n"));
  create(pod_manifest("b0", 30012, "    llm-d.ai/role: prefill-decode\n"));
  for (const char* n : {"p0", "d0", "b0"}) ready(n);
  start_source(selector());
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) {
    return has(s, "127.0.0.1:30010", Role::kPrefill) && has(s, "127.0.0.1:30011", Role::kDecode) &&
           has(s, "127.0.0.1:30012", Role::kBoth);
  }));
  source_->stop();
  source_.reset();
  KubeSourceOptions o;
  o.selectors.push_back({"llm-d.ai/role=prefill", Role::kPrefill});
  o.selectors.push_back({"llm-d.ai/role in (decode,prefill-decode)", Role::kDecode});
  start_source(o);
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) {
    return s.size() == 3 && has(s, "127.0.0.1:30010", Role::kPrefill) &&
           has(s, "127.0.0.1:30011", Role::kDecode) && has(s, "127.0.0.1:30012", Role::kDecode);
  }));
}

TEST_F(KubeSourceTest, ApiServerDownKeepsTheFleetAndCatchesUpWhenBack) {
  create(pod_manifest("w0", 30020));
  ready("w0");
  start_source(selector());
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 1; }));
  api_server_->kill();
  ASSERT_TRUE(infera::testing::eventually([&] { return !source_->health().connected; }));
  EXPECT_EQ(probe_.latest().size(), 1u);  // the last known fleet stays
  ASSERT_TRUE(api_server_->restart().ok());
  create(pod_manifest("w1", 30021));
  ready("w1");
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 2; }, 20s));
  ASSERT_TRUE(infera::testing::eventually([&] { return source_->health().connected; }));
}

TEST_F(KubeSourceTest, ExpiredWatchRelistsWithoutLosingChanges) {
  create(pod_manifest("w0", 30030));
  ready("w0");
  start_source(selector());
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 1; }));
  const uint64_t resyncs = source_->health().resyncs;
  ASSERT_TRUE(api_server_->control("expire"));
  create(pod_manifest("w1", 30031));
  ready("w1");
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 2; }));
  EXPECT_GT(source_->health().resyncs, resyncs);
}

TEST_F(KubeSourceTest, DroppedWatchesAndRotatedTokenFileAreSurvived) {
  create(pod_manifest("w0", 30040));
  ready("w0");
  start_source(selector(), "kubeconfig-files");  // tokenFile: re-read per connection
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 1; }));
  ASSERT_TRUE(api_server_->control("tokens", R"({"tokens":["rotated-token-1"]})"));
  ASSERT_TRUE(api_server_->control("drop-watches"));
  create(pod_manifest("w1", 30041));
  ready("w1");
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 2; }));
  EXPECT_TRUE(source_->health().connected);
}

TEST_F(KubeSourceTest, GarbageLinesAndBadAnnotationsAreSkippedAndCounted) {
  create(pod_manifest("bad", 30050, "", "    infera.ai/kv-events-port: lots\n"));
  create(pod_manifest("w0", 30051));
  ready("bad");
  ready("w0");
  start_source(selector());
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 1 && has(s, "127.0.0.1:30051"); }));
  EXPECT_GE(source_->health().invalid_records, 1u);
  const uint64_t invalid = source_->health().invalid_records;
  ASSERT_TRUE(api_server_->control("inject", R"({"line":"{\"type\":\"ADDED\",\"object\":[not json"})"));
  ASSERT_TRUE(api_server_->control("inject", R"({"line":"{\"type\":\"WHAT\",\"object\":{}}"})"));
  create(pod_manifest("w1", 30052));
  ready("w1");
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 2; }));
  EXPECT_GE(source_->health().invalid_records, invalid + 2);
  EXPECT_NE(source_->health().last_error, "");
}

TEST_F(KubeSourceTest, InferencePoolGivesSelectorAndPort) {
  const std::string pool =
      "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata:\n  name: pool\n"
      "spec:\n  selector:\n    matchLabels:\n      pool: a\n  targetPorts:\n  - number: 31000\n";
  const std::string path = (api_server_->dir() / "pool.yaml").string();
  std::ofstream(path) << pool;
  std::string out;
  ASSERT_EQ(api_server_->kubectl({"apply", "-f", path}, &out), 0) << out;
  // No infera.ai/port annotation and no port named http: the pool's target port applies.
  create("apiVersion: v1\nkind: Pod\nmetadata:\n  name: pa\n  labels:\n    pool: a\nspec:\n"
         "  containers:\n  - name: e\n    image: x\n    ports:\n    - containerPort: 9999\n");
  create("apiVersion: v1\nkind: Pod\nmetadata:\n  name: pb\n  labels:\n    pool: b\nspec:\n"
         "  containers:\n  - name: e\n    image: x\n");
  ready("pa");
  ready("pb");
  KubeSourceOptions o;
  o.inference_pool = "pool";
  start_source(o);
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 1 && has(s, "127.0.0.1:31000"); }));
}

TEST_F(KubeSourceTest, ClientCertificateAuthWorksAndABadTokenIsReported) {
  create(pod_manifest("w0", 30060));
  ready("w0");
  start_source(selector(), "kubeconfig-cert");
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 1; }));
  source_->stop();
  source_.reset();
  auto config = load_kubeconfig(api_server_->kubeconfig());
  ASSERT_TRUE(config.ok());
  config->token = "wrong";
  auto api = KubeApi::create(*config);
  ASSERT_TRUE(api.ok());
  KubeSourceOptions o = selector();
  o.retry_min = 50ms;
  source_ = std::make_unique<KubeWorkerSource>(*loop_, std::move(*api), o);
  source_->start(probe_.listener());
  ASSERT_TRUE(infera::testing::eventually([&] {
    const SourceHealth h = source_->health();
    return !h.connected && h.last_error.find("401") != std::string::npos;
  }));
}

TEST_F(KubeSourceTest, OversizedListIsRefusedWithAClearErrorAndTheFleetKept) {
  create(pod_manifest("w0", 30070));
  ready("w0");
  KubeSourceOptions o = selector();
  o.max_pods = 3;
  start_source(o);
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 1; }));
  ASSERT_TRUE(api_server_->control("pods/bulk", R"({"namespace":"default","count":5,)"
                                              R"("labels":{"app.kubernetes.io/component":"infera-worker"},)"
                                              R"("ready":true,"ip_prefix":"10.8","port":8000})"));
  ASSERT_TRUE(api_server_->control("expire"));  // the re-list now sees 6 pods
  ASSERT_TRUE(infera::testing::eventually([&] {
    return source_->health().last_error.find("more than 3 pods") != std::string::npos;
  }));
  EXPECT_FALSE(source_->health().connected);
  // The watch had delivered some of the new pods before the re-list: at most what it saw, never
  // a crash or an empty fleet.
  EXPECT_TRUE(has(probe_.latest(), "127.0.0.1:30070"));
}

// An API server owes a quiet watch nothing (bookmarks come now and then): a watch that outlives
// the read deadline is resumed, not reported as an outage.
TEST_F(KubeSourceTest, QuietWatchPastTheReadDeadlineIsNotAnOutage) {
  auto quiet = testing_support::start(1000);  // no bookmark in this test's lifetime
  ASSERT_TRUE(quiet.ok()) << quiet.status().message();
  api_server_ = std::make_unique<testing_support>(std::move(*quiet));
  create(pod_manifest("w0", 30080));
  ready("w0");
  start_source(selector(), "kubeconfig", 200ms);
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 1; }));
  // Several read deadlines pass with nothing on the stream: each resumes the watch.
  ASSERT_TRUE(infera::testing::eventually([&] {
    std::string stats;
    api_server_->request("GET", "/_standin/stats", {}, "application/json", &stats);
    const auto at = stats.find("\"watch\":");
    return at != std::string::npos && std::atoi(stats.c_str() + at + 8) >= 4;
  })) << "the watch was not resumed after its read deadline";
  EXPECT_TRUE(source_->health().connected) << source_->health().last_error;
  create(pod_manifest("w1", 30081));
  ready("w1");
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 2; }));
  EXPECT_TRUE(source_->health().connected);
}

TEST_F(KubeSourceTest, AThousandPodsListInOnePass) {
  ASSERT_TRUE(api_server_->control("pods/bulk", R"({"namespace":"default","count":1000,)"
                                              R"("labels":{"app.kubernetes.io/component":"infera-worker"},)"
                                              R"("ready":true,"ip_prefix":"10.9","port":8000})"));
  const auto t0 = std::chrono::steady_clock::now();
  start_source(selector());
  ASSERT_TRUE(probe_.wait([](const WorkerSet& s) { return s.size() == 1000; }, 30s));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("KUBE_LIST_1000 fleet built in %.0f ms\n", ms);
  EXPECT_EQ(source_->health().records, 1000u);
}

}  // namespace
}  // namespace infera::discovery
