#include "infera/discovery/worker.h"

#include <gtest/gtest.h>

namespace infera::discovery {
namespace {

TEST(WorkerFlagTest, ParsesThePinnedSyntax) {
  auto w = parse_worker_flag(
      "http://127.0.0.1:30000,kv=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558,topic=kv-events,"
      "role=prefill");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->id, "127.0.0.1:30000");
  EXPECT_EQ(w->url, "http://127.0.0.1:30000");
  EXPECT_EQ(w->kv_endpoint, "tcp://127.0.0.1:5557");
  EXPECT_EQ(w->replay_endpoint, "tcp://127.0.0.1:5558");
  EXPECT_EQ(w->topic, "kv-events");
  EXPECT_EQ(w->role, Role::kPrefill);
}

TEST(WorkerFlagTest, UrlAloneIsALoadOnlyWorker) {
  auto w = parse_worker_flag("http://10.0.0.7:8000/");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->id, "10.0.0.7:8000");
  EXPECT_TRUE(w->kv_endpoint.empty());
  EXPECT_EQ(w->role, Role::kBoth);
}

TEST(WorkerFlagTest, HttpsUrlIsATlsWorkerWithTheSameId) {
  auto w = parse_worker_flag("https://gpu-7.example:8443,kv=tcp://10.0.0.7:5557");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->url, "https://gpu-7.example:8443");
  EXPECT_EQ(w->id, "gpu-7.example:8443");
}

TEST(WorkerFlagTest, RejectsBadSpecs) {
  EXPECT_FALSE(parse_worker_flag("10.0.0.7:8000").ok());               // no scheme
  EXPECT_FALSE(parse_worker_flag("ftp://a:1").ok());                   // another scheme
  EXPECT_FALSE(parse_worker_flag("http://a").ok());                    // no port
  EXPECT_FALSE(parse_worker_flag("http://a:1/v1").ok());               // a path
  EXPECT_FALSE(parse_worker_flag("http://a:1,kv").ok());               // no value
  EXPECT_FALSE(parse_worker_flag("http://a:1,bogus=1").ok());          // unknown key
  EXPECT_FALSE(parse_worker_flag("http://a:1,role=leader").ok());      // unknown role
  EXPECT_FALSE(parse_worker_flag("http://a\nINFO:1").ok());            // log injection
}

TEST(WorkerRecordTest, RoundTrips) {
  WorkerInfo w;
  w.url = "http://127.0.0.1:30001";
  w.id = "127.0.0.1:30001";
  w.role = Role::kDecode;
  w.kv_endpoint = "tcp://127.0.0.1:5557";
  w.replay_endpoint = "tcp://127.0.0.1:5558";
  w.topic = "t";
  w.block_size = 16;
  w.model = "Qwen/Qwen3-0.6B";
  w.engine = "mock";
  auto back = parse_worker_record(worker_record_json(w));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, w);
  EXPECT_EQ(worker_key("infera/workers/", w), "infera/workers/decode/127.0.0.1:30001");
}

TEST(WorkerRecordTest, CarriesTheDisaggregationProtocolAndBootstrapPort) {
  WorkerInfo w;
  w.url = "http://127.0.0.1:30002";
  w.id = "127.0.0.1:30002";
  w.role = Role::kPrefill;
  w.engine = "mock";
  w.bootstrap_port = 8998;
  w.pd_protocol = "sglang";
  auto back = parse_worker_record(worker_record_json(w));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, w);
  EXPECT_EQ(pd_protocol(*back), PdProtocol::kSglang);
  // Records without the field keep their meaning: by engine name.
  auto old = parse_worker_record(R"({"url":"http://a:1","role":"decode","engine":"sglang"})");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(pd_protocol(*old), PdProtocol::kSglang);
  auto vllm = parse_worker_record(R"({"url":"http://a:1","engine":"mock"})");
  ASSERT_TRUE(vllm.ok());
  EXPECT_EQ(pd_protocol(*vllm), PdProtocol::kVllm);
  // A protocol this reader does not know leaves the worker routable, by engine name.
  auto newer = parse_worker_record(R"({"url":"http://a:1","pd_protocol":"mooncake-v9"})");
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ(pd_protocol(*newer), PdProtocol::kVllm);
  // The static flag takes the same keys; a bad protocol is a startup error.
  auto flag = parse_worker_flag("http://127.0.0.1:1,role=prefill,bootstrap_port=9000,pd_protocol=sglang");
  ASSERT_TRUE(flag.ok()) << flag.status().to_string();
  EXPECT_EQ(flag->bootstrap_port, 9000u);
  EXPECT_EQ(pd_protocol(*flag), PdProtocol::kSglang);
  EXPECT_FALSE(parse_worker_flag("http://127.0.0.1:1,pd_protocol=nixl").ok());
}

TEST(WorkerRecordTest, RejectsMalformedRecords) {
  EXPECT_FALSE(parse_worker_record("not json").ok());
  EXPECT_FALSE(parse_worker_record("[1]").ok());
  EXPECT_FALSE(parse_worker_record(R"({"url": 5})").ok());
  EXPECT_FALSE(parse_worker_record(R"({"url": "http://a:1", "block_size": -1})").ok());
  EXPECT_FALSE(parse_worker_record(R"({"url": "http://a:1", "role": "boss"})").ok());
  EXPECT_FALSE(parse_worker_record(R"({"role": "both"})").ok());
}

}  // namespace
}  // namespace infera::discovery
