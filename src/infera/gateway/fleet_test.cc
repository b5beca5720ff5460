#include "infera/gateway/fleet.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infera/common/clock.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/http/net.h"
#include "infera/http/server.h"
#include "tests/support/etcd_process.h"

namespace infera::gateway {
namespace {

using discovery::Role;
using testing::eventually;
using Strings = std::vector<std::string>;

FleetMember member(std::string id, kv::WorkerId slot, Role role, Strings models,
                   Strings adapters = {}, std::string refused = {}) {
  FleetMember m;
  m.info.id = std::move(id);
  m.info.role = role;
  m.slot = slot;
  m.rt = std::make_shared<WorkerRuntime>();
  m.models = std::move(models);
  m.adapters = std::move(adapters);
  m.refused_reason = std::move(refused);
  return m;
}

// Requests routed at once on two loop threads take a worker's in-flight slots through
// try_take_slot: however they interleave, no more than the cap are taken.
TEST(WorkerRuntimeTest, SlotsTakenFromTwoThreadsAtOnceNeverExceedTheCap) {
  constexpr uint32_t kCap = 2;
  for (int round = 0; round < 200; ++round) {
    WorkerRuntime rt;
    std::atomic<int> taken{0};
    std::atomic<bool> go{false};
    auto take = [&] {
      while (!go.load()) {
      }
      for (int i = 0; i < 3; ++i) {
        if (rt.try_take_slot(kCap)) taken.fetch_add(1);
      }
    };
    std::thread a(take);
    std::thread b(take);
    go.store(true);
    a.join();
    b.join();
    ASSERT_EQ(taken.load(), 2) << "round " << round;
    EXPECT_EQ(rt.inflight.load(), kCap);
  }
  WorkerRuntime unlimited;
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(unlimited.try_take_slot(0));
  EXPECT_EQ(unlimited.inflight.load(), 100u);
}

TEST(FleetViewTest, SplitNeedsAnUnrefusedPrefillAndDecodeWorkerServingTheModel) {
  std::vector<FleetMember> ms;
  ms.push_back(member("p-a", 0, Role::kPrefill, {"a"}));
  ms.push_back(member("d-a", 1, Role::kDecode, {"a"}));
  ms.push_back(member("d-b", 2, Role::kDecode, {"b"}));
  ms.push_back(member("p-b", 3, Role::kPrefill, {"b"}, {}, "block size 32"));
  ms.push_back(member("both-c", 4, Role::kBoth, {"c"}));
  const FleetView view(std::move(ms));
  EXPECT_TRUE(view.split("a"));
  EXPECT_FALSE(view.split("b"));  // its prefill worker is refused
  EXPECT_FALSE(view.split("c"));  // role "both" is not a pool
  EXPECT_FALSE(view.split("nobody-serves-this"));
  EXPECT_TRUE(view.split(""));  // every worker serves "": p-a and d-a
}

TEST(FleetViewTest, AWorkerWhoseModelsAreUnknownServesEveryModel) {
  std::vector<FleetMember> ms;
  ms.push_back(member("p", 0, Role::kPrefill, {}));
  ms.push_back(member("d", 1, Role::kDecode, {"a"}));
  const FleetView view(std::move(ms));
  EXPECT_TRUE(view.split("a"));
  EXPECT_FALSE(view.split("z"));  // the decode worker does not serve it
  EXPECT_TRUE(view.lookup("z").models_known);
  EXPECT_FALSE(view.lookup("z").served);

  std::vector<FleetMember> unknown;
  unknown.push_back(member("w", 0, Role::kBoth, {}));
  EXPECT_FALSE(FleetView(std::move(unknown)).lookup("a").models_known);
  EXPECT_FALSE(FleetView().lookup("a").models_known);
}

TEST(FleetViewTest, LookupSaysWhetherAModelIsServedAndAsAnAdapter) {
  std::vector<FleetMember> ms;
  ms.push_back(member("w1", 0, Role::kBoth, {"base", "sql-lora"}, {"sql-lora"}));
  ms.push_back(member("w2", 1, Role::kBoth, {"other"}, {}, "block size 32"));
  const FleetView view(std::move(ms));
  const ModelLookup lora = view.lookup("sql-lora");
  EXPECT_TRUE(lora.models_known);
  EXPECT_TRUE(lora.served);
  EXPECT_TRUE(lora.adapter);
  EXPECT_TRUE(view.lookup("base").served);
  EXPECT_FALSE(view.lookup("base").adapter);
  EXPECT_TRUE(view.lookup("other").served);  // a refused worker's models still exist
  EXPECT_FALSE(view.lookup("nope").served);
  EXPECT_FALSE(view.lookup("").served);
  EXPECT_TRUE(view.lookup("").models_known);
  EXPECT_EQ(view.models(), (Strings{"base", "other", "sql-lora"}));
}

TEST(FleetViewTest, FindsMembersByIdAndBySlot) {
  std::vector<FleetMember> ms;
  ms.push_back(member("c", 9, Role::kBoth, {}));
  ms.push_back(member("a", 5, Role::kBoth, {}));
  ms.push_back(member("b", 0, Role::kBoth, {}));
  const FleetView view(std::move(ms));
  ASSERT_EQ(view.members.size(), 3u);
  EXPECT_EQ(view.members[0].info.id, "a");  // sorted by id
  EXPECT_EQ(view.members[2].info.id, "c");
  ASSERT_NE(view.find("b"), nullptr);
  EXPECT_EQ(view.find("b")->slot, 0u);
  EXPECT_EQ(view.find("d"), nullptr);
  ASSERT_NE(view.by_slot(9), nullptr);
  EXPECT_EQ(view.by_slot(9)->info.id, "c");
  EXPECT_EQ(view.by_slot(3), nullptr);
  EXPECT_EQ(view.by_slot(1000), nullptr);
}

// An engine's /v1/models and /metrics as the Fleet's probe reads them. With `hold_first`, the
// first /v1/models request is answered with `first_models` only once release() is called; every
// other one at once with `models`. The first model of a list is the base, the rest its adapters.
class ProbedEngine {
 public:
  explicit ProbedEngine(http::EventLoop& loop, uint32_t block_size = 16, bool hold_first = false)
      : hold_first_(hold_first) {
    http::Routes routes;
    routes.add(http::Method::kGet, "/v1/models",
               [this](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
                 const bool first = models_requests.fetch_add(1) == 0;
                 if (first && hold_first_) co_await held();
                 std::lock_guard lock(mu_);
                 co_return http::Response::json(200,
                                                list(first && hold_first_ ? first_models : models));
               });
    routes.add(http::Method::kGet, "/metrics",
               [this, block_size](http::Request&,
                                  http::ResponseWriter&) -> net::awaitable<http::Response> {
                 metrics_requests.fetch_add(1);
                 co_return http::Response::text(200, "vllm:cache_config_info{block_size=\"" +
                                                         std::to_string(block_size) + "\"} 1\n");
               });
    server_ = http::Server::start(loop, {}, std::move(routes)).value();
  }

