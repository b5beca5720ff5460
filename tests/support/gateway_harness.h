// An in-process `infera server` for integration tests: the gateway built from flags exactly as
// the command parses them, and one blocking HTTP call to it (or to any server) through a pooled
// client on a test-owned EventLoop. Header-only; each object belongs to one test thread.
#pragma once

#include "tests/support/dev_transports.h"

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "infera/common/status.h"
#include "infera/config/server_config.h"
#include "infera/gateway/gateway.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/http/net.h"

namespace infera::testing {

// `infera server ARGS...` in process (the caller's args after the command name).
inline Result<std::unique_ptr<gateway::Gateway>> start_gateway(
    const std::vector<std::string>& args) {
  bool help = false;
  std::string text;
  INFERA_ASSIGN_OR_RETURN(const config::ServerConfig config,
                          config::parse_server_flags(with_dev_transports(args), &help, &text));
  return gateway::Gateway::create(config);
}

// One request to `to`, waited for; a failed exchange is status -1 with the error as the body.
inline http::Response call(http::EventLoop& loop, http::Client& client, const http::Endpoint& to,
                           http::Method method, std::string target, std::string body = {},
                           http::Headers headers = {}) {
  http::Request r;
  r.method = method;
  r.target = std::move(target);
  r.body = std::move(body);
  r.headers = std::move(headers);
  if (!r.body.empty()) r.headers.push_back({"Content-Type", "application/json"});
  std::promise<http::Response> p;
  net::co_spawn(
      net::make_strand(loop.context()),
      [&]() -> net::awaitable<void> {
        auto resp = co_await client.request(to, std::move(r));
        p.set_value(resp.ok() ? std::move(resp.value())
                              : http::Response{-1, {}, resp.status().message()});
      },
      net::detached);
  return p.get_future().get();
}

}  // namespace infera::testing
