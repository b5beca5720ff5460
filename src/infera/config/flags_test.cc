#include "infera/config/flags.h"

#include <gtest/gtest.h>

#include "infera/config/server_config.h"

namespace infera::config {
namespace {

std::vector<std::string> args(std::initializer_list<const char*> a) {
  return std::vector<std::string>(a.begin(), a.end());
}

TEST(FlagSetTest, ParsesValuesBothWaysAndAliases) {
  std::string s;
  uint32_t n = 0;
  double d = 0;
  bool b = false;
  std::vector<std::string> many;
  FlagSet f("usage");
  f.add("--name", &s, "");
  f.add("--block-size|--page-size", &n, "");
  f.add("--weight", &d, "");
  f.add("--enable", &b, "");
  f.add("--worker", &many, "");
  ASSERT_TRUE(f.parse(args({"--name", "x", "--page-size=32", "--weight", "0.5", "--enable",
                            "--worker", "a", "--worker=b"}))
                  .ok());
  EXPECT_EQ(s, "x");
  EXPECT_EQ(n, 32u);
  EXPECT_EQ(d, 0.5);
  EXPECT_TRUE(b);
  EXPECT_EQ(many, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(f.was_set("--block-size"));
}

TEST(FlagSetTest, RejectsUnknownAndMalformed) {
  uint32_t n = 0;
  FlagSet f("usage");
  f.add("--n", &n, "");
  EXPECT_FALSE(f.parse(args({"--bogus", "1"})).ok());
  EXPECT_FALSE(f.parse(args({"--n", "-3"})).ok());
  EXPECT_FALSE(f.parse(args({"--n", "12abc"})).ok());
  EXPECT_FALSE(f.parse(args({"--n"})).ok());
}

TEST(FlagSetTest, CollectsUnknownFlagsForPassThrough) {
  uint32_t n = 0;
  FlagSet f("usage");
  f.add("--port", &n, "");
  std::vector<std::string> rest;
  ASSERT_TRUE(f.parse(args({"--port", "8", "--gpu-memory-utilization", "0.9", "--enforce-eager",
                            "--max-model-len=4096"}),
                      &rest)
                  .ok());
  EXPECT_EQ(n, 8u);
  EXPECT_EQ(rest, args({"--gpu-memory-utilization", "0.9", "--enforce-eager", "--max-model-len=4096"}));
}

TEST(HostPortTest, Parses) {
  auto hp = parse_host_port("127.0.0.1:2379");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "127.0.0.1");
  EXPECT_EQ(hp->port, 2379);
  auto v6 = parse_host_port("[::1]:80");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_FALSE(parse_host_port("nohost").ok());
  EXPECT_FALSE(parse_host_port("h:99999").ok());
  EXPECT_FALSE(parse_host_port("h:0").ok());
}

TEST(ServerConfigTest, DocumentedCommandLineParses) {
  bool help = false;
  std::string text;
  auto c = parse_server_flags(
      args({"--router-policy", "kv-aware", "--router-tokenizer-path", "Qwen/Qwen3-0.6B",
            "--kv-overlap-weight", "1.0", "--discovery-backend", "etcd", "--etcd-endpoint",
            "127.0.0.1:2379", "--request-transport", "http", "--kv-event-transport", "zmq",
            "--kv-prefill-overlap-weight", "20", "--kv-decode-overlap-weight", "2"}),
      &help, &text);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->port, 8000u);
  EXPECT_EQ(c->block_size, 16u);
  EXPECT_EQ(*c->kv_prefill_overlap_weight, 20.0);
  EXPECT_EQ(c->discovery_backend, DiscoveryBackend::kEtcd);
}

TEST(ServerConfigTest, KubernetesDiscoveryNeedsAWayToSelectPods) {
  bool help = false;
  std::string text;
  auto none = parse_server_flags(args({"--discovery-backend", "k8s"}), &help, &text);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--k8s-selector"), std::string::npos);
  EXPECT_FALSE(parse_server_flags(args({"--discovery-backend", "k8s", "--k8s-prefill-selector", "r=p"}),
                                  &help, &text).ok());
  EXPECT_FALSE(parse_server_flags(args({"--discovery-backend", "k8s", "--k8s-selector", "a=b",
                                        "--k8s-inference-pool", "pool"}), &help, &text).ok());
  auto ok = parse_server_flags(args({"--discovery-backend", "k8s", "--k8s-prefill-selector", "r=p",
                                     "--k8s-decode-selector", "r=d", "--k8s-namespace", "ml"}),
                               &help, &text);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->k8s_namespace, "ml");
  EXPECT_EQ(ok->k8s_decode_selector, "r=d");
}

TEST(ServerConfigTest, ImpossibleCombinationsAreClearStartupErrors) {
  bool help = false;
  std::string text;
  auto nats = parse_server_flags(
      args({"--worker", "http://a:1,kv=tcp://a:5557", "--kv-event-transport", "nats"}), &help, &text);
  ASSERT_FALSE(nats.ok());
  EXPECT_NE(nats.status().message().find("--kv-event-transport zmq"), std::string::npos);
  auto none = parse_server_flags(args({}), &help, &text);  // k8s by default, with no selector
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("k8s discovery (the default) needs --k8s-selector"), std::string::npos);
  EXPECT_FALSE(parse_server_flags(args({"--discovery-backend", "etcd"}), &help, &text).ok());
  EXPECT_FALSE(parse_server_flags(args({"--worker", "http://a:1", "--namespace", "a b"}), &help, &text).ok());
  EXPECT_FALSE(parse_server_flags(args({"--worker", "http://a:1", "--nats-server", "a:1"}), &help, &text).ok());
}