  // Answers the held request.
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    if (held_) net::post(held_->get_executor(), [t = held_] { t->cancel(); });
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  std::string id() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  Strings models = {"base", "sql-lora"};  // set before the engine is probed
  Strings first_models = {"stale"};
  std::atomic<int> models_requests{0};
  std::atomic<int> metrics_requests{0};

 private:
  static std::string list(const Strings& names) {
    std::string data;
    for (size_t i = 0; i < names.size(); ++i) {
      data += (i == 0 ? "" : ",") + std::string(R"({"id":")") + names[i] + R"(","parent":)" +
              (i == 0 ? std::string("null") : "\"" + names[0] + "\"") + "}";
    }
    return R"({"object":"list","data":[)" + data + "]}";
  }

  // Waits (at most 10 s) until release(). The timer is cancelled on its own strand, after the
  // wait began: release() posts the cancel behind this coroutine's run up to async_wait.
  net::awaitable<void> held() {
    auto timer = std::make_shared<net::steady_timer>(co_await net::this_coro::executor);
    timer->expires_after(std::chrono::seconds(10));
    {
      std::lock_guard lock(mu_);
      if (released_) co_return;
      held_ = timer;
    }
    (void)co_await timer->async_wait(use_nothrow);
  }

  const bool hold_first_;
  std::mutex mu_;  // guards released_, held_ and the lists once the engine is probed
  bool released_ = false;
  std::shared_ptr<net::steady_timer> held_;
  std::unique_ptr<http::Server> server_;
};

class FleetTest : public ::testing::Test {
 protected:
  explicit FleetTest(uint32_t max_inflight = 0)
      : fleet_(Fleet::Options{.max_inflight_per_worker = max_inflight,
                              .engine_metrics_interval = std::chrono::milliseconds(0)},
               index_, load_, signals_, loop_, client_, clock_) {}

