// The subscriber against a vLLM-like publisher in another process and language:
// tests/tools/events/fake_vllm_publisher.py (Debian python3-zmq + python3-msgpack) binds PUB
// and ROUTER on ports ZeroMQ picks, reports them on stdout, and runs a prefix cache whose true
// content it dumps on request. The test loses messages to force replay, overflows the replay
// buffer to force staleness (then clears the cache as /reset_prefix_cache does), and restarts
// the publisher to force a rebuild; after each, the router's KvIndex mirror must equal the
// publisher's cache block for block.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json.hpp>

#include "infera/events/events_test_util.h"
#include "infera/events/subscriber.h"

extern char** environ;

namespace infera::events {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using testing::wait_until;

constexpr kv::WorkerId kWorker = 1;
constexpr uint32_t kBs = 16;

// The publisher process, talked to line by line over pipes.
class PythonPublisher {
 public:
  explicit PythonPublisher(const std::vector<std::string>& args) {
    int in[2];
    int out[2];
    EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<std::string> argv = {"/usr/bin/python3",
                                     INFERA_SOURCE_DIR "/tests/tools/events/fake_vllm_publisher.py"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, argv[0].c_str(), &fa, nullptr, cargv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    to_child_ = in[1];
    from_child_ = out[0];
    const json::value ready = read_json();
    pub = std::string(ready.at("pub").as_string());
    replay = std::string(ready.at("replay").as_string());
  }

  ~PythonPublisher() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);  // our own child, by pid
      waitpid(pid_, nullptr, 0);
    }
    close(to_child_);
    close(from_child_);
  }

  json::value call(const json::object& cmd) {
    const std::string line = json::serialize(cmd) + "\n";
    EXPECT_EQ(write(to_child_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    return read_json();
  }

  // Asks the publisher to exit and reaps it (an engine process going away).
  void exit() {
    call({{"op", "exit"}});
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::string pub;
  std::string replay;

 private:
  json::value read_json(std::chrono::milliseconds timeout = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        const std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return json::parse(line);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{from_child_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        ADD_FAILURE() << "publisher did not answer in time";
        return json::object{{"error", "timeout"}};
      }
      char chunk[65536];
      const ssize_t n = read(from_child_, chunk, sizeof(chunk));
      if (n <= 0) {
        ADD_FAILURE() << "publisher exited";
        return json::object{{"error", "eof"}};
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string buffer_;
};

struct Variant {
  const char* name;
  std::vector<std::string> args;
};

class PythonPublisherTest : public ::testing::TestWithParam<Variant> {
 protected:
  PythonPublisherTest() : index_(kv::KvIndex::Options{kBs, 16}) {}

  static std::string port_of(const std::string& endpoint) {
    return endpoint.substr(endpoint.rfind(':') + 1);
  }

  std::unique_ptr<PythonPublisher> spawn(uint64_t seed, const std::string& pub_port = "0",
                                         const std::string& replay_port = "0") {
    std::vector<std::string> args = {"--seed", std::to_string(seed), "--buffer-steps", "64",
                                     "--capacity", "48", "--cpu-capacity", "24",
                                     "--pub-port", pub_port, "--replay-port", replay_port};
    args.insert(args.end(), GetParam().args.begin(), GetParam().args.end());
    return std::make_unique<PythonPublisher>(args);
  }

  // Waits until the subscriber has applied `seq`, the last sequence the publisher used.
  void sync(const KvEventSubscriber& sub, const json::value& reply) {
    const uint64_t seq = json::value_to<uint64_t>(reply.at("seq"));
    ASSERT_TRUE(wait_until([&] { return sub.stats().last_seq(0) == seq; }, 20s))
        << "subscriber stuck at " << sub.stats().last_seq(0).value_or(~0ull) << ", want " << seq;
  }

  std::vector<std::vector<uint32_t>> paths_of(const json::value& dump) {
    std::vector<std::vector<uint32_t>> paths;
    for (const auto& p : dump.at("paths").as_array()) {
      std::vector<uint32_t> tokens;
      for (const auto& t : p.as_array()) tokens.push_back(static_cast<uint32_t>(t.to_number<int64_t>()));
      paths.push_back(std::move(tokens));
    }
    return paths;
  }

  // The mirror equals the publisher's true cache: GPU block for block, and the CPU tier's size.
  void expect_mirror_equals(PythonPublisher& pub, bool check_cpu = true) {
    const json::value dump = pub.call({{"op", "dump"}});
    const auto gpu = json::value_to<uint64_t>(dump.at("gpu_blocks"));
    EXPECT_GT(gpu, 0u);
    EXPECT_TRUE(testing::mirror_equals(index_, kWorker, gpu, paths_of(dump), kBs));
    if (check_cpu) {
      EXPECT_EQ(index_.block_count(kWorker, kv::Medium::kCpu),
                json::value_to<uint64_t>(dump.at("cpu_blocks")));
    }
  }

  kv::KvIndex index_;
};

TEST_P(PythonPublisherTest, ReplayStalenessAndRestartKeepTheMirrorExact) {
  auto pub = spawn(7);
  SubscriberConfig cfg;
  cfg.worker = kWorker;
  cfg.worker_name = "127.0.0.1:8000";
  cfg.endpoint = pub->pub;
  cfg.replay_endpoint = pub->replay;
  cfg.topic = "kv-events";
  KvEventSubscriber sub(index_, cfg);
  ASSERT_TRUE(sub.start().ok());
  ASSERT_TRUE(pub->call({{"op", "wait_subscriber"}, {"timeout_ms", 10000}}).at("ok").as_bool());

  // 1. A clean stream.
  sync(sub, pub->call({{"op", "steps"}, {"n", 150}}));
  expect_mirror_equals(*pub);
  EXPECT_GT(sub.stats().applied.blocks_removed, 0u);  // eviction happened

  // 2. Every 4th message lost on the way: each gap is replayed in order. (In chunks that fit
  // the replay buffer: a subscriber busy replaying falls behind a publisher in a burst, and
  // then the gap is older than the buffer; part 3 shows what that does.)
  for (int chunk = 0; chunk < 5; ++chunk) {
    pub->call({{"op", "steps"}, {"n", 20}, {"drop_every", 4}});
    sync(sub, pub->call({{"op", "steps"}, {"n", 1}}));  // a live message after the last loss
  }
  expect_mirror_equals(*pub);
  StreamStats st = sub.stats();
  EXPECT_EQ(st.gaps, 25u);
  EXPECT_EQ(st.missed_batches, 25u);
  EXPECT_EQ(st.replayed_batches, 25u);
  EXPECT_EQ(st.replay_failures, 0u);
  EXPECT_EQ(st.state, SubscriberState::kLive);
  EXPECT_EQ(st.applied.rejected_total(), 0u);
  const auto& args = GetParam().args;
  if (std::find(args.begin(), args.end(), "--hybrid") != args.end()) {
    EXPECT_GT(st.applied.other_group_events, 0u);  // the sliding-window group stayed out
  }

  // 3. 80 lost in a row, beyond the 64-batch replay buffer: stale, hits 0.
  pub->call({{"op", "steps"}, {"n", 80}, {"drop_first", 80}});
  sync(sub, pub->call({{"op", "steps"}, {"n", 1}}));
  EXPECT_EQ(sub.state(), SubscriberState::kStale);
  EXPECT_EQ(sub.stats().stale_transitions, 1u);
  EXPECT_TRUE(index_.is_stale(kWorker));
  std::vector<uint32_t> hits;
  const json::value dump = pub->call({{"op", "dump"}});
  for (const auto& path : paths_of(dump)) {
    index_.find_overlaps(kv::seq_hashes(path, kBs), hits);
    EXPECT_EQ(hits.at(kWorker), 0u);
  }
  // /reset_prefix_cache: AllBlocksCleared is a clean slate; the mirror follows again. (The CPU
  // tier survives a GPU reset in the engine but not in the stale mirror: GPU only here.)
  pub->call({{"op", "clear"}});
  sync(sub, pub->call({{"op", "steps"}, {"n", 60}}));
  EXPECT_EQ(sub.state(), SubscriberState::kLive);
  EXPECT_FALSE(index_.is_stale(kWorker));
  expect_mirror_equals(*pub, /*check_cpu=*/false);
  EXPECT_EQ(sub.stats().recoveries, 1u);

  // 4. The engine restarts on the same ports: sequence back to 0, empty cache.
  const std::string pub_port = port_of(pub->pub);
  const std::string replay_port = port_of(pub->replay);
  pub->exit();
  pub = spawn(8, pub_port, replay_port);
  ASSERT_TRUE(pub->call({{"op", "wait_subscriber"}, {"timeout_ms", 10000}}).at("ok").as_bool());
  sync(sub, pub->call({{"op", "steps"}, {"n", 80}}));
  expect_mirror_equals(*pub);
  st = sub.stats();
  EXPECT_EQ(st.restarts, 1u);
  EXPECT_EQ(st.state, SubscriberState::kLive);
  EXPECT_EQ(st.decode_errors_total() + st.message_errors_total(), 0u);
  // Only the stale window rejected events: stores chained on blocks the reset mirror lacked.
  EXPECT_EQ(st.applied.rejected_total(),
            st.applied.rejected[static_cast<size_t>(kv::ApplyResult::kUnknownParent)]);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, PythonPublisherTest,
    ::testing::Values(Variant{"vllm_map_hybrid_offload", {"--format", "map", "--hybrid", "--offload"}},
                      Variant{"vllm_map_bytes_hashes", {"--format", "map", "--bytes-hashes", "--offload"}},
                      Variant{"vllm_array_hybrid", {"--format", "array", "--hybrid", "--offload"}},
                      Variant{"sglang_array", {"--format", "sglang", "--offload"}}),
    [](const ::testing::TestParamInfo<Variant>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace infera::events
