// Discovery against a real etcd (Debian etcd-server) on free loopback ports.
#include "infera/discovery/etcd.h"

#include <gtest/gtest.h>

#include <mutex>

#include "infera/http/net.h"
#include "tests/support/etcd_process.h"

namespace infera::discovery {
namespace {

using testing::eventually;

WorkerInfo worker(uint16_t port, Role role = Role::kBoth) {
  auto w = parse_worker_flag("http://127.0.0.1:" + std::to_string(port) +
                             ",kv=tcp://127.0.0.1:5557,role=" + std::string(role_name(role)));
  EXPECT_TRUE(w.ok());
  w->block_size = 16;
  w->engine = "mock";
  return *w;
}

// The fleet as the source last delivered it.
class Seen {
 public:
  void operator()(WorkerSetPtr set) {
    std::lock_guard lock(mu_);
    last_ = std::move(set);
    ++updates_;
  }
  std::vector<std::string> ids() {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    if (last_) {
      for (const auto& w : *last_) out.push_back(w.id);
    }
    return out;
  }
  size_t size() { return ids().size(); }

 private:
  std::mutex mu_;
  WorkerSetPtr last_;
  int updates_ = 0;
};

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = testing::EtcdProcess::start();
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    etcd_ = std::make_unique<testing::EtcdProcess>(std::move(*e));
    endpoint_ = *http::parse_endpoint(etcd_->endpoint());
  }

  // Runs one EtcdClient coroutine to completion on the loop.
  template <typename T>
  T run(std::function<net::awaitable<T>(EtcdClient&)> fn) {
    std::promise<T> result;
    net::co_spawn(loop_.context(), [&]() -> net::awaitable<void> {
      EtcdClient c(client_, endpoint_);
      result.set_value(co_await fn(c));
    }, net::detached);
    return result.get_future().get();
  }

  http::EventLoop loop_{1};
  http::Client client_;
  std::unique_ptr<testing::EtcdProcess> etcd_;
  http::Endpoint endpoint_;
};

TEST_F(EtcdTest, ClientPutsRangesAndDeletes) {
  ASSERT_TRUE(run<Status>([](EtcdClient& c) { return c.put("infera/workers/both/a:1", "{}"); }).ok());
  ASSERT_TRUE(run<Status>([](EtcdClient& c) { return c.put("infera/workers/both/b:2", "{}"); }).ok());
  ASSERT_TRUE(run<Status>([](EtcdClient& c) { return c.put("infera/other", "x"); }).ok());
  auto range = run<Result<EtcdClient::Range>>([](EtcdClient& c) { return c.range_prefix("infera/workers/"); });
  ASSERT_TRUE(range.ok()) << range.status().to_string();
  ASSERT_EQ(range->kvs.size(), 2u);
  EXPECT_EQ(range->kvs[0].key, "infera/workers/both/a:1");
  EXPECT_GT(range->revision, 0);
  ASSERT_TRUE(run<Status>([](EtcdClient& c) { return c.remove("infera/workers/both/a:1"); }).ok());
  range = run<Result<EtcdClient::Range>>([](EtcdClient& c) { return c.range_prefix("infera/workers/"); });
  EXPECT_EQ(range->kvs.size(), 1u);
}

TEST_F(EtcdTest, UnknownLeaseIsNotFound) {
  const Status s = run<Status>([](EtcdClient& c) { return c.keep_alive(123456789); });
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.to_string();
}

TEST_F(EtcdTest, RegistrationAppearsStaysAndLeavesOnStop) {
  Seen seen;
  EtcdWorkerSource source(loop_, endpoint_, {});
  source.start(std::ref(seen));
  EtcdRegistrationOptions ro;
  ro.ttl = std::chrono::seconds(2);
  auto reg = std::make_unique<EtcdRegistration>(loop_, endpoint_, worker(30001), ro);
  ASSERT_TRUE(reg->start().ok());
  ASSERT_TRUE(eventually([&] { return seen.size() == 1; }));
  EXPECT_EQ(seen.ids()[0], "127.0.0.1:30001");
  // Alive across several TTLs: the keepalive works.
  auto still = [&] { return seen.size() == 1; };
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(4500);
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(still());
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  reg->stop();
  EXPECT_TRUE(eventually([&] { return seen.size() == 0; }, std::chrono::seconds(3)));
  source.stop();
}

TEST_F(EtcdTest, RecordExpiresWithItsLease) {
  Seen seen;
  EtcdWorkerSource source(loop_, endpoint_, {});
  source.start(std::ref(seen));
  const std::string record = worker_record_json(worker(30002));
  ASSERT_TRUE(run<Status>([&](EtcdClient& c) -> net::awaitable<Status> {
                auto lease = co_await c.grant_lease(std::chrono::seconds(1));
                if (!lease.ok()) co_return lease.status();
                co_return co_await c.put("infera/workers/both/127.0.0.1:30002", record, *lease);
              }).ok());
  ASSERT_TRUE(eventually([&] { return seen.size() == 1; }));
  // No keepalive: etcd deletes the key when the lease runs out.
  EXPECT_TRUE(eventually([&] { return seen.size() == 0; }, std::chrono::seconds(10)));
  source.stop();
}

TEST_F(EtcdTest, MalformedRecordsAreSkipped) {
  Seen seen;
  EtcdWorkerSource source(loop_, endpoint_, {});
  ASSERT_TRUE(run<Status>([](EtcdClient& c) { return c.put("infera/workers/both/x", "not json"); }).ok());
  const std::string good = worker_record_json(worker(30003));
  ASSERT_TRUE(run<Status>([&](EtcdClient& c) { return c.put("infera/workers/both/127.0.0.1:30003", good); }).ok());
  source.start(std::ref(seen));
  ASSERT_TRUE(eventually([&] { return seen.size() == 1; }));
  EXPECT_EQ(source.invalid_records(), 1u);
  source.stop();
}

TEST_F(EtcdTest, FleetSurvivesAnEtcdRestart) {
  Seen seen;
  EtcdSourceOptions so;
  so.retry_max = std::chrono::milliseconds(500);
  EtcdWorkerSource source(loop_, endpoint_, so);
  source.start(std::ref(seen));
  EtcdRegistrationOptions ro;
  ro.ttl = std::chrono::seconds(3);
  EtcdRegistration reg(loop_, endpoint_, worker(30004), ro);
  ASSERT_TRUE(reg.start().ok());
  ASSERT_TRUE(eventually([&] { return seen.size() == 1; }));
  etcd_->stop();
  EXPECT_TRUE(eventually([&] { return !source.connected(); }));
  EXPECT_EQ(seen.size(), 1u);  // the last known fleet stays in use
  ASSERT_TRUE(etcd_->restart().ok());
  EXPECT_TRUE(eventually([&] { return source.connected(); }));
  EXPECT_TRUE(eventually([&] { return seen.size() == 1; }));
  reg.stop();
  EXPECT_TRUE(eventually([&] { return seen.size() == 0; }));
  source.stop();
}

}  // namespace
}  // namespace infera::discovery
