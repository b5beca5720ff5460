// etcd v3 over its JSON gateway (etcd 3.4+, /v3/...), spoken with infera's own HTTP client:
// EtcdClient (leases, put, delete, prefix range, prefix watch), EtcdWorkerSource (the server's
// view of infera/workers/...: a range, then a watch; on any failure, back off and resync, while
// the last known fleet stays in use) and EtcdRegistration (an engine's leased record, kept
// alive, re-created if the lease was lost, deleted on stop). Keys and values travel
// base64-encoded, as the gateway requires.
// EtcdClient calls are coroutines on the caller's executor. EtcdWorkerSource and
// EtcdRegistration run on the EventLoop they are given; start/stop from a non-loop thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "infera/discovery/source.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"

namespace infera::discovery {

struct EtcdKeyValue {
  std::string key;
  std::string value;
};

struct EtcdWatchEvent {
  bool deleted = false;
  EtcdKeyValue kv;
  int64_t revision = 0;
};

// Coroutine parameters are taken by value: a reference would dangle once the caller's
// temporaries die before the coroutine runs.
class EtcdClient {
 public:
  EtcdClient(http::Client& client, http::Endpoint endpoint)
      : client_(client), endpoint_(std::move(endpoint)) {}

  const http::Endpoint& endpoint() const { return endpoint_; }

  net::awaitable<Result<int64_t>> grant_lease(std::chrono::seconds ttl);
  // One refresh. NotFound when the lease no longer exists (expired, or etcd lost it).
  net::awaitable<Status> keep_alive(int64_t lease);
  net::awaitable<Status> revoke(int64_t lease);
  net::awaitable<Status> put(std::string key, std::string value, int64_t lease = 0);
  net::awaitable<Status> remove(std::string key);
  // Every key under `prefix`, and the store's revision at that moment.
  struct Range {
    std::vector<EtcdKeyValue> kvs;
    int64_t revision = 0;
  };
  net::awaitable<Result<Range>> range_prefix(std::string prefix);
  // Watches `prefix` from `start_revision`, calling on_event for each change, until the stream
  // fails or `stop` is set (checked between reads). Returns why it ended.
  net::awaitable<Status> watch_prefix(std::string prefix, int64_t start_revision,
                                      std::function<void(const EtcdWatchEvent&)> on_event,
                                      const std::atomic<bool>& stop);

 private:
  net::awaitable<Result<std::string>> call(std::string path, std::string body);

  http::Client& client_;
  http::Endpoint endpoint_;
};

struct EtcdSourceOptions {
  std::string prefix = "infera/workers/";
  std::chrono::milliseconds retry_min{200};
  std::chrono::milliseconds retry_max{5'000};
};

class EtcdWorkerSource final : public WorkerSource {
 public:
  EtcdWorkerSource(http::EventLoop& loop, http::Endpoint endpoint, EtcdSourceOptions options);
  ~EtcdWorkerSource() override;

  void start(Listener listener) override;
  void stop() override;
  std::string describe() const override;

  // Records skipped because they did not parse (logged once each).
  uint64_t invalid_records() const { return invalid_.load(); }
  bool connected() const { return connected_.load(); }
  SourceHealth health() const override {
    SourceHealth h;
    h.connected = connected_.load();
    h.invalid_records = invalid_.load();
    return h;
  }

 private:
  net::awaitable<void> run();
  void publish();

  struct Cancel;  // the strand and cancellation signal of the watcher (etcd.cc)

  http::EventLoop& loop_;
  http::Endpoint endpoint_;
  EtcdSourceOptions options_;
  std::unique_ptr<http::Client> client_;
  // Shared with the cancellation stop() posts, which may run after this source is gone when
  // the watcher had already returned on its own.
  std::shared_ptr<Cancel> cancel_;
  Listener listener_;
  std::map<std::string, WorkerInfo> workers_;  // by etcd key; loop-side only
  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> invalid_{0};
  std::promise<void> done_;
  std::future<void> done_future_;
  bool started_ = false;
};

struct EtcdRegistrationOptions {
  std::string prefix = "infera/workers/";
  std::chrono::seconds ttl{10};  // the record disappears this long after the process dies
};

// Keeps one worker's record under a lease for as long as it lives.
class EtcdRegistration {
 public:
  EtcdRegistration(http::EventLoop& loop, http::Endpoint endpoint, WorkerInfo worker,
                   EtcdRegistrationOptions options);
  ~EtcdRegistration();

  // Registers (waiting up to `timeout` for the first put) and keeps the lease alive.
  Status start(std::chrono::milliseconds timeout = std::chrono::milliseconds(10'000));
  // Deletes the record and revokes the lease, then returns. Every etcd call has a deadline, so
  // this is bounded (a few seconds when etcd is unreachable).
  void stop();
  const std::string& key() const { return key_; }

 private:
  net::awaitable<void> run();

  http::EventLoop& loop_;
  http::Endpoint endpoint_;
  WorkerInfo worker_;
  EtcdRegistrationOptions options_;
  std::string key_;
  std::unique_ptr<http::Client> client_;
  std::atomic<bool> stop_{false};
  std::promise<Status> first_put_;
  bool first_put_set_ = false;
  std::promise<void> done_;
  std::future<void> done_future_;
  bool started_ = false;
};

}  // namespace infera::discovery
