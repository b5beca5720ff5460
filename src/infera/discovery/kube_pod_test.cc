#include "infera/discovery/kube_pod.h"

#include <gtest/gtest.h>

namespace infera::discovery {
namespace {

// A Pod as the API server sends it (trimmed), Ready, with a container port named http.
std::string pod_json(std::string extra_meta = "", std::string ready = "True",
                     std::string ports = R"([{"name":"metrics","containerPort":9090},{"name":"http","containerPort":8000}])",
                     std::string ip = "10.1.2.3") {
  return R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"vllm-0","namespace":"ml","uid":"u-1",)"
         R"("resourceVersion":"42","labels":{"app":"vllm"})" + extra_meta + R"(},)"
         R"("spec":{"containers":[{"name":"engine","ports":)" + ports + R"(}]},)"
         R"("status":{"phase":"Running","podIP":")" + ip + R"(","conditions":[{"type":"Ready","status":")" +
         ready + R"("}]}})";
}

KubePod pod(const std::string& json) {
  auto p = parse_kube_pod(json);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? *p : KubePod{};
}

TEST(KubePodTest, ReadyPodBecomesWorkerOnItsHttpPortWithDocumentedDefaults) {
  auto w = kube_pod_worker(pod(pod_json()), {});
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_TRUE(w->has_value());
  const WorkerInfo& info = **w;
  EXPECT_EQ(info.id, "10.1.2.3:8000");
  EXPECT_EQ(info.url, "http://10.1.2.3:8000");
  EXPECT_EQ(info.kv_endpoint, "tcp://10.1.2.3:5557");
  EXPECT_EQ(info.replay_endpoint, "tcp://10.1.2.3:5558");
  EXPECT_EQ(info.topic, "kv-events");
  EXPECT_EQ(info.engine, "vllm");
  EXPECT_EQ(info.role, Role::kBoth);
  EXPECT_EQ(info.bootstrap_port, 0u);
}

TEST(KubePodTest, AnnotationsOverridePortsTopicEngineAndBootstrap) {
  const std::string meta = R"(,"annotations":{"infera.ai/port":"30000","infera.ai/kv-events-port":"6000",)"
                           R"("infera.ai/kv-replay-port":"6001","infera.ai/kv-topic":"t","infera.ai/engine":"sglang",)"
                           R"("sglang.ai/bootstrap-port":"8998"})";
  auto w = kube_pod_worker(pod(pod_json(meta)), {});
  ASSERT_TRUE(w.ok() && w->has_value());
  EXPECT_EQ((*w)->id, "10.1.2.3:30000");
  EXPECT_EQ((*w)->kv_endpoint, "tcp://10.1.2.3:6000");
  EXPECT_EQ((*w)->replay_endpoint, "tcp://10.1.2.3:6001");
  EXPECT_EQ((*w)->topic, "t");
  EXPECT_EQ((*w)->engine, "sglang");
  EXPECT_EQ((*w)->bootstrap_port, 8998u);
}

TEST(KubePodTest, PortFallsBackToPoolTargetThenFirstContainerPort) {
  const std::string unnamed = R"([{"containerPort":7000},{"containerPort":7001}])";
  auto first = kube_pod_worker(pod(pod_json("", "True", unnamed)), {});
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->id, "10.1.2.3:7000");
  KubePodRules rules;
  rules.target_port = 7001;
  auto pooled = kube_pod_worker(pod(pod_json("", "True", unnamed)), rules);
  ASSERT_TRUE(pooled.ok() && pooled->has_value());
  EXPECT_EQ((*pooled)->id, "10.1.2.3:7001");
  auto none = kube_pod_worker(pod(pod_json("", "True", "[]")), {});
  EXPECT_FALSE(none.ok());
}

TEST(KubePodTest, NotReadyTerminatingOrUnaddressedPodIsNotRoutable) {
  for (const std::string& json :
       {pod_json("", "False"), pod_json(R"(,"deletionTimestamp":"2026-12-03T10:00:00Z")"),
        pod_json("", "True", R"([{"name":"http","containerPort":8000}])", "")}) {
    auto w = kube_pod_worker(pod(json), {});
    ASSERT_TRUE(w.ok()) << w.status().message();
    EXPECT_FALSE(w->has_value()) << json;
  }
}

