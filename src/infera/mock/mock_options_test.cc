#include "infera/mock/mock_options.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace infera::mock {

using launcher::parse_kv_events_config;

namespace {

Result<MockOptions> parse(std::vector<std::string> args) {
  bool help = false;
  std::string text;
  return parse_mock_flags(args, &help, &text);
}

TEST(MockOptionsTest, DefaultsAreVllms) {
  ::unsetenv("PYTHONHASHSEED");
  auto o = parse({});
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->port, 8000u);
  EXPECT_EQ(o->engine.block_size, 16u);
  EXPECT_EQ(o->engine.max_num_seqs, 256u);
  EXPECT_EQ(o->engine.max_num_batched_tokens, 8192u);
  EXPECT_EQ(o->engine.hash_seed, "0");
  EXPECT_FALSE(o->kv_events.has_value());
  EXPECT_FALSE(o->engine.enable_kv_events);
  EXPECT_EQ(o->served_name(), "infera-mock");
  EXPECT_EQ(o->advertise_host, "127.0.0.1");  // --host 0.0.0.0 is not an address to publish
}

TEST(MockOptionsTest, ParsesEveryContractFlag) {
  auto o = parse({"--model", "Qwen/Qwen3-0.6B", "--served-model-name", "qwen", "--host",
                  "127.0.0.1", "--port", "0", "--page-size", "32", "--num-gpu-blocks", "1000",
                  "--max-num-seqs", "8", "--max-num-batched-tokens", "512", "--speedup-ratio",
                  "100", "--hash-seed", "42", "--seed", "7", "--role", "prefill",
                  "--discovery-backend", "etcd", "--etcd-endpoint", "127.0.0.1:2379",
                  "--request-transport", "http", "--kv-event-transport", "zmq", "--log-level",
                  "warn", "--kv-events-format", "array", "--enable-kv-events"});
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->served_name(), "qwen");
  EXPECT_EQ(o->model, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(o->port, 0u);
  EXPECT_EQ(o->engine.block_size, 32u);
  EXPECT_EQ(o->engine.num_gpu_blocks, 1000u);
  EXPECT_EQ(o->engine.max_num_seqs, 8u);
  EXPECT_EQ(o->engine.max_num_batched_tokens, 512u);
  EXPECT_DOUBLE_EQ(o->engine.speedup_ratio, 100.0);
  EXPECT_EQ(o->engine.hash_seed, "42");
  EXPECT_EQ(o->engine.output_seed, 7u);
  EXPECT_EQ(o->role, discovery::Role::kPrefill);
  EXPECT_EQ(o->discovery_backend, config::DiscoveryBackend::kEtcd);
  EXPECT_EQ(o->log_level, LogLevel::kWarn);
  EXPECT_EQ(o->kv_events_format, events::WireFormat::kVllmArray);
  EXPECT_EQ(o->advertise_host, "127.0.0.1");
  ASSERT_TRUE(o->kv_events.has_value());
  EXPECT_TRUE(o->engine.enable_kv_events);
}

