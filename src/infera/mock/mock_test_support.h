// What the mock engine's in-process tests share: an engine started on an ephemeral loopback
// port with the dev transports, one HTTP call over a raw connection, and a JSON object parsed
// from an answer's body (a failure names the text).
#pragma once

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "infera/http/test_support.h"
#include "infera/mock/mock_server.h"
#include "tests/support/dev_transports.h"

namespace infera::mock::testing {

// `--model mock` at 1000x speed, warnings only, plus `extra` flags; null (and a test failure)
// when it does not start.
inline std::unique_ptr<MockEngine> start_engine(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--host", "127.0.0.1",   "--port", "0",       "--speedup-ratio",
                                   "1000",   "--log-level", "warn",   "--model", "mock"};
  args.insert(args.end(), extra.begin(), extra.end());
  bool help = false;
  std::string text;
  auto options = parse_mock_flags(infera::testing::with_dev_transports(args), &help, &text);
  EXPECT_TRUE(options.ok()) << options.status().to_string();
  if (!options.ok()) return nullptr;
  auto engine = MockEngine::start(std::move(*options));
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  return engine.ok() ? std::move(*engine) : nullptr;
}

inline std::string request_text(std::string_view method, std::string_view target,
                                std::string_view body) {
  std::string r = std::string(method) + " " + std::string(target) +
                  " HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n";
  r += body;
  return r;
}

// One request on a new connection; the whole answer, within 20 s.
inline http::testing::RawResponse call(uint16_t port, std::string_view method,
                                       std::string_view target, std::string_view body = {}) {
  http::testing::RawConn c(port);
  EXPECT_TRUE(c.ok());
  EXPECT_TRUE(c.send_all(request_text(method, target, body)));
  http::testing::RawResponse r = c.read_response(std::chrono::milliseconds(20'000));
  EXPECT_TRUE(r.complete) << target;
  return r;
}

inline boost::json::object object_of(std::string_view text) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  if (ec || !v.is_object()) {
    ADD_FAILURE() << "not a JSON object: " << text;
    return {};
  }
  return std::move(v.get_object());
}

// An answer's usage count (`prompt_tokens`, `completion_tokens`, `total_tokens`, ...).
inline int64_t usage_of(const boost::json::object& o, const char* key) {
  return o.at("usage").at(key).as_int64();
}

}  // namespace infera::mock::testing
