// The probes and the reload of `infera server`, in process: /livez and /readyz (no routable
// worker, a worker, draining), never behind the admin token; Gateway::reload applying a new
// config live (admin token, overlap weights, static workers, log level) while the rest is left
// for a restart. Real HTTP on loopback, fake engines that answer at once.
#include <gtest/gtest.h>

#include "tests/support/dev_transports.h"

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "infera/common/log.h"
#include "infera/config/server_config.h"
#include "infera/gateway/gateway.h"
#include "infera/http/client.h"
#include "infera/http/server.h"
#include "tests/support/etcd_process.h"
#include "tests/support/gateway_harness.h"

namespace infera {
namespace {

using testing::eventually;
using Flags = std::vector<std::string>;

// A worker that reports `block_size` on its /metrics and answers every completion at once.
class QuickEngine {
 public:
  explicit QuickEngine(http::EventLoop& loop, uint32_t block_size = 16) {
    http::Routes routes;
    routes.add(http::Method::kPost, "/v1/completions",
               [](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
                 co_return http::Response::json(
                     200, R"({"id":"c","object":"text_completion","choices":[{"index":0,)"
                          R"("text":"x","finish_reason":"length"}]})");
               });
    routes.add(http::Method::kGet, "/v1/models",
               [](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
                 co_return http::Response::json(
                     200, R"({"object":"list","data":[{"id":"m","object":"model"}]})");
               });
    routes.add(
        http::Method::kGet, "/metrics",
        [block_size](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
          co_return http::Response::text(
              200, "vllm:cache_config_info{block_size=\"" + std::to_string(block_size) +
                       "\"} 1\nvllm:num_requests_waiting 0\nvllm:num_requests_running 0\n"
                       "vllm:kv_cache_usage_perc 0\n");
        });
    server_ = http::Server::start(loop, {}, std::move(routes)).value();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  std::string id() const { return "127.0.0.1:" + std::to_string(server_->port()); }

 private:
  std::unique_ptr<http::Server> server_;
};

constexpr const char* kCompletion = R"({"model":"m","prompt":[1,2,3],"max_tokens":1})";

class LifecycleTest : public ::testing::Test {
 protected:
  // `infera server` over `workers` (each a --worker value) with `extra` flags.
  Flags server_flags(const Flags& workers, const Flags& extra = {}) {
    Flags args{"--host", "127.0.0.1", "--port", "0", "--log-level", "warn"};
    for (const std::string& w : workers) args.insert(args.end(), {"--worker", w});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  static config::ServerConfig parse(const Flags& args) {
    bool help = false;
    std::string text;
    auto c = config::parse_server_flags(infera::testing::with_dev_transports(args), &help, &text);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? *c : config::ServerConfig{};
  }
  void start(const Flags& args) {
    auto g = gateway::Gateway::create(parse(args));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gateway_ = std::move(*g);
    endpoint_ = http::Endpoint{"127.0.0.1", gateway_->port()};
  }
  http::Response call(http::Method method, std::string target, std::string body = {},
                      http::Headers headers = {}) {
    return testing::call(loop_, client_, endpoint_, method, std::move(target), std::move(body),
                         std::move(headers));
  }
  http::Response get(std::string target, http::Headers headers = {}) {
    return call(http::Method::kGet, std::move(target), {}, std::move(headers));
  }
  static std::string reason(const http::Response& r) {
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(r.body, ec);
    const boost::json::value* why = ec || !v.is_object() ? nullptr : v.get_object().if_contains("reason");
    return why && why->is_string() ? std::string(why->get_string()) : std::string();
  }
  // The overlap weight route-explain reports for a prompt (the router's weight in force).
  double explained_weight(const http::Headers& auth = {}) {
    const http::Response r = call(http::Method::kPost, "/v1/admin/route-explain", kCompletion, auth);
    EXPECT_EQ(r.status, 200) << r.body;
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(r.body, ec);
    if (ec) return -1;
    return v.at("stages").at(0).at("overlap_weight").to_number<double>();
  }

  void TearDown() override {
    if (gateway_) gateway_->shutdown(std::chrono::milliseconds(1000));
    set_log_level(saved_level_);  // a reload's log level is the process's
  }

  LifecycleTest() { set_log_level(LogLevel::kWarn); }

  LogLevel saved_level_ = log_level();
  http::EventLoop loop_{2};
  http::Client client_;
  std::unique_ptr<gateway::Gateway> gateway_;
  http::Endpoint endpoint_;
};

TEST_F(LifecycleTest, ReadyzWithARoutableWorkerIs200) {
  QuickEngine engine(loop_);
  start(server_flags({engine.url()}));
  const http::Response r = get("/readyz");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"status":"ready","routable_workers":1})");
  EXPECT_EQ(get("/livez").status, 200);
}

TEST_F(LifecycleTest, ReadyzWithoutARoutableWorkerIs503AndLivezStill200) {
  // The only worker has another block size: refused, never routed.
  QuickEngine wrong(loop_, 32);
  start(server_flags({wrong.url()}));
  http::Response r;
  ASSERT_TRUE(eventually([&] {
    r = get("/readyz");
    return r.status == 503;
  })) << r.body;
  EXPECT_EQ(r.body, R"({"status":"not ready","reason":"no routable worker"})");
  EXPECT_EQ(get("/livez").status, 200);
  EXPECT_EQ(get("/livez").body, R"({"status":"ok"})");
}

TEST_F(LifecycleTest, ReadyzWhileDrainingIs503AndEverythingElseIsServed) {
  QuickEngine engine(loop_);
  start(server_flags({engine.url()}));
  ASSERT_EQ(get("/readyz").status, 200);
  gateway_->begin_drain();
  const http::Response r = get("/readyz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(reason(r), "draining");
  EXPECT_EQ(get("/livez").status, 200);
  EXPECT_EQ(get("/health").status, 200);  // as before: the fleet's state only
  EXPECT_EQ(get("/metrics").status, 200);
  EXPECT_EQ(call(http::Method::kPost, "/v1/completions", kCompletion).status, 200);
  gateway_->begin_drain();  // idempotent
  EXPECT_EQ(reason(get("/readyz")), "draining");
}

TEST_F(LifecycleTest, ProbesNeedNoAdminTokenOnEitherListenerSetup) {
  QuickEngine engine(loop_);
  start(server_flags({engine.url()}, {"--admin-token", "s3cret"}));
  EXPECT_EQ(get("/metrics").status, 401);
  EXPECT_EQ(get("/livez").status, 200);
  EXPECT_EQ(get("/readyz").status, 200);
}

TEST_F(LifecycleTest, ReloadSwapsTheAdminTokenTheOldOneIsRefused) {
  QuickEngine engine(loop_);
  start(server_flags({engine.url()}, {"--admin-token", "old"}));
  const http::Headers old_token{{"Authorization", "Bearer old"}};
  const http::Headers new_token{{"Authorization", "Bearer new"}};
  ASSERT_EQ(get("/metrics", old_token).status, 200);
  auto plan = gateway_->reload(parse(server_flags({engine.url()}, {"--admin-token", "new"})));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(get("/metrics", old_token).status, 401);
  EXPECT_EQ(get("/metrics", new_token).status, 200);
  EXPECT_EQ(get("/v1/admin/workers", new_token).status, 200);
}

TEST_F(LifecycleTest, ReloadSwapsTheOverlapWeightsForTheNextDecisions) {
  QuickEngine engine(loop_);
  start(server_flags({engine.url()}));
  EXPECT_DOUBLE_EQ(explained_weight(), 1.0);
  auto plan = gateway_->reload(parse(server_flags({engine.url()}, {"--kv-overlap-weight", "4"})));
  ASSERT_TRUE(plan.ok());
  EXPECT_DOUBLE_EQ(explained_weight(), 4.0);
  EXPECT_EQ(call(http::Method::kPost, "/v1/completions", kCompletion).status, 200);
}

TEST_F(LifecycleTest, ReloadGivesAStaticFleetItsNewWorkers) {
  QuickEngine a(loop_), b(loop_);
  start(server_flags({a.url()}));
  auto plan = gateway_->reload(parse(server_flags({b.url()})));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->workers_added, Flags{b.id()});
  EXPECT_EQ(plan->workers_removed, Flags{a.id()});
  const http::Response workers = get("/v1/admin/workers");
  EXPECT_NE(workers.body.find(b.id()), std::string::npos) << workers.body;
  EXPECT_EQ(workers.body.find(a.id()), std::string::npos) << workers.body;
  EXPECT_EQ(get("/readyz").status, 200);
}

TEST_F(LifecycleTest, ReloadSetsTheLogLevelAndLeavesTheRestForARestart) {
  QuickEngine engine(loop_);
  const Flags running = server_flags({engine.url()});
  start(running);
  Flags next = running;
  next.insert(next.end(), {"--log-level", "error", "--max-queue", "7"});
  auto plan = gateway_->reload(parse(next));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(log_level(), LogLevel::kError);
  EXPECT_EQ(plan->not_applied, Flags{"--max-queue"});
  // Reloading the startup flags again puts the level back and has nothing left to restart for.
  auto back = gateway_->reload(parse(running));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(log_level(), LogLevel::kWarn);
  EXPECT_TRUE(back->not_applied.empty());
}

TEST_F(LifecycleTest, AReloadThatFailsChangesNothing) {
  QuickEngine engine(loop_);
  start(server_flags({engine.url()}, {"--admin-token", "old"}));
  Flags bad = server_flags({"not a url"}, {"--admin-token", "new"});
  EXPECT_FALSE(gateway_->reload(parse(bad)).ok());
  EXPECT_EQ(get("/metrics", {{"Authorization", "Bearer old"}}).status, 200);
  EXPECT_EQ(get("/readyz").status, 200);
}

}  // namespace
}  // namespace infera