  void TearDown() override { loop_.stop(); }  // before the Fleet goes: probes run on it

  static discovery::WorkerInfo worker(const std::string& id, const std::string& url = {},
                                      Role role = Role::kBoth, const std::string& model = {}) {
    discovery::WorkerInfo w;
    w.id = id;
    w.url = url;  // "": no endpoint, so never probed
    w.role = role;
    w.model = model;
    return w;
  }
  void update(std::vector<discovery::WorkerInfo> workers) {
    fleet_.update(std::make_shared<const discovery::WorkerSet>(std::move(workers)));
  }
  const FleetMember& at(const std::string& id) {
    view_ = fleet_.view();  // keeps the member alive
    const FleetMember* m = view_->find(id);
    EXPECT_NE(m, nullptr) << id;
    return *m;
  }
  std::vector<kv::WorkerId> candidates(std::string_view model, bool* at_capacity = nullptr) {
    std::vector<kv::WorkerId> out;
    fleet_.candidates(*fleet_.view(), model, routing::Stage::kAggregated, {}, out, at_capacity);
    return out;
  }
  Strings models_of(const std::string& id) {
    const auto v = fleet_.view();
    const FleetMember* m = v->find(id);
    return m ? m->models : Strings{"<not a member>"};
  }

  http::EventLoop loop_{2};
  http::Client client_;
  ManualClock clock_;
  kv::KvIndex index_{kv::KvIndex::Options{16, 1024, nullptr}};
  kv::ActiveLoad load_{kv::ActiveLoad::Options{std::chrono::minutes(5), 1024}, clock_};
  kv::EngineSignals signals_{1024, clock_};
  Fleet fleet_;
  std::shared_ptr<const FleetView> view_;
};

TEST_F(FleetTest, WhatAProbeLearnsIsPublishedInANewView) {
  ProbedEngine engine(loop_, 16, /*hold_first=*/true);
  engine.first_models = {"base", "sql-lora"};
  update({worker(engine.id(), engine.url())});
  ASSERT_TRUE(eventually([&] { return engine.models_requests.load() == 1; }));
  const auto before = fleet_.view();
  engine.release();
  ASSERT_TRUE(eventually([&] { return at(engine.id()).block_size == 16; }));
  const FleetMember& m = at(engine.id());
  EXPECT_EQ(m.models, (Strings{"base", "sql-lora"}));
  EXPECT_EQ(m.adapters, (Strings{"sql-lora"}));
  const auto now = fleet_.view();
  EXPECT_TRUE(fleet_.lookup(*now, "sql-lora").adapter);
  EXPECT_TRUE(fleet_.lookup("base").served);
  EXPECT_FALSE(fleet_.lookup(*now, "other").served);
  EXPECT_EQ(fleet_.models(), (Strings{"base", "sql-lora"}));
  // The view taken before is a snapshot: it still knows nothing of the worker's models.
  EXPECT_TRUE(before->find(engine.id())->models.empty());
  EXPECT_FALSE(fleet_.lookup(*before, "base").models_known);
}

TEST_F(FleetTest, AWorkerReportingAnotherBlockSizeIsRefusedAndNeverACandidate) {
  ProbedEngine right(loop_, 16), wrong(loop_, 32);
  update({worker(right.id(), right.url(), Role::kPrefill),
          worker(wrong.id(), wrong.url(), Role::kDecode)});
  ASSERT_TRUE(eventually([&] { return at(wrong.id()).refused(); }));
  const FleetMember& refused = at(wrong.id());
  EXPECT_EQ(refused.block_size, 32u);
  EXPECT_NE(refused.refused_reason.find("block size 32"), std::string::npos);
  EXPECT_EQ(fleet_.health(refused), "refused");
  ASSERT_TRUE(eventually([&] { return at(right.id()).block_size == 16; }));
  EXPECT_EQ(candidates("base"), std::vector<kv::WorkerId>{at(right.id()).slot});
  // Without its decode pool the model's fleet is not split: the prefill worker serves it whole.
  EXPECT_FALSE(fleet_.split(*fleet_.view(), "base"));
}

TEST_F(FleetTest, ARecordWithAnotherBlockSizeJoinsRefused) {
  discovery::WorkerInfo w = worker("w", {}, Role::kBoth, "m");
  w.block_size = 32;
  update({w, worker("v", {}, Role::kBoth, "m")});
  EXPECT_TRUE(at("w").refused());
  EXPECT_EQ(candidates("m"), std::vector<kv::WorkerId>{at("v").slot});
}

TEST_F(FleetTest, ARepublishedViewKeepsEveryMembersSlotAndRuntime) {
  ProbedEngine probed(loop_, 16, /*hold_first=*/true), other(loop_);
  probed.first_models = {"base"};
  update({worker(probed.id(), probed.url()), worker(other.id(), other.url())});
  ASSERT_TRUE(eventually([&] { return at(other.id()).block_size == 16; }));
  const auto before = fleet_.view();
  const FleetMember& p = *before->find(probed.id());
  const FleetMember& o = *before->find(other.id());
  p.rt->inflight.store(3);
  probed.release();
  ASSERT_TRUE(eventually([&] { return at(probed.id()).block_size == 16; }));
  const auto after = fleet_.view();
  ASSERT_NE(after, before);
  EXPECT_EQ(after->find(probed.id())->models, (Strings{"base"}));
  EXPECT_EQ(after->find(probed.id())->slot, p.slot);
  EXPECT_EQ(after->find(probed.id())->rt, p.rt);
  EXPECT_EQ(after->find(probed.id())->rt->inflight.load(), 3u);
  EXPECT_EQ(after->find(other.id())->slot, o.slot);
  EXPECT_EQ(after->find(other.id())->rt, o.rt);
  EXPECT_EQ(after->by_slot(p.slot), after->find(probed.id()));
}

// The probe of a record that a changed one (here its topic) replaced answers late: what it says
// is not applied to the new record's member.
TEST_F(FleetTest, AProbeOfAReplacedRecordIsDropped) {
  ProbedEngine engine(loop_, 16, /*hold_first=*/true);
  engine.first_models = {"stale"};
  engine.models = {"fresh"};
  discovery::WorkerInfo w = worker(engine.id(), engine.url());
  update({w});
  ASSERT_TRUE(eventually([&] { return engine.models_requests.load() == 1; }));
  const std::shared_ptr<WorkerRuntime> replaced = at(engine.id()).rt;
  w.topic = "kv@2";
  update({w});
  ASSERT_TRUE(eventually([&] { return at(engine.id()).block_size == 16; }));
  EXPECT_EQ(models_of(engine.id()), (Strings{"fresh"}));
  engine.release();
  // The held probe asks for /metrics after it offered its models.
  ASSERT_TRUE(eventually([&] { return engine.metrics_requests.load() == 2; }));
  EXPECT_EQ(models_of(engine.id()), (Strings{"fresh"}));
  EXPECT_NE(at(engine.id()).rt, replaced);
}

TEST_F(FleetTest, AProbeOfADepartedWorkerIsDropped) {
  ProbedEngine engine(loop_, 16, /*hold_first=*/true);
  update({worker(engine.id(), engine.url())});
  ASSERT_TRUE(eventually([&] { return engine.models_requests.load() == 1; }));
  update({});
  const auto empty = fleet_.view();
  engine.release();
  ASSERT_TRUE(eventually([&] { return engine.metrics_requests.load() == 1; }));
  EXPECT_EQ(fleet_.view(), empty);  // nothing was published
  EXPECT_TRUE(empty->members.empty());
}

// A probe publishes its view from the current one, under the same lock as update(): a worker
// that joined while the probe was out is still there afterwards.
TEST_F(FleetTest, AProbeDoesNotLoseAnUpdateThatCameWhileItWasOut) {
  ProbedEngine engine(loop_, 16, /*hold_first=*/true);
  engine.first_models = {"base"};
  const discovery::WorkerInfo a = worker(engine.id(), engine.url());
  update({a});
  ASSERT_TRUE(eventually([&] { return engine.models_requests.load() == 1; }));
  update({a, worker("late", {}, Role::kBoth, "late-model")});
  const kv::WorkerId late_slot = at("late").slot;
  engine.release();
  ASSERT_TRUE(eventually([&] { return at(engine.id()).block_size == 16; }));
  EXPECT_EQ(models_of(engine.id()), (Strings{"base"}));
  ASSERT_NE(fleet_.view()->find("late"), nullptr);
  EXPECT_EQ(at("late").slot, late_slot);
  EXPECT_EQ(fleet_.models(), (Strings{"base", "late-model"}));
}

TEST_F(FleetTest, CandidatesAreTheWorkersThatServeTheModel) {
  update({worker("a", {}, Role::kBoth, "model-a"), worker("b", {}, Role::kBoth, "model-b"),
          worker("u")});  // u: models unknown, serves any
  const kv::WorkerId a = at("a").slot, b = at("b").slot, u = at("u").slot;
  EXPECT_EQ(candidates("model-a"), (std::vector<kv::WorkerId>{a, u}));
  EXPECT_EQ(candidates("model-b"), (std::vector<kv::WorkerId>{b, u}));
  EXPECT_EQ(candidates("model-z"), (std::vector<kv::WorkerId>{u}));
  EXPECT_EQ(candidates(""), (std::vector<kv::WorkerId>{a, b, u}));
  std::vector<kv::WorkerId> out;
  fleet_.candidates(*fleet_.view(), "model-a", routing::Stage::kAggregated, {u}, out);
  EXPECT_EQ(out, std::vector<kv::WorkerId>{a});  // u was tried already
}

TEST_F(FleetTest, CandidatesOfferWorkersInBackoffOnlyWhenNoOtherIs) {
  update({worker("a", {}, Role::kBoth, "m"), worker("b", {}, Role::kBoth, "m")});
  const kv::WorkerId a = at("a").slot, b = at("b").slot;
  fleet_.record_failure(at("a"));
  EXPECT_EQ(fleet_.health(at("a")), "backoff");
  EXPECT_EQ(candidates("m"), std::vector<kv::WorkerId>{b});
  fleet_.record_failure(at("b"));
  EXPECT_EQ(candidates("m"), (std::vector<kv::WorkerId>{a, b}));
  clock_.advance(std::chrono::seconds(1));  // a's and b's first backoff: 0.5 s
  fleet_.record_success(at("a"));
  EXPECT_EQ(candidates("m"), (std::vector<kv::WorkerId>{a, b}));
  EXPECT_EQ(fleet_.health(at("b")), "healthy");
}

class CappedFleetTest : public FleetTest {
 protected:
  CappedFleetTest() : FleetTest(/*max_inflight=*/1) {}
};

TEST_F(CappedFleetTest, CandidatesAtTheInFlightCapSayTheFleetIsAtCapacity) {
  update({worker("a", {}, Role::kBoth, "m"), worker("b", {}, Role::kBoth, "m")});
  const kv::WorkerId b = at("b").slot;
  bool at_capacity = true;
  at("a").rt->inflight.store(1);
  EXPECT_EQ(candidates("m", &at_capacity), std::vector<kv::WorkerId>{b});
  EXPECT_FALSE(at_capacity);
  at("b").rt->inflight.store(1);
  EXPECT_TRUE(candidates("m", &at_capacity).empty());
  EXPECT_TRUE(at_capacity);
  fleet_.record_failure(at("b"));  // in backoff and at its cap: still at capacity
  EXPECT_TRUE(candidates("m", &at_capacity).empty());
  EXPECT_TRUE(at_capacity);
}

TEST_F(FleetTest, OnASplitFleetAggregatedRequestsLeaveThePoolsOut) {
  update({worker("p", {}, Role::kPrefill, "m"), worker("d", {}, Role::kDecode, "m"),
          worker("x", {}, Role::kBoth, "m")});
  const auto v = fleet_.view();
  EXPECT_TRUE(fleet_.split(*v, "m"));
  EXPECT_EQ(candidates("m"), std::vector<kv::WorkerId>{at("x").slot});
  std::vector<kv::WorkerId> out;
  fleet_.candidates(*v, "m", routing::Stage::kPrefill, {}, out);
  EXPECT_EQ(out, std::vector<kv::WorkerId>{at("p").slot});
  fleet_.candidates(*v, "m", routing::Stage::kDecode, {}, out);
  EXPECT_EQ(out, std::vector<kv::WorkerId>{at("d").slot});
  for (const FleetMember& m : v->members) {
    EXPECT_EQ(could_serve(m, "m", routing::Stage::kAggregated, true, {}), m.info.id == "x");
  }
}

}  // namespace
}  // namespace infera::gateway
