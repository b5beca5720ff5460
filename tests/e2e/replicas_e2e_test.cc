// Router replicas end to end (issue 24, docs/scale-out.md): three `infera server` processes over
// one real nats-server in front of four mock engines, clients spread across them. The shared
// prefix families land on their cached worker whichever replica takes the request; a replica
// scores with its siblings' in-flight load; garbage on the load subject is ignored and counted;
// a replica killed mid-run loses only its own in-flight requests (clients retry on a sibling),
// its load leaves the others' view when it falls silent, and a new replica copies the index
// from a ready sibling before it says it is ready (FAULT_ROW, docs/reliability.md).
#include <gtest/gtest.h>

#include <csignal>
#include <future>
#include <thread>

#include "infera/nats/client.h"
#include "infera/nats/url.h"
#include "tests/e2e/e2e_support.h"
#include "tests/support/nats_process.h"

namespace infera::e2e {
namespace {

std::vector<std::string> nats_flags(const testing::NatsProcess& n) {
  return {"--request-transport", "nats", "--kv-event-transport", "nats", "--nats-server", n.url()};
}

json::value routers(uint16_t port) {
  const Reply r = get(port, "/v1/admin/routers");
  EXPECT_EQ(r.status, 200) << r.body;
  return parse_json(r.body);
}

size_t peer_count(uint16_t port) {
  const json::value v = routers(port);
  const json::value* peers = find(v, "peers");
  return peers && peers->is_array() ? peers->get_array().size() : 0;
}

class ReplicasE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto n = testing::NatsProcess::start();
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    nats_ = std::move(*n);
    for (int i = 0; i < 4; ++i) {
      std::vector<std::string> flags = nats_flags(*nats_);
      flags.insert(flags.end(), {"--speedup-ratio", "0.5"});
      engines_.push_back(start_engine("rep_engine" + std::to_string(i), flags));
      ASSERT_TRUE(engines_.back()->ready()) << engines_.back()->log();
    }
    for (int i = 0; i < 3; ++i) {
      servers_.push_back(start_replica("rep_server" + std::to_string(i)));
      ASSERT_TRUE(servers_.back()->ready()) << servers_.back()->log();
    }
    for (const auto& s : servers_) {
      ASSERT_TRUE(eventually([&] {
        auto w = workers(s->port());
        return w && w->size() == 4 && peer_count(s->port()) == servers_.size() - 1;
      })) << s->log();
    }
  }

  std::unique_ptr<InferaProcess> start_replica(const std::string& name,
                                               std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = nats_flags(*nats_);
    for (const auto& e : engines_) flags.insert(flags.end(), {"--worker", e->url()});
    flags.insert(flags.end(), {"--router-policy", "kv-aware", "--upstream-first-byte-timeout-s", "10"});
    flags.insert(flags.end(), extra.begin(), extra.end());
    return start_server(name, flags);
  }

  std::optional<testing::NatsProcess> nats_;
  std::vector<std::unique_ptr<InferaProcess>> engines_;
  std::vector<std::unique_ptr<InferaProcess>> servers_;
};

TEST_F(ReplicasE2eTest, SharedPrefixFamiliesLandOnTheirCachedWorkerWhicheverReplicaTakesThem) {
  constexpr int kFamilies = 4;
  std::vector<std::vector<uint32_t>> prefixes;
  std::vector<std::string> home(kFamilies);
  for (int f = 0; f < kFamilies; ++f) prefixes.push_back(token_ids(1000 + f, 256));
  // Each replica learns a request's blocks from the worker's KV events on its own, and a
  // family's next request goes to another replica: wait until every replica's view of the
  // worker holds what the serving one's does, so that the test judges routing on the cache as
  // it is, not how fast the events travel on a loaded machine.
  const auto views_caught_up = [&](uint16_t serving, const std::string& worker) {
    const int64_t held = block_count(serving, worker);
    return eventually([&] {
      for (const auto& s : servers_) {
        if (block_count(s->port(), worker) < held) return false;
      }
      return true;
    });
  };
  int hits = 0, follow_ups = 0;
  for (int round = 0; round < 3; ++round) {
    for (int f = 0; f < kFamilies; ++f) {
      const uint16_t port = servers_[static_cast<size_t>((round + f) % 3)]->port();
      const Routed r = send_traced(port, concat(prefixes[f], token_ids(50 + round * 10 + f, 32)));
      ASSERT_EQ(r.status, 200);
      ASSERT_TRUE(views_caught_up(port, r.worker)) << "family " << f << " round " << round;
      if (round == 0) {
        home[f] = r.worker;
        continue;
      }
      ++follow_ups;
      EXPECT_EQ(r.worker, home[f]) << "family " << f << " round " << round;
      if (r.cached_tokens >= 256) ++hits;
    }
  }
  EXPECT_EQ(hits, follow_ups);
}

