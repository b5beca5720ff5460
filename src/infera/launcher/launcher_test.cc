// The launchers `infera engine vllm|sglang`: the exact command lines (--dry-run and the planned
// argv), then the real binary against fake engines: a `vllm` (or `python3`) script first on
// PATH records its argv and environment and execs `infera engine mock` with the same settings,
// so the launcher waits for a real /health, registers in a real etcd, forwards SIGTERM and
// exits with the engine's status.
#include "infera/launcher/launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "infera/common/subprocess.h"
#include "infera/discovery/etcd.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/http/net.h"
#include "tests/support/etcd_process.h"
#include "tests/support/etcd_reader.h"
#include "tests/support/dev_transports.h"
#include "tests/support/fake_engines.h"

namespace infera::launcher {
namespace {

using std::chrono::milliseconds;

const std::string kBinary = std::string(INFERA_BINARY_DIR) + "/bin/infera";

Result<LaunchPlan> plan_for(EngineKind kind, std::vector<std::string> args) {
  bool help_requested = false;
  std::string help;
  INFERA_ASSIGN_OR_RETURN(LauncherOptions o,
                          parse_launcher_flags(kind, args, &help_requested, &help));
  return plan_launch(o);
}

TEST(LauncherTest, VllmDryRunIsTheExactCommand) {
  auto plan = plan_for(EngineKind::kVllm, {"--model",
                                           "Qwen/Qwen3-0.6B",
                                           "--host",
                                           "0.0.0.0",
                                           "--port",
                                           "8000",
                                           "--block-size",
                                           "16",
                                           "--enable-kv-events",
                                           "--kv-events-port",
                                           "5557",
                                           "--kv-events-replay-port",
                                           "5558",
                                           "--etcd-endpoint",
                                           "127.0.0.1:2379",
                                           "--kv-event-transport",
                                           "zmq",
                                           "--role",
                                           "prefill",
                                           "--kv-transfer-config",
                                           R"({"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"})",
                                           "--dry-run",
                                           "--max-num-seqs",
                                           "8",
                                           "--gpu-memory-utilization=0.9",
                                           "--trust-remote-code"});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const std::string json =
      R"({"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557",)"
      R"("replay_endpoint":"tcp://*:5558","topic":"kv-events"})";
  EXPECT_EQ(plan->argv,
            (std::vector<std::string>{
                "vllm", "serve", "Qwen/Qwen3-0.6B", "--host", "0.0.0.0", "--port", "8000",
                "--block-size", "16", "--enable-prefix-caching", "--kv-events-config", json,
                "--kv-transfer-config", R"({"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"})",
                "--max-num-seqs", "8", "--gpu-memory-utilization=0.9", "--trust-remote-code"}));
  EXPECT_EQ(format_dry_run(*plan),
            "vllm serve Qwen/Qwen3-0.6B --host 0.0.0.0 --port 8000 --block-size 16 "
            "--enable-prefix-caching --kv-events-config '" +
                json +
                R"(' --kv-transfer-config '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}')"
                " --max-num-seqs 8 --gpu-memory-utilization=0.9 --trust-remote-code\n"
                "PYTHONHASHSEED=0\n");
  const discovery::WorkerInfo& w = plan->worker;
  EXPECT_EQ(w.url, "http://127.0.0.1:8000");
  EXPECT_EQ(w.id, "127.0.0.1:8000");
  EXPECT_EQ(w.kv_endpoint, "tcp://127.0.0.1:5557");
  EXPECT_EQ(w.replay_endpoint, "tcp://127.0.0.1:5558");
  EXPECT_EQ(w.topic, "kv-events");
  EXPECT_EQ(w.role, discovery::Role::kPrefill);
  EXPECT_EQ(w.block_size, 16u);
  EXPECT_EQ(w.model, "Qwen/Qwen3-0.6B");
  // With events over NATS (the default) the launcher's relay reads the sockets: no endpoint
  // in the record, and the same engine command.
  auto relayed = plan_for(EngineKind::kVllm, {"--model", "m", "--kv-events-port", "5557",
                                              "--kv-events-replay-port", "5558"});
  ASSERT_TRUE(relayed.ok()) << relayed.status().to_string();
  EXPECT_EQ(relayed->worker.kv_endpoint, "");
  EXPECT_EQ(relayed->worker.replay_endpoint, "");
  EXPECT_EQ(relayed->worker.topic, "kv-events");
  EXPECT_EQ(w.engine, "vllm");
}

// vLLM's PD examples run both sides with NixlConnector as kv_both; each engine on a host needs
// its own NIXL handshake port (vLLM's default 5600 would collide).
TEST(LauncherTest, VllmPrefillAndDecodeRolesGetNixlAndTheirOwnHandshakePort) {
  constexpr std::string_view kNixl = R"({"kv_connector":"NixlConnector","kv_role":"kv_both"})";
  ASSERT_EQ(std::getenv("VLLM_NIXL_SIDE_CHANNEL_PORT"), nullptr);
  uint32_t ports[2] = {0, 0};
  int i = 0;
  for (const char* role : {"prefill", "decode"}) {
    auto plan = plan_for(EngineKind::kVllm, {"--model", "m", "--role", role});
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    auto flag = std::find(plan->argv.begin(), plan->argv.end(), "--kv-transfer-config");
    ASSERT_NE(flag, plan->argv.end()) << role;
    ASSERT_NE(flag + 1, plan->argv.end());
    EXPECT_EQ(*(flag + 1), kNixl);
    for (const auto& [name, value] : plan->env) {
      if (name == "VLLM_NIXL_SIDE_CHANNEL_PORT") ports[i] = static_cast<uint32_t>(std::stoul(value));
    }
    EXPECT_GT(ports[i], 0u) << role;
    ++i;
  }
  // An aggregated worker has no connector unless asked.
  auto both = plan_for(EngineKind::kVllm, {"--model", "m"});
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(std::count(both->argv.begin(), both->argv.end(), "--kv-transfer-config"), 0);
  EXPECT_EQ(both->env.size(), 1u);

  // A port the operator set is theirs.
  ::setenv("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600", 1);
  auto own = plan_for(EngineKind::kVllm, {"--model", "m", "--role", "decode"});
  ::unsetenv("VLLM_NIXL_SIDE_CHANNEL_PORT");
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->env.size(), 1u);