TEST(KubePodTest, RoleComesFromSelectorElseLabel) {
  auto labelled = [](const std::string& role) {
    return pod_json(R"(,"labels":{"llm-d.ai/role":")" + role + R"("})");
  };
  auto prefill = kube_pod_worker(pod(labelled("prefill")), {});
  ASSERT_TRUE(prefill.ok() && prefill->has_value());
  EXPECT_EQ((*prefill)->role, Role::kPrefill);
  auto both = kube_pod_worker(pod(labelled("prefill-decode")), {});
  ASSERT_TRUE(both.ok() && both->has_value());
  EXPECT_EQ((*both)->role, Role::kBoth);
  KubePodRules decode;
  decode.role = Role::kDecode;
  auto by_selector = kube_pod_worker(pod(labelled("prefill")), decode);
  ASSERT_TRUE(by_selector.ok() && by_selector->has_value());
  EXPECT_EQ((*by_selector)->role, Role::kDecode);
  EXPECT_FALSE(kube_pod_worker(pod(labelled("chef")), {}).ok());
}

TEST(KubePodTest, GarbageAnnotationIsAnErrorNamingIt) {
  for (const std::string v : {"abc", "0", "70000", "80x", ""}) {
    auto w = kube_pod_worker(pod(pod_json(R"(,"annotations":{"infera.ai/kv-events-port":")" + v + R"("})")), {});
    ASSERT_FALSE(w.ok()) << v;
    EXPECT_NE(w.status().message().find("infera.ai/kv-events-port"), std::string::npos);
  }
}

TEST(KubePodTest, ListKeepsGoodItemsAndNamesSkippedOnes) {
  const std::string list = R"({"kind":"PodList","metadata":{"resourceVersion":"77","continue":"c1"},"items":[)" +
                           pod_json() + R"(,{"metadata":{"name":"bad"}},7]})";
  auto l = parse_kube_pod_list(list);
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->resource_version, "77");
  EXPECT_EQ(l->continue_token, "c1");
  ASSERT_EQ(l->items.size(), 2u);  // a pod with a name but no uid keys by namespace/name
  EXPECT_EQ(l->items[1].uid, "/bad");
  EXPECT_EQ(l->skipped.size(), 1u);
  EXPECT_FALSE(parse_kube_pod_list(R"({"kind":"Status"})").ok());
  EXPECT_FALSE(parse_kube_pod_list("{").ok());
}

TEST(KubePodTest, WatchEventsParseByTypeAndRejectGarbage) {
  auto added = parse_kube_watch_event(R"({"type":"ADDED","object":)" + pod_json() + "}");
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(added->type, KubeWatchEvent::Type::kAdded);
  EXPECT_EQ(added->pod.resource_version, "42");
  auto bookmark = parse_kube_watch_event(
      R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"99"}}})");
  ASSERT_TRUE(bookmark.ok());
  EXPECT_EQ(bookmark->type, KubeWatchEvent::Type::kBookmark);
  EXPECT_EQ(bookmark->pod.resource_version, "99");
  auto expired = parse_kube_watch_event(
      R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}})");
  ASSERT_TRUE(expired.ok());
  EXPECT_EQ(expired->type, KubeWatchEvent::Type::kError);
  EXPECT_EQ(expired->error_code, 410);
  for (const std::string bad : {"", "null", "{\"type\":\"ADDED\"}", "{\"type\":\"SURPRISE\",\"object\":{}}",
                                "{\"type\":\"ADDED\",\"object\":{\"metadata\":7}}", "[1,2"}) {
    EXPECT_FALSE(parse_kube_watch_event(bad).ok()) << bad;
  }
}

TEST(KubePodTest, InferencePoolGivesSelectorAndTargetPortInBothShapes) {
  auto v1 = parse_kube_inference_pool(
      R"({"spec":{"selector":{"matchLabels":{"app":"vllm","tier":"gpu"}},"targetPorts":[{"number":8000}]}})");
  ASSERT_TRUE(v1.ok()) << v1.status().message();
  EXPECT_EQ(v1->label_selector, "app=vllm,tier=gpu");
  EXPECT_EQ(v1->target_port, 8000u);
  auto alpha = parse_kube_inference_pool(R"({"spec":{"selector":{"app":"sgl"},"targetPortNumber":30000}})");
  ASSERT_TRUE(alpha.ok());
  EXPECT_EQ(alpha->label_selector, "app=sgl");
  EXPECT_EQ(alpha->target_port, 30000u);
  EXPECT_FALSE(parse_kube_inference_pool(R"({"spec":{"selector":{}}})").ok());
}

}  // namespace
}  // namespace infera::discovery
