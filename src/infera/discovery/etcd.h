// etcd v3 over its JSON gateway (etcd 3.4+, /v3/...), spoken with infera's own HTTP client:
// EtcdClient (leases, put, delete, prefix range, prefix watch), EtcdPrefixWatch (a prefix kept
// mirrored: a range, then a watch; on any failure, back off and resync, while the caller keeps
// what it had), EtcdWorkerSource (the server's view of infera/workers/... through one) and
// EtcdRegistration (a leased record: an engine's, a router replica's; kept alive, re-created if
// the lease was lost, deleted on stop). Keys and values travel base64-encoded, as the gateway
// requires. EtcdClient calls are coroutines on the caller's executor. EtcdPrefixWatch,
// EtcdWorkerSource and EtcdRegistration run on the EventLoop they are given; start/stop from a
// non-loop thread.
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

// Keeps every key under options.prefix mirrored for its handlers: a range, then a watch from the
// range's revision. An idle watch (read_timeout, a minute) or a broken one ends in a new range;
// while etcd does not answer, ranges are retried with backoff (retry_min doubling to retry_max)
// and the handlers hear nothing, so the caller keeps what it last had. Every call has a deadline
// (connect 2 s, answer 5 s). The handlers run on the watch's strand, one at a time.
class EtcdPrefixWatch {
 public:
  struct Handlers {
    // The whole prefix after each successful range: replaces everything the caller had.
    std::function<void(const std::vector<EtcdKeyValue>&)> on_reset;
    // One change after that range (ev.deleted: the key is gone).
    std::function<void(const EtcdWatchEvent&)> on_event;
  };

  EtcdPrefixWatch(http::EventLoop& loop, http::Endpoint endpoint, EtcdSourceOptions options);
  ~EtcdPrefixWatch();  // stop()

  void start(Handlers handlers);
  // No handler call starts after it returns.
  void stop();

  const http::Endpoint& endpoint() const { return endpoint_; }
  const EtcdSourceOptions& options() const { return options_; }
  // Any thread.
  bool connected() const { return connected_.load(); }
  uint64_t resyncs() const { return resyncs_.load(); }  // successful ranges since start
  std::string last_error() const;                       // why etcd last did not answer

 private:
  net::awaitable<void> run();
  void set_disconnected(const Status& why);

  struct Cancel;  // the strand and cancellation signal of the watcher (etcd.cc)

  http::EventLoop& loop_;
  http::Endpoint endpoint_;
  EtcdSourceOptions options_;
  std::unique_ptr<http::Client> client_;
  // Shared with the cancellation stop() posts, which may run after this watch is gone when the
  // watcher had already returned on its own.
  std::shared_ptr<Cancel> cancel_;
  Handlers handlers_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> resyncs_{0};
  mutable std::mutex error_mu_;
  std::string last_error_;
  std::promise<void> done_;
  std::future<void> done_future_;
  bool started_ = false;
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
  bool connected() const { return watch_.connected(); }
  SourceHealth health() const override {
    SourceHealth h;
    h.connected = watch_.connected();
    h.invalid_records = invalid_.load();
    return h;
  }

 private:
  // On the watch's strand.
  void apply(const std::string& key, const std::string& value, bool deleted);
  void publish();

  EtcdPrefixWatch watch_;
  Listener listener_;
  std::map<std::string, WorkerInfo> workers_;  // by etcd key; watch-side only
  std::atomic<uint64_t> invalid_{0};
};

struct EtcdRegistrationOptions {
  std::string prefix = "infera/workers/";
  std::chrono::seconds ttl{10};  // the record disappears this long after the process dies
};

// Keeps one record under a lease for as long as it lives: a worker's (worker_key under
// options.prefix, worker_record_json), or any key and value (a router replica's).
class EtcdRegistration {
 public:
  EtcdRegistration(http::EventLoop& loop, http::Endpoint endpoint, WorkerInfo worker,
                   EtcdRegistrationOptions options);
  // `key` and `record` as given; options.prefix is not used.
  EtcdRegistration(http::EventLoop& loop, http::Endpoint endpoint, std::string key,
                   std::string record, EtcdRegistrationOptions options);
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
  EtcdRegistrationOptions options_;
  std::string key_;
  std::string record_;
  std::unique_ptr<http::Client> client_;
  std::atomic<bool> stop_{false};
  std::promise<Status> first_put_;
  bool first_put_set_ = false;
  std::promise<void> done_;
  std::future<void> done_future_;
  bool started_ = false;
};

}  // namespace infera::discovery
