// The prefill-aware load model live (issue 20): the real `infera server` with
// --kv-load-model prefill-aware in front of real `infera engine mock` processes. A burst of
// siblings that share a new prefix (best-of-N, an agent's fan-out) arrives before any KV event
// can: with predicted-on-route blocks they land on one worker, without them they spread.
#include <thread>

#include "tests/e2e/e2e_support.h"

namespace infera::e2e {
namespace {

constexpr int kSiblings = 8;
constexpr size_t kPrefixTokens = 4096;
constexpr size_t kSuffixTokens = 64;

// Sends `kSiblings` completions at once (one thread each), the shared prefix of `seed` plus
// each sibling's own suffix, and returns how many of them each worker served.
std::map<std::string, int64_t> burst(uint16_t server, uint64_t seed) {
  const std::optional<WorkerTable> before = workers(server);
  EXPECT_TRUE(before.has_value());
  const std::vector<uint32_t> prefix = token_ids(seed, kPrefixTokens);
  std::vector<int> status(kSiblings, 0);
  std::vector<std::thread> threads;
  for (int s = 0; s < kSiblings; ++s) {
    threads.emplace_back([&, s] {
      const auto ids =
          concat(prefix, token_ids(seed * 1000 + static_cast<uint64_t>(s) + 1, kSuffixTokens));
      status[static_cast<size_t>(s)] =
          post(server, "/v1/completions", completion_body(ids, 2)).status;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int s = 0; s < kSiblings; ++s)
    EXPECT_EQ(status[static_cast<size_t>(s)], 200) << "sibling " << s;
  std::map<std::string, int64_t> served;
  std::optional<WorkerTable> after;
  EXPECT_TRUE(eventually([&] {
    after = workers(server);
    if (!after) return false;
    for (const auto& [id, w] : *after) {
      if (w.inflight != 0 || w.active_requests != 0) return false;
    }
    return true;
  }));
  if (!before || !after) return served;
  for (const auto& [id, w] : *after) {
    auto old = before->find(id);
    const int64_t n = w.requests - (old == before->end() ? 0 : old->second.requests);
    if (n > 0) served[id] = n;
  }
  return served;
}

std::string describe(const std::map<std::string, int64_t>& served) {
  std::string s;
  for (const auto& [id, n] : served) s += " " + id + "=" + std::to_string(n);
  return s;
}

TEST(RoutingE2eTest, ABurstOfSiblingsLandsTogetherOnlyWithPredictedOnRoute) {
  std::vector<std::unique_ptr<InferaProcess>> engines;
  std::vector<std::string> ids;
  std::vector<std::string> flags = {"--router-policy", "kv-aware", "--kv-load-model",
                                    "prefill-aware"};
  for (int i = 0; i < 4; ++i) {
    // A quarter of the modelled GPU speed: a 4 k-token prefill takes ~350 ms, so the whole burst
    // is routed before the first sibling's blocks are stored (and their events reach the server),
    // even on a loaded, sanitized build.
    engines.push_back(start_engine("burst_e" + std::to_string(i), {"--speedup-ratio", "0.25"}));
    ASSERT_TRUE(engines.back()->ready());
    ids.push_back(engines.back()->id());
    flags.push_back("--worker");
    flags.push_back(engines.back()->worker_flag());
  }
  for (const bool predicted : {true, false}) {
    std::vector<std::string> f = flags;
    f.push_back("--kv-predicted-ttl-s");
    f.push_back(predicted ? "2" : "0");
    auto server = start_server(predicted ? "burst_on" : "burst_off", f);
    ASSERT_TRUE(server->ready());
    ASSERT_TRUE(eventually([&] { return fleet_is(server->port(), ids); })) << server->log();
    const auto served = burst(server->port(), predicted ? 11 : 22);  // a new prefix each time
    const double credited = metric_sum(get(server->port(), "/metrics").body,
                                       "infera_routing_predicted_on_route_tokens_total");
    std::printf("predicted-on-route %s: siblings per worker%s; predicted tokens credited %.0f\n",
                predicted ? "on" : "off", describe(served).c_str(), credited);
    if (predicted) {
      EXPECT_EQ(served.size(), 1u) << "the burst should land on one worker:" << describe(served);
      EXPECT_GE(credited, (kSiblings - 1) * static_cast<double>(kPrefixTokens) * 0.9);
    } else {
      EXPECT_GE(served.size(), 3u)
          << "without predictions the burst should spread:" << describe(served);
      EXPECT_EQ(credited, 0.0);
    }
  }
}

// `infera demo --compare-load-models` puts kv-aware with the prefill-aware load model beside
// the seed's model and round-robin (a small, fast run of the README's demo).
TEST(RoutingE2eTest, TheDemoComparesTheLoadModels) {
  const fs::path out = fs::temp_directory_path() / ("infera_demo_e2e_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const std::string log = (out.string() + ".log");
  const Result<int> code = run_process(
      {kBinary, "demo", "--compare-load-models", "--engines", "2", "--requests", "24", "--rate",
       "40", "--groups", "4", "--system-tokens", "1024", "--speedup-ratio", "50", "--out-dir",
       out.string()},
      Ms(120'000), log);
  const std::string text = read_text(log);
  ASSERT_TRUE(code.ok()) << code.status().to_string();
  ASSERT_EQ(*code, 0) << text;
  EXPECT_NE(text.find("kv-aware:prefill-aware vs round-robin"), std::string::npos) << text;
  const json::value report = parse_json(read_text(out / "infera-demo.json"));
  for (const char* row : {"round-robin", "kv-aware", "kv-aware:prefill-aware"}) {
    EXPECT_EQ(int_at(report, std::string("policies/") + row + "/errors"), 0) << row << "\n" << text;
    EXPECT_EQ(int_at(report, std::string("policies/") + row + "/requests"), 24) << row;
  }
  fs::remove_all(out);
  fs::remove(log);
}

}  // namespace
}  // namespace infera::e2e
