#include "infera/gateway/engine_poller.h"

#include "tests/support/dev_transports.h"
#include "infera/gateway/gateway.h"
#include "infera/routing/load_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "infera/config/server_config.h"

namespace infera::gateway {
namespace {

constexpr const char* kTwoRanks =
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2.0\n"
    "vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 3.0\n"
    "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 4.0\n"
    "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 1.0\n"
    "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n"
    "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.75\n"
    "vllm:cache_config_info{block_size=\"16\"} 1.0\n";

TEST(EngineLoadTest, CountsAreSummedAndKvUsageAveragedOverSeries) {
  auto load = parse_engine_load(kTwoRanks);
  ASSERT_TRUE(load.ok()) << load.status().to_string();
  EXPECT_EQ(load->waiting, 5u);
  EXPECT_EQ(load->running, 5u);
  EXPECT_DOUBLE_EQ(load->kv_usage, 0.5);
}

TEST(EngineLoadTest, AMissingGaugeIsNotFound) {
  auto load = parse_engine_load(
      "vllm:num_requests_waiting 1\nvllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.5\n");
  ASSERT_FALSE(load.ok());
  EXPECT_EQ(load.status().code(), StatusCode::kNotFound);
  EXPECT_NE(load.status().message().find("vllm:kv_cache_usage_perc"), std::string::npos);
  EXPECT_EQ(parse_engine_load("").status().code(), StatusCode::kNotFound);
}

TEST(EngineLoadTest, NegativeOrNonFiniteValuesAreOutOfRange) {
  for (const char* bad : {"-1", "NaN", "+Inf"}) {
    const std::string page = std::string("vllm:num_requests_waiting{a=\"x\"} 3\n") +
                             "vllm:num_requests_waiting{a=\"y\"} " + bad +
                             "\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.5\n";
    EXPECT_EQ(parse_engine_load(page).status().code(), StatusCode::kOutOfRange) << bad;
  }
}

TEST(EngineLoadTest, GarbageIsInvalid) {
  EXPECT_EQ(parse_engine_load("<html>Not Found</html>").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_engine_load("vllm:num_requests_waiting \x01\xff\n").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(EngineLoadTest, HugeCountsSaturate) {
  auto load = parse_engine_load(
      "vllm:num_requests_waiting 1e30\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 1\n");
  ASSERT_TRUE(load.ok()) << load.status().to_string();
  EXPECT_EQ(load->waiting, UINT32_MAX);
}

TEST(EnginePollerTest, DeadlineIsTheIntervalWithin200MsAnd1S) {
  http::EventLoop loop(1);
  http::Client client;
  SteadyClock clock;
  kv::EngineSignals signals(4, clock);
  kv::ActiveLoad load(kv::ActiveLoad::Options{std::chrono::minutes(5), 4}, clock);
  auto deadline = [&](int64_t interval_ms) {
    return EnginePoller({.interval = std::chrono::milliseconds(interval_ms)}, signals, load, loop,
                        client)
        .deadline()
        .count();
  };
  EXPECT_EQ(deadline(50), 200);
  EXPECT_EQ(deadline(500), 500);
  EXPECT_EQ(deadline(5'000), 1'000);
}

// `infera server` flags for one static worker, plus `extra`.
Result<config::ServerConfig> parse(std::vector<std::string> extra) {
  std::vector<std::string> args{"--worker", "http://127.0.0.1:9"};
  args.insert(args.end(), extra.begin(), extra.end());
  bool help = false;
  std::string text;
  return config::parse_server_flags(infera::testing::with_dev_transports(args), &help, &text);
}

TEST(EngineMetricsIntervalFlagTest, IsOffAtZeroAndOtherwise50MsToAnHour) {
  ASSERT_TRUE(parse({}).ok());
  EXPECT_EQ(parse({})->engine_metrics_interval_s, 1.0);
  for (const char* good : {"0", "0.05", "2.5", "3600"}) {
    EXPECT_TRUE(parse({"--engine-metrics-interval-s", good}).ok()) << good;
  }
  for (const char* bad : {"0.01", "-1", "3601", "nan", "inf"}) {
    EXPECT_FALSE(parse({"--engine-metrics-interval-s", bad}).ok()) << bad;
  }
}

// The load model's flags reach the server's config as given, and a bad one stops startup with
// a message naming the flag (strict startup), before anything listens.
TEST(LoadModelFlagsTest, ServerFlagsResolveOrFailNamingTheFlag) {
  auto c = parse({"--kv-load-model", "prefill-aware", "--kv-predicted-ttl-s", "0.5",
                  "--kv-tier-credit", "cpu=0.5", "--kv-prefill-load-weight", "2",
                  "--kv-decode-load-weight", "0.1", "--kv-overload-threshold", "300"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto o = routing::resolve_load_options(c->load_model);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->model, routing::LoadModel::kPrefillAware);
  EXPECT_DOUBLE_EQ(o->predicted_ttl_s, 0.5);
  EXPECT_DOUBLE_EQ(o->tier_credit.cpu, 0.5);
  EXPECT_DOUBLE_EQ(o->tier_credit.disk, 0.0);
  EXPECT_DOUBLE_EQ(o->prefill_weight, 2.0);
  EXPECT_DOUBLE_EQ(o->decode_weight, 0.1);
  EXPECT_DOUBLE_EQ(o->overload_blocks, 300.0);
  auto seed = parse({});
  ASSERT_TRUE(seed.ok());
  EXPECT_EQ(routing::resolve_load_options(seed->load_model)->model,
            routing::LoadModel::kActiveBlocks);
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--kv-load-model", "fastest"},
           {"--kv-tier-credit", "tape=1"},
           {"--kv-predicted-ttl-s", "-1"},
           {"--kv-decode-load-weight", "-0.5"}}) {
    auto bad = parse({flag, value});
    ASSERT_TRUE(bad.ok()) << flag;  // the flag parser takes any number or text...
    auto started = Gateway::create(*bad);
    ASSERT_FALSE(started.ok()) << flag;  // ...and startup refuses it
    EXPECT_NE(started.status().message().find(flag), std::string::npos)
        << started.status().message();
  }
}

}  // namespace
}  // namespace infera::gateway