// The discovery, transport and log-level flags become enums at startup: the defaults, every
// contract word, and an unknown word that names what is supported.
TEST(ServerConfigTest, ChoiceFlagsBecomeEnumsAndUnknownWordsNameTheSupportedOnes) {
  bool help = false;
  std::string text;
  auto plain = parse_server_flags(args({"--worker", "http://a:1,kv=tcp://a:5557"}), &help, &text);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->discovery_backend, DiscoveryBackend::kStatic);
  EXPECT_EQ(plain->request_transport, RequestTransport::kHttp);
  EXPECT_EQ(plain->kv_event_transport, KvEventTransport::kZmq);
  auto bus = parse_server_flags(args({"--worker", "http://a:1"}), &help, &text);
  ASSERT_TRUE(bus.ok()) << bus.status().to_string();
  EXPECT_EQ(bus->request_transport, RequestTransport::kNats);
  EXPECT_EQ(bus->kv_event_transport, KvEventTransport::kNats);
  EXPECT_EQ(bus->nats_server, "nats://localhost:4222");
  EXPECT_EQ(bus->nats_namespace, "infera");
  EXPECT_EQ(plain->log_level, LogLevel::kInfo);
  EXPECT_EQ(name(plain->request_transport), "http");
  EXPECT_EQ(name(plain->kv_event_transport), "zmq");
  EXPECT_EQ(name(DiscoveryBackend::kKubernetes), "k8s");

  auto quiet = parse_server_flags(args({"--worker", "http://a:1", "--log-level", "warn"}), &help,
                                  &text);
  ASSERT_TRUE(quiet.ok());
  EXPECT_EQ(quiet->log_level, LogLevel::kWarn);

  auto grpc = parse_server_flags(args({"--worker", "http://a:1", "--request-transport", "grpc"}),
                                 &help, &text);
  ASSERT_FALSE(grpc.ok());
  EXPECT_EQ(grpc.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(grpc.status().message().find("unknown --request-transport 'grpc' (supported: http, nats)"),
            std::string::npos)
      << grpc.status().message();
  auto consul = parse_server_flags(args({"--discovery-backend", "consul"}), &help, &text);
  ASSERT_FALSE(consul.ok());
  EXPECT_NE(consul.status().message().find("supported: static, etcd"), std::string::npos);
  EXPECT_FALSE(
      parse_server_flags(args({"--worker", "http://a:1", "--log-level", "loud"}), &help, &text)
          .ok());
}

TEST(ServerConfigTest, TheAdminListenerNeedsBothHostAndPort) {
  bool help = false;
  std::string text;
  auto parse = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = {"--worker", "http://a:1"};
    all.insert(all.end(), extra.begin(), extra.end());
    return parse_server_flags(all, &help, &text);
  };
  EXPECT_FALSE(parse({"--admin-host", "127.0.0.1"}).ok());
  EXPECT_FALSE(parse({"--admin-port", "9000"}).ok());
  EXPECT_FALSE(parse({"--admin-host", "127.0.0.1", "--admin-port", "70000"}).ok());
  auto any = parse({"--admin-host", "127.0.0.1", "--admin-port", "0"});
  ASSERT_TRUE(any.ok()) << any.status().to_string();
  EXPECT_EQ(any->admin_port, 0);
  auto none = parse({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->admin_host.empty());
}

TEST(ServerConfigTest, HelpListsContractFlags) {
  bool help = false;
  std::string text;
  auto c = parse_server_flags(args({"--help"}), &help, &text);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(help);
  for (const char* flag : {"--router-policy", "--router-tokenizer-path", "--kv-overlap-weight",
                           "--kv-prefill-overlap-weight", "--kv-decode-overlap-weight",
                           "--block-size", "--page-size", "--discovery-backend", "--etcd-endpoint",
                           "--worker", "--request-transport", "--kv-event-transport"}) {
    EXPECT_NE(text.find(flag), std::string::npos) << flag;
  }
}

TEST(KeyValuesTest, SplitsPairsInOrderAndNamesABadItem) {
  auto kv = parse_key_values("kv=tcp://h:1,role=prefill,topic=");
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  ASSERT_EQ(kv->size(), 3u);
  EXPECT_EQ((*kv)[0], (KeyValue{"kv", "tcp://h:1"}));
  EXPECT_EQ((*kv)[1], (KeyValue{"role", "prefill"}));
  EXPECT_EQ((*kv)[2], (KeyValue{"topic", ""}));
  auto bad = parse_key_values("a=1,oops");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'oops'"), std::string::npos);
  EXPECT_FALSE(parse_key_values("a=1,,b=2").ok());
  EXPECT_FALSE(parse_key_values("a=1,").ok());
  EXPECT_FALSE(parse_key_values("").ok());
}

TEST(KeyValuesTest, NumbersAreFiniteAndWhole) {
  EXPECT_DOUBLE_EQ(*parse_number("0.75"), 0.75);
  EXPECT_DOUBLE_EQ(*parse_number("1e3"), 1000.0);
  for (const char* bad : {"", "x", "1.5x", "nan", "inf", "1,5"}) {
    EXPECT_FALSE(parse_number(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace infera::config