TEST(MockOptionsTest, ChoiceWordsBecomeEnumsAndBadOnesNameTheirFlag) {
  auto plain = parse({});
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  // The production defaults (docs/configuration.md "Defaults and implied settings").
  EXPECT_EQ(plain->discovery_backend, config::DiscoveryBackend::kKubernetes);
  EXPECT_EQ(plain->request_transport, config::RequestTransport::kNats);
  EXPECT_EQ(plain->kv_event_transport, config::KvEventTransport::kNats);
  EXPECT_EQ(plain->log_level, LogLevel::kInfo);
  auto unknown = parse({"--discovery-backend", "consul"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(),
            "unknown --discovery-backend 'consul' (supported: static, etcd, k8s)");
  auto dev = parse({"--request-transport", "http", "--kv-event-transport", "zmq"});
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  EXPECT_EQ(dev->request_transport, config::RequestTransport::kHttp);
  EXPECT_EQ(dev->kv_event_transport, config::KvEventTransport::kZmq);
  auto etcd = parse({"--etcd-endpoint", "http://127.0.0.1:2379"});  // implies etcd
  ASSERT_TRUE(etcd.ok()) << etcd.status().to_string();
  EXPECT_EQ(etcd->discovery_backend, config::DiscoveryBackend::kEtcd);
  auto level = parse({"--log-level", "loud"});
  ASSERT_FALSE(level.ok());
  EXPECT_NE(level.status().message().find("'loud'"), std::string::npos);
}

TEST(MockOptionsTest, LoraModulesAsVllmTakesThem) {
  auto o = parse({"--served-model-name", "base", "--enable-lora", "--lora-modules", "sql=/a",
                  "--lora-modules", "chat=/b/c"});
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  ASSERT_EQ(o->lora_modules.size(), 2u);
  EXPECT_EQ(o->lora_modules[1].name, "chat");
  EXPECT_EQ(o->lora_modules[1].path, "/b/c");
  EXPECT_EQ(o->lora_for("sql"), std::optional<std::string_view>("sql"));
  EXPECT_EQ(o->lora_for("base"), std::optional<std::string_view>(""));
  EXPECT_EQ(o->lora_for(""), std::optional<std::string_view>(""));
  EXPECT_FALSE(o->lora_for("other").has_value());
  EXPECT_FALSE(parse({"--lora-modules", "sql=/a"}).ok());  // needs --enable-lora
  EXPECT_FALSE(parse({"--enable-lora", "--lora-modules", "sql"}).ok());
  EXPECT_FALSE(parse({"--enable-lora", "--lora-modules", "=/a"}).ok());
  EXPECT_FALSE(parse({"--enable-lora", "--lora-modules", "a=/x", "--lora-modules", "a=/y"}).ok());
  EXPECT_FALSE(parse({"--enable-lora", "--lora-modules", "infera-mock=/x"}).ok());
}

TEST(MockOptionsTest, DisaggregationFlags) {
  auto o = parse({"--role", "prefill", "--pd-protocol", "sglang", "--disaggregation-bootstrap-port",
                  "0", "--kv-block-bytes", "1000", "--kv-transfer-bandwidth-gb-s", "2.5",
                  "--kv-transfer-timeout-s", "5"});
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->role, discovery::Role::kPrefill);
  EXPECT_EQ(o->pd_protocol, discovery::PdProtocol::kSglang);
  EXPECT_EQ(o->bootstrap_port, 0u);
  EXPECT_EQ(o->engine.kv_block_bytes, 1000u);
  EXPECT_EQ(o->engine.kv_transfer_bandwidth_gb_s, 2.5);
  EXPECT_EQ(o->kv_transfer_timeout_s, 5.0);
  // SGLang's own flag is the role with SGLang's protocol.
  auto sglang = parse({"--disaggregation-mode", "decode"});
  ASSERT_TRUE(sglang.ok()) << sglang.status().to_string();
  EXPECT_EQ(sglang->role, discovery::Role::kDecode);
  EXPECT_EQ(sglang->pd_protocol, discovery::PdProtocol::kSglang);
  EXPECT_EQ(parse({}).value().pd_protocol, discovery::PdProtocol::kVllm);
  EXPECT_FALSE(parse({"--pd-protocol", "nixl"}).ok());
  EXPECT_FALSE(parse({"--role", "decode", "--disaggregation-mode", "prefill"}).ok());
  EXPECT_FALSE(parse({"--kv-transfer-bandwidth-gb-s", "0"}).ok());
  EXPECT_FALSE(parse({"--kv-transfer-timeout-s", "0"}).ok());
}

TEST(MockOptionsTest, EnableKvEventsAloneMeansTheDocumentedDefaults) {
  auto o = parse({"--enable-kv-events", "--kv-event-transport", "zmq"});
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(o->kv_events.has_value());
  EXPECT_EQ(o->kv_events->endpoint, "tcp://*:5557");
  EXPECT_EQ(o->kv_events->replay_endpoint, "tcp://*:5558");
  EXPECT_EQ(o->kv_events->topic, "kv-events");
  EXPECT_EQ(o->kv_events->publisher, "zmq");
  // Relayed over NATS (the default), the engine's sockets need no port outside the host.
  auto relayed = parse({"--enable-kv-events"});
  ASSERT_TRUE(relayed.ok());
  ASSERT_TRUE(relayed->kv_events.has_value());
  EXPECT_EQ(relayed->kv_events->endpoint, "tcp://127.0.0.1:*");
  EXPECT_EQ(relayed->kv_events->replay_endpoint, "tcp://127.0.0.1:*");
}

TEST(MockOptionsTest, KvEventsConfigTakesVllmsKeys) {
  auto o = parse({"--kv-events-config",
                  R"({"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:6000",)"
                  R"("replay_endpoint":"tcp://*:6001","topic":"t","buffer_steps":50,"hwm":10,)"
                  R"("max_queue_size":20})"});
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  ASSERT_TRUE(o->kv_events.has_value());
  EXPECT_EQ(o->kv_events->endpoint, "tcp://*:6000");
  EXPECT_EQ(o->kv_events->replay_endpoint, "tcp://*:6001");
  EXPECT_EQ(o->kv_events->topic, "t");
  EXPECT_EQ(o->kv_events->buffer_steps, 50u);
  EXPECT_EQ(o->kv_events->hwm, 10u);
  EXPECT_EQ(o->kv_events->max_queue_size, 20u);
}

