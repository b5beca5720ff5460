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

TEST(WorkerFlagTest, RejectsBadSpecs) {
  EXPECT_FALSE(parse_worker_flag("10.0.0.7:8000").ok());               // no scheme
  EXPECT_FALSE(parse_worker_flag("https://a:1").ok());                 // TLS not supported
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