TEST_F(ReplicasE2eTest, AReplicaScoresWithItsSiblingsInFlightLoad) {
  // A long stream through replica 0; replica 1 routed nothing, yet sees it on the worker.
  auto stream = std::async(std::launch::async, [&] {
    return post(servers_[0]->port(), "/v1/completions",
                completion_body(token_ids(7, 64), 400, /*stream=*/true));
  });
  std::string busy;
  ASSERT_TRUE(eventually([&] {
    auto own = workers(servers_[0]->port());
    auto sibling = workers(servers_[1]->port());
    if (!own || !sibling) return false;
    for (const auto& [id, w] : *own) {
      if (w.inflight == 1 && sibling->at(id).active_requests == 1 && sibling->at(id).inflight == 0) {
        busy = id;
        return true;
      }
    }
    return false;
  })) << servers_[1]->log();
  const json::value v = routers(servers_[1]->port());
  EXPECT_GE(int_at(v, "load_sharing/outcomes/applied"), 1) << json::serialize(v);
  const Reply done = stream.get();
  EXPECT_EQ(done.status, 200);
  EXPECT_TRUE(done.complete);
  EXPECT_TRUE(eventually([&] {
    auto sibling = workers(servers_[1]->port());
    return sibling && sibling->at(busy).active_requests == 0;
  }));
}

TEST_F(ReplicasE2eTest, GarbageOnTheLoadSubjectIsIgnoredAndCounted) {
  auto servers = nats::parse_server_urls(nats_->url());
  ASSERT_TRUE(servers.ok());
  nats::ClientOptions o;
  o.servers = *servers;
  nats::Client peer(o);
  ASSERT_TRUE(peer.connect().ok());
  // Not msgpack; a map of another version; an op nobody knows; an add naming no known worker.
  const std::string garbage = "\xc1\x00garbage";
  const std::string v2 = "\x83\xa1" "v\x02\xa9" "router_id\xa4" "evil\xa3" "seq\x01";
  const std::string unknown_op =
      "\x84\xa1" "v\x01\xa9" "router_id\xa4" "evil\xa3" "seq\x01\xa2" "op\xa5" "steal";
  for (const std::string& p : {garbage, v2, unknown_op}) ASSERT_TRUE(peer.publish("infera.router.load", p).ok());
  ASSERT_TRUE(peer.flush().ok());
  for (const auto& s : servers_) {
    EXPECT_TRUE(eventually([&] { return int_at(routers(s->port()), "load_sharing/malformed") >= 3; }))
        << json::serialize(routers(s->port()));
  }
  // Routing carries on.
  EXPECT_EQ(send_traced(servers_[2]->port(), token_ids(9, 64)).status, 200);
  EXPECT_EQ(peer_count(servers_[0]->port()), 2u);  // no peer was made of the garbage
}

