// `--request-transport nats --kv-event-transport nats` end to end: the real binary (server and
// mock engines) over a real nats-server (Debian), the documented repeated-prefix check, an
// independent NATS client (npm `nats`) reading the event envelope and calling a worker's request
// subject, the NATS server restarted mid-run (FAULT_ROW, docs/reliability.md), the same check
// through the vLLM launcher (its relays in front of a fake `vllm` process), and the startup lines
// of the defaults and of impossible combinations.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

#include "tests/e2e/e2e_support.h"
#include "tests/support/fake_engines.h"
#include "tests/support/nats_process.h"

namespace infera::e2e {
namespace {

std::vector<std::string> nats_flags(const testing::NatsProcess& n) {
  return {"--request-transport", "nats", "--kv-event-transport", "nats", "--nats-server", n.url()};
}

class NatsE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto n = testing::NatsProcess::start();
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    nats_ = std::move(*n);
    for (int i = 0; i < 2; ++i) {
      engines_.push_back(start_engine("nats_engine" + std::to_string(i), nats_flags(*nats_)));
      ASSERT_TRUE(engines_.back()->ready()) << engines_.back()->log();
    }
    std::vector<std::string> flags = nats_flags(*nats_);
    for (const auto& e : engines_) flags.insert(flags.end(), {"--worker", e->url()});
    flags.insert(flags.end(), {"--router-policy", "kv-aware", "--upstream-first-byte-timeout-s", "10"});
    server_ = start_server("nats_server", flags);
    ASSERT_TRUE(server_->ready()) << server_->log();
    ASSERT_TRUE(eventually([&] {
      auto w = workers(server_->port());
      return w && w->size() == 2;
    }));
  }

  std::optional<testing::NatsProcess> nats_;
  std::vector<std::unique_ptr<InferaProcess>> engines_;
  std::unique_ptr<InferaProcess> server_;
};

TEST_F(NatsE2eTest, RepeatedPrefixHitsTheCacheOverNatsEventsAndRequests) {
  const std::vector<uint32_t> prefix = token_ids(1, 256);
  const Routed first = send_traced(server_->port(), concat(prefix, token_ids(2, 32)));
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.cached_tokens, 0);
  const int64_t cached_view = block_count(server_->port(), first.worker);
  EXPECT_GE(cached_view, 256 / 16);  // the router's mirror, learned from NATS events
  const Routed second = send_traced(server_->port(), concat(prefix, token_ids(3, 32)));
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(second.worker, first.worker);  // the cached worker wins
  EXPECT_GE(second.cached_tokens, 256);    // the engine computed only the new part
  // Streaming is byte-exact SSE through the relay: chunks, usage, [DONE].
  const Reply stream = post(server_->port(), "/v1/completions",
                            completion_body(concat(prefix, token_ids(4, 8)), 40, /*stream=*/true));
  EXPECT_EQ(stream.status, 200);
  EXPECT_TRUE(stream.complete);
  EXPECT_NE(stream.body.find("data: [DONE]"), std::string::npos);
  const Reply admin = get(server_->port(), "/v1/admin/workers");
  EXPECT_NE(admin.body.find("infera.kv-events."), std::string::npos) << admin.body;
  EXPECT_NE(admin.body.find("\"live\""), std::string::npos) << admin.body;
}

