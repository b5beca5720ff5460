// EtcdReader: a test's synchronous view of the worker records in a real etcd (the launcher and
// mock-engine e2e tests check registration and deregistration with it). Owns its own loop.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "infera/discovery/etcd.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/http/net.h"

namespace infera::testing {

class EtcdReader {
 public:
  explicit EtcdReader(const std::string& endpoint)
      : loop_(1), etcd_(client_, *http::parse_endpoint(endpoint)) {}

  // Every record under the workers prefix, or nullopt when etcd did not answer.
  std::optional<std::vector<discovery::EtcdKeyValue>> records() {
    auto future = net::co_spawn(loop_.context(), read(&etcd_), net::use_future);
    if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return std::nullopt;
    return future.get();
  }

 private:
  using Records = std::optional<std::vector<discovery::EtcdKeyValue>>;
  static net::awaitable<Records> read(discovery::EtcdClient* etcd) {
    auto range = co_await etcd->range_prefix("infera/workers/");
    if (!range.ok()) co_return std::nullopt;
    co_return range->kvs;
  }

  http::EventLoop loop_;
  http::Client client_;
  discovery::EtcdClient etcd_;
};

}  // namespace infera::testing