// FAULT_ROW: a replica killed with a stream in flight. Its client sees the stream cut (it fails
// clean: the answer is incomplete, never a wrong one) and retries on a sibling; the sibling's
// view drops the dead replica's load once it falls silent; a new replica copies the index from
// a ready sibling and is ready only once warm, its cache view equal to the sibling's.
// `infera bench --url` repeated spreads its requests over the replicas in turn, as a Service
// would, and sums what each routed.
TEST_F(ReplicasE2eTest, BenchSpreadsItsRequestsOverEveryReplicaInTurn) {
  auto routed_by = [&](uint16_t port) {
    int64_t n = 0;
    auto w = workers(port);
    if (w) {
      for (const auto& [id, row] : *w) n += row.requests;
    }
    return n;
  };
  std::vector<int64_t> before;
  for (const auto& s : servers_) before.push_back(routed_by(s->port()));
  const fs::path out = fs::temp_directory_path() /
                       ("infera_replicas_e2e_" + std::to_string(::getpid()) + "_bench.json");
  const fs::path log = fs::path(out).replace_extension(".log");
  auto rc = run_process({kBinary, "bench", "--url", servers_[0]->url(), "--url",
                         servers_[1]->url(), "--url", servers_[2]->url(), "--workload",
                         "prefix-families", "--groups", "2", "--system-tokens", "128",
                         "--question-tokens", "16", "--output-tokens", "4", "--requests", "9",
                         "--concurrency", "1", "--json", out.string()},
                        Ms(120'000), log.string());
  ASSERT_TRUE(rc.ok()) << rc.status().to_string();
  EXPECT_EQ(*rc, 0) << read_text(log);
  for (size_t i = 0; i < servers_.size(); ++i) {
    EXPECT_EQ(routed_by(servers_[i]->port()) - before[i], 3) << "replica " << i;
  }
  const json::value report = parse_json(read_text(out));
  int64_t summed = 0;
  const json::value* per_worker = find(report, "policies/server/requests_per_worker");
  ASSERT_TRUE(per_worker != nullptr && per_worker->is_array()) << json::serialize(report);
  for (const json::value& n : per_worker->get_array()) summed += n.to_number<int64_t>();
  EXPECT_EQ(summed, 9) << json::serialize(report);
  fs::remove(out);
  fs::remove(log);
}

TEST_F(ReplicasE2eTest, AStoppedReplicaSaysGoodbyeAndItsSiblingsDropItAtOnce) {
  // A request through replica 2 first, so that its siblings have heard of it beyond hellos.
  ASSERT_EQ(send_traced(servers_[2]->port(), concat(token_ids(55, 64), token_ids(56, 16))).status,
            200);
  servers_[2]->process().signal(SIGTERM);
  ASSERT_EQ(servers_[2]->process().wait_for(Ms(30'000)), 0) << servers_[2]->log();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(eventually([&] { return peer_count(servers_[i]->port()) == 1; }))
        << json::serialize(routers(servers_[i]->port()));
    // Dropped because it said goodbye, not because it fell silent.
    const json::value v = routers(servers_[i]->port());
    EXPECT_EQ(int_at(v, "load_sharing/peers_left/goodbye"), 1) << json::serialize(v);
    EXPECT_EQ(int_at(v, "load_sharing/peers_left/silent"), 0) << json::serialize(v);
  }
}

TEST_F(ReplicasE2eTest, AKilledReplicaLosesOnlyItsOwnStreamAndANewOneStartsWarm) {
  const std::vector<uint32_t> prefix = token_ids(77, 256);
  ASSERT_EQ(send_traced(servers_[1]->port(), concat(prefix, token_ids(78, 16))).status, 200);
  int sent = 0, ok = 0, retried = 0, failed_clean = 0, lost = 0;
  ++sent;
  auto stream = std::async(std::launch::async, [&] {
    return post(servers_[0]->port(), "/v1/completions",
                completion_body(token_ids(79, 64), 2000, /*stream=*/true));
  });
  std::string busy;
  ASSERT_TRUE(eventually([&] {
    auto sibling = workers(servers_[1]->port());
    if (!sibling) return false;
    for (const auto& [id, w] : *sibling) {
      if (w.active_requests == 1 && w.inflight == 0) busy = id;
    }
    return !busy.empty();
  }));
  servers_[0]->process().signal(SIGKILL);
  const Reply cut = stream.get();
  if (cut.status == 200 && cut.complete) {
    ++ok;  // finished before the kill landed
  } else {
    ++failed_clean;
    // The client retries on a sibling.
    const Reply again = post(servers_[1]->port(), "/v1/completions",
                             completion_body(token_ids(79, 64), 8, /*stream=*/true));
    if (again.status == 200 && again.complete) {
      ++retried;
    } else {
      ++lost;
    }
  }
  // Everything else keeps working through the survivors.
  for (int i = 0; i < 4; ++i) {
    ++sent;
    const Reply r = post(servers_[1 + i % 2]->port(), "/v1/completions",
                         completion_body(concat(prefix, token_ids(90 + i, 16)), 4));
    (r.status == 200 ? ok : lost) += 1;
  }
  // The dead replica's load leaves the sibling's view once it is silent.
  EXPECT_TRUE(eventually([&] {
    auto sibling = workers(servers_[1]->port());
    return sibling && sibling->at(busy).active_requests == 0 && peer_count(servers_[1]->port()) == 1;
  }, Ms(20'000))) << json::serialize(routers(servers_[1]->port()));

  // A new replica, told of a sibling, copies its index before it is ready.
  auto fresh = start_replica("rep_server_new", {"--peer", servers_[1]->url()});
  ASSERT_TRUE(fresh->ready()) << fresh->log();
  ASSERT_TRUE(eventually([&] { return get(fresh->port(), "/readyz").status == 200; })) << fresh->log();
  const json::value v = routers(fresh->port());
  EXPECT_EQ(string_at(v, "warm_start/source"), servers_[1]->url()) << json::serialize(v);
  EXPECT_EQ(int_at(v, "warm_start/workers"), 4) << json::serialize(v);
  EXPECT_GT(int_at(v, "warm_start/blocks"), 0) << json::serialize(v);
  const json::value* took = find(v, "warm_start/took_s");
  ASSERT_NE(took, nullptr);
  EXPECT_LT(took->to_number<double>(), 2.0);
  // Both follow the same events from here. The killed replica's stream may still be decoding
  // on its engine (nobody told it to stop), storing a block every 16 tokens, so one read each
  // can straddle a store: compare until they agree.
  std::string counts;
  EXPECT_TRUE(eventually([&] {
    counts.clear();
    bool same = true;
    for (const auto& e : engines_) {
      const auto mine = block_count(fresh->port(), e->id());
      const auto theirs = block_count(servers_[1]->port(), e->id());
      counts += e->id() + " " + std::to_string(mine) + "/" + std::to_string(theirs) + " ";
      same = same && mine == theirs;
    }
    return same;
  })) << counts;
  // Its copy is used: the prefix cached before it started hits on its first request.
  const Routed hit = send_traced(fresh->port(), concat(prefix, token_ids(99, 16)));
  EXPECT_GE(hit.cached_tokens, 256);
  EXPECT_EQ(lost, 0);
  std::printf("FAULT_ROW {\"fault\":\"router replica killed mid-stream; a new one warm-starts\","
              "\"sent\":%d,\"succeeded\":%d,\"retried\":%d,\"failed_clean\":%d,\"lost\":%d,"
              "\"max_latency_ms\":0}\n",
              sent, ok, retried, failed_clean, lost);
}

}  // namespace
}  // namespace infera::e2e
