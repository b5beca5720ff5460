// `infera engine mock` as a user runs it: the real binary on ephemeral ports, driven by the
// official OpenAI client (node, npm `openai`), timed against the model on the real clock,
// registered in a real etcd and stopped with SIGTERM and SIGKILL.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "infera/common/clock.h"
#include "infera/common/subprocess.h"
#include "infera/discovery/etcd.h"
#include "infera/engine/engine_core.h"
#include "infera/http/net.h"
#include "infera/mock/text_codec.h"

#include <boost/asio/use_future.hpp>
#include "infera/http/test_support.h"
#include "tests/support/dev_transports.h"
#include "tests/support/etcd_process.h"
#include "tests/support/etcd_reader.h"

namespace infera::mock {

using engine::EngineConfig;
using engine::EngineCore;
using engine::StepOutput;
using engine::TokenId;

namespace {

using http::testing::RawConn;
using std::chrono::milliseconds;
using SteadyTime = std::chrono::steady_clock::time_point;

const std::string kBinary = std::string(INFERA_BINARY_DIR) + "/bin/infera";

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("infera_engine_e2e_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// One `infera engine mock` process; ready once it printed its listening line.
class EngineProcess {
 public:
  EngineProcess(const std::string& name, std::vector<std::string> flags) : dir_(temp_dir(name)) {
    std::vector<std::string> argv = {kBinary, "engine", "mock", "--host", "127.0.0.1", "--port",
                                     "0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv = infera::testing::with_dev_transports(std::move(argv));  // no NATS server here
    SpawnOptions o;
    o.stdout_path = (dir_ / "stdout").string();
    o.stderr_path = (dir_ / "stderr").string();
    auto p = Subprocess::spawn(argv, o);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (!p.ok()) return;
    process_ = std::move(*p);
    static const std::regex kReady(R"(listening on http://127\.0\.0\.1:(\d+))");
    std::smatch m;
    const bool ready = testing::eventually(
        [&] {
          out_ = read_file(dir_ / "stdout");
          return std::regex_search(out_, m, kReady) || !process_.running();
        },
        milliseconds(60'000));
    if (ready && std::regex_search(out_, m, kReady)) {
      port_ = static_cast<uint16_t>(std::stoi(m[1].str()));
    } else {
      ADD_FAILURE() << "engine did not start; stderr:\n" << stderr_text();
    }
  }
  ~EngineProcess() {
    process_.stop(milliseconds(5000));
    std::filesystem::remove_all(dir_);
  }

  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& stdout_text() const { return out_; }
  std::string stderr_text() const { return read_file(dir_ / "stderr"); }
  Subprocess& process() { return process_; }

 private:
  std::filesystem::path dir_;
  Subprocess process_;
  std::string out_;
  uint16_t port_ = 0;
};

std::string request_text(std::string_view target, std::string_view body) {
  return "POST " + std::string(target) +
         " HTTP/1.1\r\nHost: e2e\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

TEST(MockEngineE2eTest, OfficialOpenAiClientParsesEveryResponse) {
  EngineProcess engine("openai", {"--model", "qwen3-mock", "--tokenizer",
                                  std::string(INFERA_MODELS_DIR) + "/qwen3", "--speedup-ratio",
                                  "100"});
  ASSERT_NE(engine.port(), 0);
  const std::filesystem::path log = temp_dir("openai_node") / "node.log";
  auto rc = run_process({INFERA_NODE, std::string(INFERA_SOURCE_DIR) +
                                          "/tests/tools/engine/openai_client.mjs",
                         engine.url(), "qwen3-mock"},
                        milliseconds(120'000), log.string());
  ASSERT_TRUE(rc.ok()) << rc.status().to_string();
  const std::string out = read_file(log);
  EXPECT_EQ(*rc, 0) << out << "\nengine stderr:\n" << engine.stderr_text();
  EXPECT_NE(out.find(R"({"ok":true)"), std::string::npos) << out;
  std::filesystem::remove_all(log.parent_path());
}

// The arrival time of each SSE event of one streamed response, read off a raw socket.
struct StreamTimes {
  SteadyTime sent;
  std::vector<SteadyTime> events;
  bool done = false;
};

StreamTimes time_stream(uint16_t port, const std::string& body, milliseconds deadline) {
  StreamTimes t;
  RawConn c(port);
  EXPECT_TRUE(c.ok());
  const std::string request = request_text("/v1/completions", body);
  t.sent = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.send_all(request));
  size_t scanned = 0;
  const SteadyTime end = t.sent + deadline;
  while (!t.done && std::chrono::steady_clock::now() < end) {
    const long n = c.read_some(milliseconds(1000));
    const SteadyTime now = std::chrono::steady_clock::now();
    if (n == 0) break;
    if (n < 0) continue;
    // Count the events completed in what arrived (each token is one "data: {...}\n\n").
    for (size_t pos; (pos = c.pending().find("data: ", scanned)) != std::string::npos;) {
      const size_t stop = c.pending().find("\n\n", pos);
      if (stop == std::string::npos) break;
      if (c.pending().compare(pos, 12, "data: [DONE]") == 0) {
        t.done = true;
      } else {
        t.events.push_back(now);
      }
      scanned = stop + 2;
    }
  }
  return t;
}

TEST(MockEngineE2eTest, TtftAndInterTokenGapsFollowTheModelAtSpeedup1) {
  // Model times long enough to measure on a shared machine: a 3,000-token prompt prefilled in
  // chunks of 256 tokens (12 steps, ~244 ms to the first token), then decode steps of ~34 ms
  // (the KV cache is 94 % full, near the decode polynomial's peak). A text prompt keeps the
  // request cheap to parse, so the client sees the model's time and little else.
  constexpr uint32_t kWords = 3000;
  constexpr uint32_t kOutputTokens = 24;
  EngineConfig config;
  config.num_gpu_blocks = 200;
  config.max_num_batched_tokens = 256;
  config.speedup_ratio = 1.0;
  EngineProcess engine("timing",
                       {"--num-gpu-blocks", std::to_string(config.num_gpu_blocks),
                        "--max-num-batched-tokens", std::to_string(config.max_num_batched_tokens),
                        "--speedup-ratio", "1", "--log-level", "warn"});
  ASSERT_NE(engine.port(), 0);

  std::string text;
  for (uint32_t i = 0; i < kWords; ++i) text += (i ? " w" : "w") + std::to_string(i);
  // The engine's synthetic codec (no --tokenizer): one id per word.
  const std::vector<TokenId> prompt =
      make_synthetic_codec(config.vocab_size, config.eos_token_id)->encode(text, true);
  ASSERT_EQ(prompt.size(), kWords);

  // The model's answer: the same core in virtual time.
  ManualClock clock;
  EngineCore model(config, clock);
  ASSERT_TRUE(model.add_request({1, prompt, kOutputTokens, 0, true}).ok());
  std::vector<double> model_ms;  // each token's time since arrival
  StepOutput out;
  while (auto next = model.next_event_time()) {
    clock.set(*next);
    while (model.poll(out)) {
      for (size_t i = 0; i < out.outputs.size(); ++i) model_ms.push_back(to_ms(out.end));
    }
  }
  ASSERT_EQ(model_ms.size(), kOutputTokens);
  const double model_ttft = model_ms[0];
  EXPECT_GT(model_ttft, 200.0);

  // Measured at most twice: a run whose first token or several arrivals are more than 5 % off
  // (a CPU wait on the shared 2-core machine: a clean-clone CI run, 2026-12-06, TTFT 260 ms
  // against 244 with every gap on the model) is measured once more with a prompt of the same
  // length that shares no block with the first (no cache hit). A model that is wrong misses
  // both times and fails below.
  StreamTimes t;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string words = text;
    if (attempt > 0) std::replace(words.begin(), words.end(), 'w', 'v');
    const std::string body = R"({"prompt":")" + words + R"(","max_tokens":)" +
                             std::to_string(kOutputTokens) + R"(,"ignore_eos":true,"stream":true})";
    t = time_stream(engine.port(), body, milliseconds(30'000));
    ASSERT_TRUE(t.done);
    ASSERT_EQ(t.events.size(), kOutputTokens);
    int off = 0;
    for (size_t i = 0; i < kOutputTokens; ++i) {
      const double at = std::chrono::duration<double, std::milli>(t.events[i] - t.sent).count();
      if (std::abs(at - model_ms[i]) > 0.05 * model_ms[i]) off += i == 0 ? 2 : 1;  // TTFT counts
    }
    if (off <= 1) break;
    std::printf("timing: attempt %d had %d arrivals off the model; measuring again\n", attempt + 1, off);
  }

  auto ms_since_sent = [&](SteadyTime x) {
    return std::chrono::duration<double, std::milli>(x - t.sent).count();
  };
  const double ttft = ms_since_sent(t.events[0]);
  EXPECT_NEAR(ttft, model_ttft, 0.05 * model_ttft) << "TTFT ms, measured vs model";

  // Every token arrives within 5 % of its modelled time since the request was sent: the gaps
  // follow the model and do not drift. One arrival may be late by up to one more model gap: a
  // wake-up that waits for a CPU on a shared 2-core machine delays one token without moving the
  // timeline, and 5 % of the first tokens' times is less than such a wait (a clean-clone CI run,
  // 2026-12-03: token 1 at 300 ms against 278, every later token on time). A model that drifts
  // or runs slow moves many arrivals and still fails.
  std::vector<double> gap_errors;  // |gap - model gap| / model gap, for the report
  int late = 0;
  for (size_t i = 0; i < kOutputTokens; ++i) {
    const double at = ms_since_sent(t.events[i]);
    const double one_gap = model_ms[kOutputTokens - 1] - model_ms[kOutputTokens - 2];
    EXPECT_NEAR(at, model_ms[i], 0.05 * model_ms[i] + one_gap) << "token " << i << " arrival ms";
    if (std::abs(at - model_ms[i]) > 0.05 * model_ms[i]) ++late;
    if (i == 0) continue;
    const double gap = at - ms_since_sent(t.events[i - 1]);
    const double want = model_ms[i] - model_ms[i - 1];
    gap_errors.push_back(std::abs(gap - want) / want);
  }
  // The mean gap within 5 %. Single gaps are reported, not asserted: on a shared 2-core machine
  // under load a wake-up waits a few ms for a CPU (Python's time.sleep shows the same), which
  // moves one gap up and the next down without moving the timeline.
  const double mean_gap =
      (ms_since_sent(t.events.back()) - ms_since_sent(t.events[0])) / (kOutputTokens - 1);
  const double mean_want = (model_ms.back() - model_ms[0]) / (kOutputTokens - 1);
  EXPECT_NEAR(mean_gap, mean_want, 0.05 * mean_want) << "mean inter-token gap ms";
  EXPECT_LE(late, 1) << "arrivals more than 5 % off their modelled time";
  std::sort(gap_errors.begin(), gap_errors.end());
  const auto within = std::count_if(gap_errors.begin(), gap_errors.end(),
                                    [](double e) { return e <= 0.05; });
  std::printf("timing: TTFT %.2f ms (model %.2f), mean gap %.2f ms (model %.2f), median gap "
              "error %.2f %%, %ld of %u gaps within 5%%\n",
              ttft, model_ttft, mean_gap, mean_want, 100 * gap_errors[gap_errors.size() / 2],
              static_cast<long>(within), kOutputTokens - 1);
}

TEST(MockEngineE2eTest, SigtermFinishesTheStreamInFlightAndExitsZero) {
  EngineProcess engine("sigterm", {"--speedup-ratio", "10", "--log-level", "warn"});
  ASSERT_NE(engine.port(), 0);
  RawConn c(engine.port());
  ASSERT_TRUE(c.send_all(request_text(
      "/v1/completions",
      R"({"prompt":"finish this","max_tokens":200,"ignore_eos":true,"stream":true})")));
  ASSERT_TRUE(c.read_until("data: ", milliseconds(10'000)));
  engine.process().signal(SIGTERM);
  http::testing::RawResponse r = c.read_response(milliseconds(30'000));
  ASSERT_TRUE(r.complete);
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
  size_t events = 0;
  for (size_t pos = 0; (pos = r.body.find("data: {", pos)) != std::string::npos; ++pos) ++events;
  EXPECT_EQ(events, 200u);
  const auto code = engine.process().wait_for(milliseconds(30'000));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << engine.stderr_text();
}

TEST(MockEngineE2eTest, UsageErrors) {
  const std::filesystem::path dir = temp_dir("usage");
  auto code = [&](std::vector<std::string> args) {
    args.insert(args.begin(), kBinary);
    auto rc = run_process(args, milliseconds(20'000), (dir / "log").string());
    EXPECT_TRUE(rc.ok());
    return rc.ok() ? *rc : -1;
  };
  EXPECT_EQ(code({"engine", "mock", "--bogus"}), 2);
  EXPECT_NE(read_file(dir / "log").find("--bogus"), std::string::npos);
  EXPECT_EQ(code({"engine", "mock", "--help"}), 0);
  EXPECT_NE(read_file(dir / "log").find("--kv-events-config"), std::string::npos);
  // The launchers (launcher_test.cc runs them for real): a missing engine is a startup error.
  EXPECT_EQ(code({"engine", "vllm", "--model", "x", "--vllm-bin", "/no/such/vllm"}), 1);
  EXPECT_NE(read_file(dir / "log").find("/no/such/vllm"), std::string::npos);
  EXPECT_EQ(code({"engine", "sglang"}), 2);
  EXPECT_NE(read_file(dir / "log").find("--model-path is required"), std::string::npos);
  EXPECT_EQ(code({"engine", "mock", "--host", "127.0.0.1", "--port", "0", "--tokenizer",
                  "/no/such/tokenizer"}),
            1);
  EXPECT_NE(read_file(dir / "log").find("/no/such/tokenizer"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// etcd

using infera::testing::EtcdReader;

TEST(MockEngineE2eTest, EtcdRecordLivesWithTheEngine) {
  auto etcd = testing::EtcdProcess::start();
  ASSERT_TRUE(etcd.ok()) << etcd.status().to_string();
  EtcdReader reader(etcd->endpoint());
  const std::vector<std::string> flags = {
      "--discovery-backend", "etcd", "--etcd-endpoint", etcd->endpoint(), "--etcd-lease-ttl-s",
      "2", "--role", "decode", "--model", "m", "--block-size", "32", "--kv-events-config",
      R"({"enable_kv_cache_events":true,"endpoint":"tcp://127.0.0.1:*",)"
      R"("replay_endpoint":"tcp://127.0.0.1:*","topic":"kv@m"})"};

  {
    EngineProcess engine("etcd_term", flags);
    ASSERT_NE(engine.port(), 0);
    auto kvs = reader.records();
    ASSERT_TRUE(kvs.has_value());
    ASSERT_EQ(kvs->size(), 1u);
    EXPECT_EQ(kvs->at(0).key, "infera/workers/decode/127.0.0.1:" + std::to_string(engine.port()));
    auto w = discovery::parse_worker_record(kvs->at(0).value);
    ASSERT_TRUE(w.ok()) << kvs->at(0).value;
    EXPECT_EQ(w->url, engine.url());
    EXPECT_EQ(w->role, discovery::Role::kDecode);
    EXPECT_EQ(w->engine, "mock");
    EXPECT_EQ(w->model, "m");
    EXPECT_EQ(w->block_size, 32u);
    EXPECT_EQ(w->topic, "kv@m");
    EXPECT_TRUE(w->kv_endpoint.starts_with("tcp://127.0.0.1:")) << w->kv_endpoint;
    EXPECT_TRUE(w->replay_endpoint.starts_with("tcp://127.0.0.1:")) << w->replay_endpoint;
    // The ready lines name the same endpoints.
    EXPECT_NE(engine.stdout_text().find(w->kv_endpoint), std::string::npos);

    // It stays for longer than its 2 s lease: the engine keeps the lease alive.
    const SteadyTime until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      auto now = reader.records();
      ASSERT_TRUE(now.has_value());
      ASSERT_EQ(now->size(), 1u) << "record vanished while the engine was alive";
      std::this_thread::sleep_for(milliseconds(250));  // sampling a duration, not a sync
    }

    engine.process().signal(SIGTERM);
    const auto code = engine.process().wait_for(milliseconds(30'000));
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 0) << engine.stderr_text();
    auto after = reader.records();
    ASSERT_TRUE(after.has_value());
    EXPECT_TRUE(after->empty()) << "SIGTERM deregisters before the process exits";
  }

  {
    EngineProcess engine("etcd_kill", flags);
    ASSERT_NE(engine.port(), 0);
    auto kvs = reader.records();
    ASSERT_TRUE(kvs.has_value());
    ASSERT_EQ(kvs->size(), 1u);
    engine.process().signal(SIGKILL);
    ASSERT_TRUE(engine.process().wait_for(milliseconds(10'000)).has_value());
    const SteadyTime killed = std::chrono::steady_clock::now();
    auto still = reader.records();
    ASSERT_TRUE(still.has_value());
    EXPECT_EQ(still->size(), 1u) << "a killed engine cannot deregister: the lease must expire";
    // Nobody deleted it: it goes when the lease expires.
    EXPECT_TRUE(testing::eventually(
        [&] {
          auto now = reader.records();
          return now.has_value() && now->empty();
        },
        milliseconds(15'000)));
    const double gone_after_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    EXPECT_LE(gone_after_s, 2.0 + 5.0);  // TTL plus etcd's lease-expiry granularity
    std::printf("etcd: record gone %.2f s after SIGKILL (lease 2 s)\n", gone_after_s);
  }
}

}  // namespace
}  // namespace infera::mock
