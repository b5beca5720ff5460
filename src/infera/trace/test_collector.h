// Test-only: an OTLP/HTTP trace collector on loopback (an http::Server on its own loop) that
// keeps every span it receives as a JSON object, answers `status`, or holds each answer until the
// exporter gives up (`hold`: a slow collector). Used by the exporter's tests and the tracing e2e.
#pragma once

#include <boost/json.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "infera/http/net.h"
#include "infera/http/server.h"

namespace infera::trace::testing {

class Collector {
 public:
  explicit Collector(int status = 200, bool hold = false) : status_(status), hold_(hold) {
    http::Routes routes;
    routes.add(http::Method::kPost, "/v1/traces",
               [this](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
                 record(r);
                 if (hold_) {
                   net::steady_timer t(co_await net::this_coro::executor);
                   t.expires_after(std::chrono::seconds(30));
                   co_await t.async_wait(use_nothrow);  // cancelled when the exporter leaves
                 }
                 co_return http::Response::json(status_, "{}");
               });
    server_ = std::move(http::Server::start(loop_, {}, std::move(routes)).value());
  }
  ~Collector() { server_->shutdown(std::chrono::milliseconds(0)); }
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }

  // Waits (at most `deadline`) until the spans received satisfy `done`; returns its last value.
  bool wait_for(const std::function<bool(const std::vector<boost::json::object>&)>& done,
                std::chrono::milliseconds deadline = std::chrono::milliseconds(10'000)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, deadline, [&] { return done(spans_); });
  }
  size_t wait_for_spans(size_t n) {
    wait_for([n](const auto& spans) { return spans.size() >= n; });
    return spans().size();
  }
  std::vector<boost::json::object> spans() {
    std::lock_guard lock(mu_);
    return spans_;
  }
  size_t requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  std::string last_content_type() {
    std::lock_guard lock(mu_);
    return content_type_;
  }

 private:
  void record(const http::Request& r) {
    const boost::json::value doc = boost::json::parse(r.body);
    std::lock_guard lock(mu_);
    for (const auto& rs : doc.at("resourceSpans").as_array()) {
      for (const auto& ss : rs.at("scopeSpans").as_array()) {
        for (const auto& span : ss.at("spans").as_array()) spans_.push_back(span.as_object());
      }
    }
    ++requests_;
    content_type_ = std::string(r.header("Content-Type"));
    cv_.notify_all();
  }

  const int status_;
  const bool hold_;
  http::EventLoop loop_{1};
  std::unique_ptr<http::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<boost::json::object> spans_;
  size_t requests_ = 0;
  std::string content_type_;
};

// The string value of attribute `key` of an OTLP span ("" when absent; ints as their decimal).
inline std::string attribute(const boost::json::object& span, std::string_view key) {
  for (const auto& kv : span.at("attributes").as_array()) {
    if (kv.at("key").as_string() != key) continue;
    const auto& v = kv.at("value").as_object();
    if (const auto* s = v.if_contains("stringValue")) return std::string(s->as_string());
    if (const auto* i = v.if_contains("intValue")) return std::string(i->as_string());
    return boost::json::serialize(v);
  }
  return "";
}

}  // namespace infera::trace::testing