TEST_F(NatsE2eTest, AnIndependentNatsClientReadsTheEnvelopeAndCallsAWorker) {
  const std::string script = std::string(INFERA_SOURCE_DIR) + "/tests/tools/nats/peer.mjs";
  const fs::path out = fs::temp_directory_path() / ("infera_nats_peer_" + std::to_string(::getpid()));
  std::vector<std::string> args = {INFERA_NODE, script, nats_->url(), engines_[0]->id()};
  // The peer subscribes first, then asks the server for one completion (through curl-free HTTP
  // in node), decodes the envelope it sees, and calls the worker's request subject itself.
  args.push_back(std::to_string(server_->port()));
  auto rc = run_process(args, Ms(60'000), out.string());
  ASSERT_TRUE(rc.ok()) << rc.status().to_string();
  const std::string text = read_text(out);
  EXPECT_EQ(*rc, 0) << text;
  EXPECT_NE(text.find("envelope ok"), std::string::npos) << text;
  EXPECT_NE(text.find("request ok"), std::string::npos) << text;
  fs::remove(out);
}

TEST_F(NatsE2eTest, ANatsServerRestartMidRunLosesNoRequest) {
  const std::vector<uint32_t> prefix = token_ids(7, 128);
  int sent = 0, ok = 0, failed_clean = 0, lost = 0;
  auto send = [&](uint64_t seed) {
    ++sent;
    const Reply r = post(server_->port(), "/v1/completions", completion_body(concat(prefix, token_ids(seed, 16)), 4));
    if (r.status == 200 && r.body.find("choices") != std::string::npos) {
      ++ok;
    } else if (r.status >= 400 && r.body.find("\"error\"") != std::string::npos) {
      ++failed_clean;
    } else {
      ++lost;
    }
  };
  for (int i = 0; i < 5; ++i) send(100 + i);
  nats_->kill();
  for (int i = 0; i < 3; ++i) send(200 + i);  // the bus is away: answered, not hung
  ASSERT_TRUE(nats_->restart().ok());
  // Everyone reconnects and re-subscribes; requests succeed again.
  ASSERT_TRUE(eventually([&] {
    const Reply r = post(server_->port(), "/v1/completions", completion_body(concat(prefix, token_ids(300, 16)), 4));
    return r.status == 200;
  }, Ms(60'000))) << server_->log() << engines_[0]->log();
  for (int i = 0; i < 5; ++i) send(400 + i);
  EXPECT_EQ(lost, 0);
  EXPECT_GE(ok, 10);
  std::printf("FAULT_ROW {\"fault\":\"nats-server killed and restarted mid-run\",\"sent\":%d,"
              "\"succeeded\":%d,\"retried\":0,\"failed_clean\":%d,\"lost\":%d,\"max_latency_ms\":0}\n",
              sent, ok, failed_clean, lost);
  // The mirror is repaired (catch-up replay after the reconnect): the prefix hits again.
  const Routed again = send_traced(server_->port(), concat(prefix, token_ids(500, 16)));
  EXPECT_GE(again.cached_tokens, 112);
}

// The worker side as production runs it: `infera engine vllm` with the NATS defaults in front of
// a `vllm` process (the fake of tests/support/fake_engines.h: the mock engine speaking HTTP and
// ZMQ only, as vLLM does). The launcher's relays carry its KV events and its requests over NATS;
// the router reaches it only through the bus and routes the repeated prefix to its cache.
TEST(NatsLauncherE2eTest, TheVllmLauncherCarriesEventsAndRequestsOverNats) {
  auto nats = testing::NatsProcess::start();
  ASSERT_TRUE(nats.ok()) << nats.status().to_string();
  struct Launched {
    fs::path dir;
    std::unique_ptr<InferaProcess> launcher;
  };
  std::vector<Launched> fleet;
  for (int i = 0; i < 2; ++i) {
    Launched w;
    w.dir = fs::temp_directory_path() /
            ("infera_nats_launcher_" + std::to_string(::getpid()) + "_" + std::to_string(i));
    fs::remove_all(w.dir);
    fs::create_directories(w.dir);
    testing::write_fake_engine(w.dir, "vllm", kBinary);
    const char* path = std::getenv("PATH");
    // No transport flag: requests and events over NATS are the launcher's defaults.
    w.launcher = std::make_unique<InferaProcess>(
        "nats_vllm" + std::to_string(i),
        Command{{kBinary, "engine", "vllm", "--model", std::string(kModel), "--host", "127.0.0.1",
                 "--port", "0", "--block-size", "16", "--enable-kv-events", "--nats-server",
                 nats->url()},
                {{"PATH", w.dir.string() + ":" + (path ? path : "/usr/bin:/bin")}},
                "ready on"});
    ASSERT_TRUE(w.launcher->ready()) << w.launcher->log();
    fleet.push_back(std::move(w));
  }
  // The engines were asked to publish on loopback only: the relay beside them reads the events.
  for (const Launched& w : fleet) {
    const std::string argv = read_text(w.dir / "argv");
    EXPECT_NE(argv.find("--kv-events-config\n"), std::string::npos) << argv;
    EXPECT_NE(argv.find("127.0.0.1"), std::string::npos) << argv;
  }
  std::vector<std::string> flags = nats_flags(*nats);
  for (const Launched& w : fleet) flags.insert(flags.end(), {"--worker", w.launcher->url()});
  flags.insert(flags.end(), {"--router-policy", "kv-aware"});
  auto server = start_server("nats_launcher_server", flags);
  ASSERT_TRUE(server->ready()) << server->log();
  ASSERT_TRUE(eventually([&] {
    auto t = workers(server->port());
    return t && t->size() == 2;
  })) << server->log();

  const std::vector<uint32_t> prefix = token_ids(11, 256);
  const Routed first = send_traced(server->port(), concat(prefix, token_ids(12, 32)));
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.cached_tokens, 0);
  EXPECT_GE(block_count(server->port(), first.worker), 256 / 16);  // learned over NATS
  const Routed second = send_traced(server->port(), concat(prefix, token_ids(13, 32)));
  EXPECT_EQ(second.worker, first.worker);
  EXPECT_GE(second.cached_tokens, 256);
  const Reply stream = post(server->port(), "/v1/completions",
                            completion_body(concat(prefix, token_ids(14, 8)), 24, /*stream=*/true));
  EXPECT_EQ(stream.status, 200);
  EXPECT_TRUE(stream.complete);
  EXPECT_TRUE(stream.body.ends_with("data: [DONE]\n\n")) << stream.body;

  // SIGTERM: each launcher stops its relays and its engine and exits 0.
  for (Launched& w : fleet) {
    w.launcher->process().signal(SIGTERM);
    const auto code = w.launcher->process().wait_for(Ms(30'000));
    ASSERT_TRUE(code.has_value()) << w.launcher->log();
    EXPECT_EQ(*code, 0) << w.launcher->log();
    fs::remove_all(w.dir);
  }
}

// Startup: the defaults need a NATS server and say so; impossible combinations are one line.
TEST(NatsStartupTest, DefaultsAndImpossibleCombinationsAreOneClearLine) {
  const fs::path dir = fs::temp_directory_path() / ("infera_nats_startup_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string nowhere = "nats://127.0.0.1:" + std::to_string(testing::free_port());
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"server", "--worker", "http://127.0.0.1:9", "--nats-server", nowhere}, "cannot reach NATS"},
      {{"server", "--worker", "http://127.0.0.1:9,kv=tcp://127.0.0.1:5557", "--kv-event-transport", "nats"},
       "pass --kv-event-transport zmq"},
      {{"server", "--worker", "http://127.0.0.1:9", "--discovery-backend", "etcd"},
       "pass --discovery-backend static"},
      {{"server"}, "k8s discovery (the default) needs --k8s-selector"},
      {{"engine", "mock", "--port", "0", "--nats-server", nowhere}, "cannot reach NATS"},
      {{"engine", "mock", "--port", "0", "--namespace", "a b"}, "--namespace"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.begin(), kBinary);
    auto rc = run_process(args, Ms(30'000), (dir / "out").string());
    ASSERT_TRUE(rc.ok());
    const std::string text = read_text(dir / "out");
    EXPECT_NE(*rc, 0) << text;
    EXPECT_NE(text.find(c.expect), std::string::npos) << c.args[0] << ": " << text;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace infera::e2e
