// The subscriber against a vLLM-like publisher in another process and language:
// tests/tools/events/fake_vllm_publisher.py (Debian python3-zmq + python3-msgpack) binds PUB
// and ROUTER on ports ZeroMQ picks, reports them on stdout, and runs a prefix cache whose true
// content it dumps on request. The test loses messages to force replay, overflows the replay
// buffer to force staleness (then clears the cache as /reset_prefix_cache does), and restarts
// the publisher to force a rebuild; after each, the router's KvIndex mirror must equal the
// publisher's cache block for block.

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json.hpp>

#include "infera/events/events_test_util.h"
#include "infera/events/subscriber.h"
#include "tests/support/python_publisher.h"

namespace infera::events {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using testing::wait_until;
using infera::testing::PythonPublisher;

constexpr kv::WorkerId kWorker = 1;
constexpr uint32_t kBs = 16;

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