  // The JSON is checked before anything starts.
  for (const char* bad : {"not json", "[1]", R"({"kv_connector":3})"}) {
    auto refused = plan_for(EngineKind::kVllm, {"--model", "m", "--kv-transfer-config", bad});
    EXPECT_FALSE(refused.ok()) << bad;
  }
}

TEST(LauncherTest, SglangDryRunIsTheExactCommand) {
  auto plan = plan_for(
      EngineKind::kSglang,
      {"--model-path", "m", "--host", "127.0.0.1", "--port", "30000", "--page-size", "32",
       "--kv-events-config", R"({"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv"})",
       "--served-model-name", "served", "--tp", "2", "--python-bin", "/opt/py/bin/python3",
       "--kv-event-transport", "zmq"});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(format_dry_run(*plan),
            "/opt/py/bin/python3 -m sglang.launch_server --model-path m --host 127.0.0.1 "
            "--port 30000 --page-size 32 --served-model-name served --kv-events-config "
            R"('{"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv"}' --tp 2)"
            "\nPYTHONHASHSEED=0\n");
  EXPECT_EQ(plan->worker.engine, "sglang");
  EXPECT_EQ(plan->worker.model, "served");
  EXPECT_EQ(plan->worker.block_size, 32u);
  EXPECT_EQ(plan->worker.kv_endpoint, "tcp://127.0.0.1:5557");
  EXPECT_EQ(plan->worker.replay_endpoint, "");
  EXPECT_EQ(plan->worker.topic, "kv");

  // --enable-kv-events with the endpoint flags: SGLang's JSON has no enable_kv_cache_events.
  auto flags =
      plan_for(EngineKind::kSglang,
               {"--model-path", "m", "--port", "30000", "--enable-kv-events", "--kv-events-port",
                "6000", "--kv-events-replay-port", "6001", "--kv-events-topic", "t"});
  ASSERT_TRUE(flags.ok()) << flags.status().to_string();
  EXPECT_EQ(flags->argv.back(),
            R"({"publisher":"zmq","endpoint":"tcp://*:6000","replay_endpoint":"tcp://*:6001",)"
            R"("topic":"t"})");
}

TEST(LauncherTest, SglangRolesBecomeItsDisaggregationFlagsAndTheBootstrapPortIsRegistered) {
  auto prefill = plan_for(EngineKind::kSglang, {"--model-path", "m", "--port", "30000", "--role",
                                                "prefill", "--disaggregation-bootstrap-port", "9100"});
  ASSERT_TRUE(prefill.ok()) << prefill.status().to_string();
  EXPECT_EQ(format_dry_run(*prefill),
            "python3 -m sglang.launch_server --model-path m --host 0.0.0.0 --port 30000 "
            "--page-size 16 --disaggregation-mode prefill --disaggregation-bootstrap-port 9100\n"
            "PYTHONHASHSEED=0\n");
  EXPECT_EQ(prefill->worker.bootstrap_port, 9100u);
  EXPECT_EQ(discovery::pd_protocol(prefill->worker), discovery::PdProtocol::kSglang);
  // SGLang's own flag names the role too; a decode worker has no bootstrap server.
  auto decode = plan_for(EngineKind::kSglang,
                         {"--model-path", "m", "--port", "30000", "--disaggregation-mode", "decode"});
  ASSERT_TRUE(decode.ok()) << decode.status().to_string();
  EXPECT_EQ(decode->worker.role, discovery::Role::kDecode);
  EXPECT_EQ(decode->worker.bootstrap_port, 0u);
  EXPECT_NE(format_dry_run(*decode).find("--disaggregation-mode decode\n"), std::string::npos);
  EXPECT_FALSE(plan_for(EngineKind::kSglang, {"--model-path", "m", "--role", "prefill",
                                              "--disaggregation-mode", "decode"})
                   .ok());
}

TEST(LauncherTest, UnsetPortsArePickedFreeAndDistinct) {
  auto plan = plan_for(EngineKind::kVllm, {"my-model", "--port", "0", "--enable-kv-events",
                                           "--kv-event-transport", "zmq"});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->argv[2], "my-model");  // vLLM's positional model
  static const std::regex kEndpoint(R"(tcp://127\.0\.0\.1:(\d+))");
  std::smatch kv;
  std::smatch replay;
  ASSERT_TRUE(std::regex_match(plan->worker.kv_endpoint, kv, kEndpoint));
  ASSERT_TRUE(std::regex_match(plan->worker.replay_endpoint, replay, kEndpoint));
  const std::string http_port = plan->argv[6];
  EXPECT_NE(http_port, "0");
  EXPECT_NE(kv[1].str(), "0");
  EXPECT_NE(kv[1].str(), replay[1].str());
  EXPECT_NE(kv[1].str(), http_port);
  EXPECT_EQ(plan->worker.url, "http://127.0.0.1:" + http_port);