TEST(MockOptionsTest, KvEventsConfigOmittedKeysKeepVllmDefaults) {
  auto c = parse_kv_events_config(R"({"enable_kv_cache_events":true})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->publisher, "zmq");  // vLLM __post_init__: enabled and unset -> zmq
  EXPECT_EQ(c->endpoint, "tcp://*:5557");
  EXPECT_EQ(c->replay_endpoint, "");
  EXPECT_EQ(c->topic, "");
  EXPECT_EQ(c->buffer_steps, 10000u);
  auto disabled = parse_kv_events_config(R"({"endpoint":"tcp://*:1"})");
  ASSERT_TRUE(disabled.ok());
  EXPECT_EQ(disabled->publisher, "null");
}

TEST(MockOptionsTest, KvEventsConfigDisabledOrNullPublisherMeansNoEvents) {
  auto off = parse({"--kv-events-config", R"({"enable_kv_cache_events":false})"});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->kv_events.has_value());
  auto null_pub =
      parse({"--kv-events-config", R"({"enable_kv_cache_events":true,"publisher":"null"})"});
  ASSERT_TRUE(null_pub.ok());
  EXPECT_FALSE(null_pub->kv_events.has_value());
  // --enable-kv-events switches on a config that leaves the switch out.
  auto on = parse({"--enable-kv-events", "--kv-events-config", R"({"endpoint":"tcp://*:7000"})"});
  ASSERT_TRUE(on.ok());
  ASSERT_TRUE(on->kv_events.has_value());
  EXPECT_EQ(on->kv_events->endpoint, "tcp://*:7000");
}

TEST(MockOptionsTest, KvEventsConfigRejectsUnknownKeysAndWrongTypes) {
  EXPECT_FALSE(parse_kv_events_config("not json").ok());
  EXPECT_FALSE(parse_kv_events_config("[]").ok());
  EXPECT_FALSE(parse_kv_events_config(R"({"endpont":"tcp://*:1"})").ok());
  EXPECT_FALSE(parse_kv_events_config(R"({"enable_kv_cache_events":"yes"})").ok());
  EXPECT_FALSE(parse_kv_events_config(R"({"publisher":"kafka"})").ok());
  EXPECT_FALSE(parse_kv_events_config(R"({"buffer_steps":0})").ok());
  EXPECT_FALSE(parse_kv_events_config(R"({"topic":5})").ok());
  EXPECT_TRUE(parse_kv_events_config(R"({"replay_endpoint":null})").ok());
}

TEST(MockOptionsTest, HashSeedDefaultsToPythonHashSeed) {
  ::setenv("PYTHONHASHSEED", "1234", 1);
  auto o = parse({});
  ::unsetenv("PYTHONHASHSEED");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->engine.hash_seed, "1234");
  auto flag = parse({"--hash-seed", "9"});
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(flag->engine.hash_seed, "9");
}

TEST(MockOptionsTest, BadFlagsAreErrors) {
  EXPECT_EQ(parse({"--no-such-flag"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(parse({"--port", "70000"}).ok());
  EXPECT_FALSE(parse({"--port", "x"}).ok());
  EXPECT_FALSE(parse({"--block-size", "0"}).ok());
  EXPECT_FALSE(parse({"--speedup-ratio", "0"}).ok());
  EXPECT_FALSE(parse({"--num-gpu-blocks", "1"}).ok());
  EXPECT_FALSE(parse({"--role", "router"}).ok());
  EXPECT_FALSE(parse({"--kv-events-format", "xml"}).ok());
  EXPECT_FALSE(parse({"--log-level", "loud"}).ok());
  EXPECT_FALSE(parse({"--discovery-backend", "etcd"}).ok());  // needs --etcd-endpoint
  EXPECT_FALSE(parse({"--discovery-backend", "consul"}).ok());
  EXPECT_FALSE(parse({"--nats-server", "http://x:1"}).ok());
  EXPECT_FALSE(parse({"--namespace", "a b"}).ok());
  EXPECT_FALSE(parse({"--request-transport", "grpc"}).ok());
  EXPECT_FALSE(parse({"--enable-kv-events", "--no-enable-prefix-caching"}).ok());
}

TEST(MockOptionsTest, ErrorsNameTheFlag) {
  auto o = parse({"--max-num-seqs", "0"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("--max-num-seqs"), std::string::npos)
      << o.status().message();
}

TEST(MockOptionsTest, HelpListsTheFlags) {
  bool help = false;
  std::string text;
  std::vector<std::string> args = {"--help"};
  auto o = parse_mock_flags(args, &help, &text);
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(help);
  for (const char* flag : {"--model", "--tokenizer", "--kv-events-config", "--speedup-ratio",
                           "--num-gpu-blocks", "--etcd-endpoint", "--role"}) {
    EXPECT_NE(text.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace infera::mock