  // A port 0 or * in the JSON is replaced too.
  auto json =
      plan_for(EngineKind::kVllm, {"--model", "m", "--port", "9000", "--kv-events-config",
                                   R"({"enable_kv_cache_events":true,"endpoint":"tcp://*:0",)"
                                   R"("replay_endpoint":"tcp://*:*","topic":"x","hwm":5})"});
  ASSERT_TRUE(json.ok()) << json.status().to_string();
  EXPECT_TRUE(std::regex_search(
      json->argv[11],
      std::regex(
          R"(^\{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://\*:[1-9]\d*",)"
          R"("replay_endpoint":"tcp://\*:[1-9]\d*","topic":"x","hwm":5\}$)")))
      << json->argv[11];

  // No events asked for: no --kv-events-config, a load-only record.
  auto none = plan_for(EngineKind::kVllm, {"--model", "m"});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->argv[6], "8000");  // the engines' default ports
  auto sglang = plan_for(EngineKind::kSglang, {"--model-path", "m"});
  ASSERT_TRUE(sglang.ok());
  EXPECT_EQ(sglang->argv[8], "30000");
  EXPECT_EQ(none->argv.size(), 10u);
  EXPECT_EQ(none->worker.kv_endpoint, "");
}

TEST(LauncherTest, BadFlagsAreErrors) {
  EXPECT_FALSE(plan_for(EngineKind::kVllm, {"--port", "1"}).ok());  // no model
  EXPECT_FALSE(plan_for(EngineKind::kSglang, {"--port", "1"}).ok());
  EXPECT_FALSE(plan_for(EngineKind::kVllm,
                        {"--model", "m", "--kv-events-config", "{}", "--kv-events-port", "1"})
                   .ok());
  EXPECT_FALSE(plan_for(EngineKind::kVllm, {"--model", "m", "--role", "both-ish"}).ok());
  EXPECT_FALSE(plan_for(EngineKind::kVllm, {"--model", "m", "--discovery-backend", "etcd"}).ok());
  EXPECT_FALSE(plan_for(EngineKind::kVllm, {"--model", "m", "--block-size", "0"}).ok());
  EXPECT_FALSE(plan_for(EngineKind::kVllm, {"--model", "m", "--kv-event-transport", "kafka"}).ok());
  EXPECT_FALSE(plan_for(EngineKind::kVllm, {"--model", "m", "--nats-server", "http://x:1"}).ok());
  // The other engine's flags are not the launcher's: they pass through.
  auto pass =
      plan_for(EngineKind::kSglang, {"--model-path", "m", "--port", "1", "--vllm-bin", "x"});
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(pass->argv.back(), "x");
}

TEST(LauncherTest, ShellQuoting) {
  EXPECT_EQ(shell_quote("Qwen/Qwen3-0.6B"), "Qwen/Qwen3-0.6B");
  EXPECT_EQ(shell_quote("--x=1,2"), "--x=1,2");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
}

// ---------------------------------------------------------------------------------------------
// The real binary

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> read_lines(const std::filesystem::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("infera_launcher_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(LauncherTest, BinaryDryRunPrintsTheCommandAndStartsNothing) {
  const auto dir = temp_dir("dry");
  auto rc = run_process({kBinary, "engine", "vllm", "--model", "m", "--port", "8000", "--vllm-bin",
                         "/no/such/vllm", "--dry-run", "--seed", "3"},
                        milliseconds(20'000), (dir / "out").string());
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(*rc, 0);
  EXPECT_EQ(read_file(dir / "out"),
            "/no/such/vllm serve m --host 0.0.0.0 --port 8000 --block-size 16 "
            "--enable-prefix-caching --seed 3\nPYTHONHASHSEED=0\n");
  rc = run_process({kBinary, "engine", "--help"}, milliseconds(20'000), (dir / "out").string());
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(*rc, 0);
  EXPECT_NE(read_file(dir / "out").find("--dry-run"), std::string::npos);
  rc = run_process({kBinary, "engine", "sglang", "--help"}, milliseconds(20'000),
                   (dir / "out").string());
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(*rc, 0);
  EXPECT_NE(read_file(dir / "out").find("--python-bin"), std::string::npos);
  std::filesystem::remove_all(dir);
}

using infera::testing::EtcdReader;

struct Launched {
  std::filesystem::path dir;
  Subprocess launcher;
  std::vector<std::string> argv;  // as the fake engine received it
  discovery::WorkerInfo worker;   // as registered
  std::string key;
  pid_t engine_pid = 0;
};

// Runs the launcher against its fake engine until the worker record is in etcd.
void launch(Launched& l, EngineKind kind, const std::string& name, EtcdReader& reader,
            std::vector<std::string> flags) {
  l.dir = temp_dir(name);
  testing::write_fake_engine(l.dir, engine_kind_name(kind), kBinary);
  std::vector<std::string> argv = {kBinary, "engine", std::string(engine_kind_name(kind))};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv = testing::with_dev_transports(std::move(argv));
  SpawnOptions o;
  const char* path = std::getenv("PATH");
  o.env = {{"PATH", l.dir.string() + ":" + (path ? path : "/usr/bin:/bin")}};
  o.stdout_path = (l.dir / "stdout").string();
  o.stderr_path = (l.dir / "stderr").string();
  auto p = Subprocess::spawn(argv, o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  l.launcher = std::move(*p);
  std::vector<discovery::EtcdKeyValue> kvs;
  const bool registered = testing::eventually(
      [&] {
        if (!l.launcher.running()) return true;
        auto r = reader.records();
        if (!r || r->empty()) return false;
        kvs = *r;
        return true;
      },
      milliseconds(60'000));
  ASSERT_TRUE(registered && l.launcher.running()) << "stdout:\n"
                                                  << read_file(l.dir / "stdout") << "\nstderr:\n"
                                                  << read_file(l.dir / "stderr");
  ASSERT_EQ(kvs.size(), 1u);
  l.key = kvs[0].key;
  auto w = discovery::parse_worker_record(kvs[0].value);
  ASSERT_TRUE(w.ok()) << kvs[0].value;
  l.worker = *w;
  l.argv = read_lines(l.dir / "argv");
  l.engine_pid = static_cast<pid_t>(std::stol(read_file(l.dir / "pid")));
  // The ready line follows the registration.
  EXPECT_TRUE(testing::eventually([&] {
    return read_file(l.dir / "stdout").find("ready on " + l.worker.url) != std::string::npos;
  })) << read_file(l.dir / "stdout");
}

bool process_gone(pid_t pid) {
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

std::string port_of(const std::string& endpoint) {
  return endpoint.substr(endpoint.rfind(':') + 1);
}

class LauncherE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = testing::EtcdProcess::start();
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    etcd_ = std::make_unique<testing::EtcdProcess>(std::move(*e));
    reader_ = std::make_unique<EtcdReader>(etcd_->endpoint());
  }

  std::unique_ptr<testing::EtcdProcess> etcd_;
  std::unique_ptr<EtcdReader> reader_;
};

TEST_F(LauncherE2eTest, VllmRegistersAndStopsCleanlyOnSigterm) {
  Launched l;
  launch(l, EngineKind::kVllm, "vllm", *reader_,
         {"--model", "fake-model", "--host", "127.0.0.1", "--port", "0", "--block-size", "16",
          "--enable-kv-events", "--etcd-endpoint", etcd_->endpoint(), "--role", "decode",
          "--startup-timeout-s", "60", "--max-num-seqs", "8", "--num-gpu-blocks-override", "512"});
  if (HasFatalFailure()) return;

  // The engine's command line, exactly, with the ports the launcher picked.
  const std::string port = port_of(l.worker.url);
  const std::string kv = port_of(l.worker.kv_endpoint);
  const std::string replay = port_of(l.worker.replay_endpoint);
  EXPECT_EQ(l.argv,
            (std::vector<std::string>{
                "serve", "fake-model", "--host", "127.0.0.1", "--port", port, "--block-size", "16",
                "--enable-prefix-caching", "--kv-events-config",
                R"({"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:)" + kv +
                    R"(","replay_endpoint":"tcp://*:)" + replay + R"(","topic":"kv-events"})",
                "--kv-transfer-config", R"({"kv_connector":"NixlConnector","kv_role":"kv_both"})",
                "--max-num-seqs", "8", "--num-gpu-blocks-override", "512"}));
  const std::vector<std::string> env = read_lines(l.dir / "env");
  EXPECT_NE(std::find(env.begin(), env.end(), "PYTHONHASHSEED=0"), env.end());
  // A decode worker's NIXL handshake port, picked free (not vLLM's shared default).
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& e) {
                            return e.starts_with("VLLM_NIXL_SIDE_CHANNEL_PORT=") &&
                                   e != "VLLM_NIXL_SIDE_CHANNEL_PORT=5600";
                          }),
            1);
  // The engine must see SIGTERM/SIGINT: the launcher's blocked signals are not inherited.
  EXPECT_EQ(read_file(l.dir / "signals"), "SigBlk:\t0000000000000000\n");  // read -r: tab kept

  // The record: the mock engine's format, engine "vllm".
  EXPECT_EQ(l.key, "infera/workers/decode/127.0.0.1:" + port);
  EXPECT_EQ(l.worker.url, "http://127.0.0.1:" + port);
  EXPECT_EQ(l.worker.kv_endpoint, "tcp://127.0.0.1:" + kv);
  EXPECT_EQ(l.worker.replay_endpoint, "tcp://127.0.0.1:" + replay);
  EXPECT_EQ(l.worker.topic, "kv-events");
  EXPECT_EQ(l.worker.role, discovery::Role::kDecode);
  EXPECT_EQ(l.worker.block_size, 16u);
  EXPECT_EQ(l.worker.model, "fake-model");
  EXPECT_EQ(l.worker.engine, "vllm");
  EXPECT_TRUE(testing::port_open(static_cast<uint16_t>(std::stoi(port))));

  // SIGTERM: deregistered, the engine stopped, the launcher exits with the engine's status.
  l.launcher.signal(SIGTERM);
  const auto code = l.launcher.wait_for(milliseconds(60'000));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << read_file(l.dir / "stderr");
  auto after = reader_->records();
  ASSERT_TRUE(after.has_value());
  EXPECT_TRUE(after->empty());
  EXPECT_TRUE(process_gone(l.engine_pid));
  EXPECT_FALSE(testing::port_open(static_cast<uint16_t>(std::stoi(port))));
  std::filesystem::remove_all(l.dir);
}

TEST_F(LauncherE2eTest, SglangRegistersAndStopsCleanlyOnSigint) {
  Launched l;
  launch(l, EngineKind::kSglang, "sglang", *reader_,
         {"--model-path", "fake-sglang", "--host", "127.0.0.1", "--port", "0", "--page-size", "32",
          "--enable-kv-events", "--etcd-endpoint", etcd_->endpoint(), "--role", "prefill",
          "--disaggregation-bootstrap-port", "0", "--max-num-seqs", "4"});
  if (HasFatalFailure()) return;

  const std::string port = port_of(l.worker.url);
  const std::string kv = port_of(l.worker.kv_endpoint);
  const std::string replay = port_of(l.worker.replay_endpoint);
  EXPECT_EQ(l.argv,
            (std::vector<std::string>{
                "-m", "sglang.launch_server", "--model-path", "fake-sglang", "--host", "127.0.0.1",
                "--port", port, "--page-size", "32", "--kv-events-config",
                R"({"publisher":"zmq","endpoint":"tcp://*:)" + kv +
                    R"(","replay_endpoint":"tcp://*:)" + replay + R"(","topic":"kv-events"})",
                "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port",
                std::to_string(l.worker.bootstrap_port), "--max-num-seqs", "4"}));
  const std::vector<std::string> env = read_lines(l.dir / "env");
  EXPECT_NE(std::find(env.begin(), env.end(), "PYTHONHASHSEED=0"), env.end());
  EXPECT_EQ(l.key, "infera/workers/prefill/127.0.0.1:" + port);
  EXPECT_EQ(l.worker.engine, "sglang");
  EXPECT_EQ(l.worker.block_size, 32u);
  EXPECT_EQ(l.worker.model, "fake-sglang");
  EXPECT_EQ(l.worker.role, discovery::Role::kPrefill);
  EXPECT_GT(l.worker.bootstrap_port, 0u);  // picked free, passed on and registered
  EXPECT_EQ(discovery::pd_protocol(l.worker), discovery::PdProtocol::kSglang);

  l.launcher.signal(SIGINT);
  const auto code = l.launcher.wait_for(milliseconds(60'000));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << read_file(l.dir / "stderr");
  auto after = reader_->records();
  ASSERT_TRUE(after.has_value());
  EXPECT_TRUE(after->empty());
  EXPECT_TRUE(process_gone(l.engine_pid));
  std::filesystem::remove_all(l.dir);
}

TEST_F(LauncherE2eTest, EngineExitingFirstDeregistersAndPassesItsStatusOn) {
  Launched l;
  launch(
      l, EngineKind::kVllm, "exit", *reader_,
      {"--model", "m", "--host", "127.0.0.1", "--port", "0", "--etcd-endpoint", etcd_->endpoint()});
  if (HasFatalFailure()) return;
  ASSERT_GT(l.engine_pid, 0);
  ::kill(l.engine_pid, SIGKILL);
  const auto code = l.launcher.wait_for(milliseconds(60'000));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 128 + SIGKILL);
  auto after = reader_->records();
  ASSERT_TRUE(after.has_value());
  EXPECT_TRUE(after->empty());
  std::filesystem::remove_all(l.dir);
}

TEST_F(LauncherE2eTest, EngineThatNeverBecomesHealthyIsStoppedAtTheDeadline) {
  const auto dir = temp_dir("unhealthy");
  {
    std::ofstream out(dir / "vllm");
    out << "#!/bin/sh\nexec sleep 600\n";
  }
  std::filesystem::permissions(dir / "vllm", std::filesystem::perms::owner_all);
  auto rc = run_process({kBinary, "engine", "vllm", "--model", "m", "--host", "127.0.0.1", "--port",
                         "0", "--vllm-bin", (dir / "vllm").string(), "--startup-timeout-s", "1",
                         "--shutdown-timeout-s", "5", "--etcd-endpoint", etcd_->endpoint(),
                         "--request-transport", "http", "--kv-event-transport", "zmq"},
                        milliseconds(30'000), (dir / "log").string());
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(*rc, 1) << read_file(dir / "log");
  EXPECT_NE(read_file(dir / "log").find("not healthy"), std::string::npos)
      << read_file(dir / "log");
  auto after = reader_->records();
  ASSERT_TRUE(after.has_value());
  EXPECT_TRUE(after->empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace infera::launcher
