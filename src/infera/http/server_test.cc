// The server over real loopback sockets, driven by a raw client (test_support.h) so that these
// tests do not depend on the client under test.
#include "infera/http/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>

#include "infera/http/error.h"
#include "infera/http/net.h"
#include "infera/http/sse.h"
#include "infera/http/test_support.h"

namespace infera::http {
namespace {

using testing::Ms;
using testing::RawConn;
using testing::RawResponse;
using testing::TestClock;
using testing::wait_until;

Handler text(std::string body) {
  return [body](Request&, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::text(200, body);
  };
}

std::string get(std::string_view target, std::string_view extra_headers = "") {
  return "GET " + std::string(target) + " HTTP/1.1\r\nHost: t\r\n" + std::string(extra_headers) +
         "\r\n";
}

std::string post(std::string_view target, std::string_view body) {
  return "POST " + std::string(target) +
         " HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         std::string(body);
}

class ServerTest : public ::testing::Test {
 protected:
  void start(Routes routes, ServerOptions options = {}) {
    auto s = Server::start(loop_, std::move(options), std::move(routes));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(s.value());
  }
  void TearDown() override {
    if (server_) server_->shutdown(Ms(1000));
    server_.reset();
    loop_.stop();
  }
  RawConn connect(int rcvbuf = 0) { return RawConn(server_->port(), rcvbuf); }
  RawResponse roundtrip(const std::string& request) {
    RawConn c = connect();
    EXPECT_TRUE(c.send_all(request));
    return c.read_response();
  }

  EventLoop loop_{2};
  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, RoutesByExactPathThenLongestPrefix) {
  Routes routes;
  routes.add(Method::kGet, "/health", text("healthy"));
  routes.add(Method::kPost, "/echo", [](Request& r, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::text(200, "echo:" + r.body);
  });
  routes.add_prefix(Method::kGet, "/v1/admin/",
                    [](Request& r, ResponseWriter&) -> net::awaitable<Response> {
                      co_return Response::text(200, "admin:" + std::string(r.path()));
                    });
  routes.add_prefix(Method::kGet, "/v1/admin/cache-view/",
                    [](Request& r, ResponseWriter&) -> net::awaitable<Response> {
                      co_return Response::text(200, "view:" + std::string(r.path().substr(21)));
                    });
  routes.add(Method::kGet, "/v1/admin/cache-view/special", text("special"));
  start(std::move(routes));

  EXPECT_EQ(roundtrip(get("/health")).body, "healthy");
  EXPECT_EQ(roundtrip(get("/health?probe=1")).body, "healthy");
  EXPECT_EQ(roundtrip(post("/echo", "hi")).body, "echo:hi");
  EXPECT_EQ(roundtrip(get("/v1/admin/workers")).body, "admin:/v1/admin/workers");
  EXPECT_EQ(roundtrip(get("/v1/admin/cache-view/0.0.0.0:30000")).body, "view:0.0.0.0:30000");
  EXPECT_EQ(roundtrip(get("/v1/admin/cache-view/special")).body, "special");

  const RawResponse missing = roundtrip(get("/nope"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.header("content-type"), "application/json");
  EXPECT_NE(missing.body.find("\"invalid_request_error\""), std::string::npos);
  const RawResponse wrong_method = roundtrip(post("/health", ""));
  EXPECT_EQ(wrong_method.status, 405);
  EXPECT_NE(wrong_method.body.find("\"invalid_request_error\""), std::string::npos);
  EXPECT_NE(wrong_method.body.find("method POST is not allowed"), std::string::npos);
}

// CORS: an allowed origin gets Access-Control-Allow-Origin on plain, streamed and error
// answers, and its preflight a 204 naming what it may send; another origin gets no CORS header
// and a 403 preflight. Without allowed origins, OPTIONS is a method like any other.
TEST_F(ServerTest, AllowedOriginsGetCorsHeadersAndPreflightAnswers) {
  Routes routes;
  routes.add(Method::kGet, "/health", text("ok"));
  routes.add(Method::kPost, "/stream", [](Request&, ResponseWriter& out) -> net::awaitable<Response> {
    Status s = co_await out.write_head(200, kSseContentType);
    if (s.ok()) s = co_await out.write(kSseDone);
    co_return Response{};
  });
  ServerOptions options;
  options.allowed_origins = {"https://app.example"};
  start(std::move(routes), options);
  const std::string app = "Origin: https://app.example\r\n";
  const RawResponse plain = roundtrip(get("/health", app));
  EXPECT_EQ(plain.header("access-control-allow-origin"), "https://app.example");
  EXPECT_EQ(plain.header("vary"), "Origin");
  const RawResponse missing = roundtrip(get("/nope", app));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.header("access-control-allow-origin"), "https://app.example");
  RawConn c = connect();
  ASSERT_TRUE(c.send_all("POST /stream HTTP/1.1\r\nHost: t\r\n" + app + "Content-Length: 2\r\n\r\n{}"));
  const RawResponse streamed = c.read_response();
  ASSERT_TRUE(streamed.complete);
  EXPECT_EQ(streamed.header("access-control-allow-origin"), "https://app.example");
  EXPECT_EQ(roundtrip(get("/health", "Origin: https://evil.example\r\n")).header("access-control-allow-origin"), "");
  EXPECT_EQ(roundtrip(get("/health")).header("access-control-allow-origin"), "");

  const std::string preflight =
      "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: t\r\nAccess-Control-Request-Method: POST\r\n"
      "Access-Control-Request-Headers: authorization, content-type\r\n";
  const RawResponse ok = roundtrip(preflight + app + "\r\n");
  EXPECT_EQ(ok.status, 204);
  EXPECT_EQ(ok.header("access-control-allow-origin"), "https://app.example");
  EXPECT_EQ(ok.header("access-control-allow-methods"), "GET, POST, OPTIONS");
  EXPECT_EQ(ok.header("access-control-allow-headers"), "authorization, content-type");
  const RawResponse refused = roundtrip(preflight + "Origin: https://evil.example\r\n\r\n");
  EXPECT_EQ(refused.status, 403);
  EXPECT_NE(refused.body.find("\"permission_error\""), std::string::npos);
  EXPECT_EQ(refused.header("access-control-allow-origin"), "");
  const RawResponse odd = roundtrip(
      "OPTIONS /x HTTP/1.1\r\nHost: t\r\nAccess-Control-Request-Method: POST\r\n"
      "Access-Control-Request-Headers: x-a;b\r\n" + app + "\r\n");
  EXPECT_EQ(odd.header("access-control-allow-headers"), "authorization, content-type, x-request-id");
}

TEST_F(ServerTest, WithoutAllowedOriginsOptionsIsAnyOtherMethod) {
  Routes routes;
  routes.add(Method::kGet, "/health", text("ok"));
  start(std::move(routes));
  const RawResponse r = roundtrip(
      "OPTIONS /health HTTP/1.1\r\nHost: t\r\nOrigin: https://app.example\r\n"
      "Access-Control-Request-Method: GET\r\n\r\n");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("access-control-allow-origin"), "");
}

TEST_F(ServerTest, KeepAliveServesSequentialRequestsOnOneConnection) {
  Routes routes;
  routes.add(Method::kGet, "/health", text("ok"));
  start(std::move(routes));
  RawConn c = connect();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send_all(get("/health")));
    const RawResponse r = c.read_response();
    ASSERT_TRUE(r.complete);
    EXPECT_EQ(r.body, "ok");
    EXPECT_NE(r.header("connection"), "close");
  }
  const ServerStats s = server_->stats();
  EXPECT_EQ(s.connections_accepted, 1u);
  EXPECT_EQ(s.requests, 3u);
}

// Connections queued in the backlog together are taken in bursts (one async accept, then
// non-blocking ones until the backlog is empty): every one is served, each with its own answer.
TEST_F(ServerTest, ABacklogOfConnectionsIsTakenAndServedWhole) {
  Routes routes;
  routes.add(Method::kPost, "/echo", [](Request& r, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::text(200, "echo:" + r.body);
  });
  start(std::move(routes));
  std::vector<RawConn> conns;
  for (int i = 0; i < 200; ++i) {
    conns.push_back(connect());
    ASSERT_TRUE(conns.back().ok());
  }
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(conns[i].send_all(post("/echo", std::to_string(i))));
  for (int i = 0; i < 200; ++i) EXPECT_EQ(conns[i].read_response().body, "echo:" + std::to_string(i));
  EXPECT_EQ(server_->stats().connections_accepted, 200u);
}

TEST_F(ServerTest, PipelinedRequestsAreAnsweredInOrder) {
  Routes routes;
  routes.add(Method::kPost, "/echo", [](Request& r, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::text(200, r.body);
  });
  start(std::move(routes));
  RawConn c = connect();
  ASSERT_TRUE(
      c.send_all(post("/echo", "first") + post("/echo", "second") + post("/echo", "third")));
  EXPECT_EQ(c.read_response().body, "first");
  EXPECT_EQ(c.read_response().body, "second");
  EXPECT_EQ(c.read_response().body, "third");
}

TEST_F(ServerTest, Http10ConnectionClosesAfterTheResponse) {
  Routes routes;
  routes.add(Method::kGet, "/health", text("ok"));
  start(std::move(routes));
  RawConn c = connect();
  ASSERT_TRUE(c.send_all("GET /health HTTP/1.0\r\n\r\n"));
  EXPECT_EQ(c.read_response().body, "ok");
  EXPECT_TRUE(c.wait_eof(Ms(5000)));
}

TEST_F(ServerTest, OversizedBodyIs413WithOpenAiError) {
  Routes routes;
  routes.add(Method::kPost, "/echo", text("never"));
  ServerOptions options;
  options.max_body_bytes = 1024;
  start(std::move(routes), options);

  // Declared too large: refused from the header alone, while the client is still sending.
  RawConn c = connect();
  ASSERT_TRUE(c.send_all("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n" +
                         std::string(4096, 'x')));
  const RawResponse r = c.read_response();
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_EQ(r.header("connection"), "close");
  EXPECT_NE(r.body.find("\"error\":{\"message\""), std::string::npos);
  EXPECT_TRUE(c.wait_eof(Ms(5000)));

  // Chunked: found out while reading.
  RawConn d = connect();
  std::string chunked = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 4; ++i) chunked += "200\r\n" + std::string(512, 'y') + "\r\n";
  chunked += "0\r\n\r\n";
  ASSERT_TRUE(d.send_all(chunked));
  EXPECT_EQ(d.read_response().status, 413);
}

TEST_F(ServerTest, OversizedHeadersAre431) {
  Routes routes;
  routes.add(Method::kGet, "/health", text("ok"));
  ServerOptions options;
  options.max_header_bytes = 1024;
  start(std::move(routes), options);
  const RawResponse r = roundtrip(get("/health", "X-Big: " + std::string(4096, 'z') + "\r\n"));
  EXPECT_EQ(r.status, 431);
  EXPECT_NE(r.body.find("invalid_request_error"), std::string::npos);
}

TEST_F(ServerTest, MalformedRequestsAre400) {
  Routes routes;
  routes.add(Method::kGet, "/health", text("ok"));
  start(std::move(routes));
  for (const char* bad : {"GARBAGE\r\n\r\n", "GET /health HTTP/1.1\r\nNo colon here\r\n\r\n",
                          "POST /health HTTP/1.1\r\nContent-Length: -3\r\n\r\n",
                          "GET health HTTP/1.1\r\nHost: t\r\n\r\n"}) {
    const RawResponse r = roundtrip(bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(r.header("content-type"), "application/json") << bad;
  }
  // The server is unaffected.
  EXPECT_EQ(roundtrip(get("/health")).body, "ok");
}

TEST_F(ServerTest, SlowLorisIsCutOffByTheHeaderDeadline) {
  Routes routes;
  routes.add(Method::kGet, "/health", text("ok"));
  ServerOptions options;
  options.header_timeout = Ms(300);
  start(std::move(routes), options);
  RawConn c = connect();
  ASSERT_TRUE(c.send_all("GET /health HTTP/1.1\r\nHost: t\r\n"));
  // Trickle one header byte every 20 ms: each read is quick, but the header never ends.
  const auto start_time = TestClock::now();
  bool closed = false;
  while (TestClock::now() - start_time < Ms(5000)) {
    if (!c.send_all("X")) {
      closed = true;
      break;
    }
    if (c.read_some(Ms(20)) == 0) {
      closed = true;
      break;
    }
  }
  const auto elapsed = TestClock::now() - start_time;
  EXPECT_TRUE(closed);
  EXPECT_LT(elapsed, Ms(3000));
  EXPECT_GE(elapsed, Ms(250));
  EXPECT_EQ(roundtrip(get("/health")).body, "ok");
}

TEST_F(ServerTest, IdleKeepAliveConnectionIsClosed) {
  Routes routes;
  routes.add(Method::kGet, "/health", text("ok"));
  ServerOptions options;
  options.idle_timeout = Ms(200);
  start(std::move(routes), options);
  RawConn c = connect();
  ASSERT_TRUE(c.send_all(get("/health")));
  EXPECT_EQ(c.read_response().body, "ok");
  EXPECT_TRUE(c.wait_eof(Ms(5000)));
  EXPECT_TRUE(wait_until([&] { return server_->stats().connections_open == 0; }));
}

TEST_F(ServerTest, ExpectContinueGetsInterimResponse) {
  Routes routes;
  routes.add(Method::kPost, "/echo", [](Request& r, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::text(200, r.body);
  });
  start(std::move(routes));
  RawConn c = connect();
  ASSERT_TRUE(c.send_all(
      "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"));
  ASSERT_TRUE(c.read_until("HTTP/1.1 100 Continue\r\n\r\n"));
  c.pending().clear();
  ASSERT_TRUE(c.send_all("body"));
  EXPECT_EQ(c.read_response().body, "body");
}

TEST_F(ServerTest, HandlerExceptionIs500AndServerKeepsServing) {
  Routes routes;
  routes.add(Method::kGet, "/throw", [](Request&, ResponseWriter&) -> net::awaitable<Response> {
    throw std::runtime_error("boom");
    co_return Response{};
  });
  routes.add(Method::kGet, "/health", text("ok"));
  start(std::move(routes));
  const RawResponse r = roundtrip(get("/throw"));
  EXPECT_EQ(r.status, 500);
  EXPECT_NE(r.body.find("server_error"), std::string::npos);
  EXPECT_EQ(roundtrip(get("/health")).body, "ok");
}

TEST_F(ServerTest, StreamsChunksAndKeepsTheConnection) {
  Routes routes;
  routes.add(Method::kPost, "/stream",
             [](Request&, ResponseWriter& out) -> net::awaitable<Response> {
               Status s = co_await out.write_head(200, kSseContentType);
               for (int i = 0; s.ok() && i < 5; ++i)
                 s = co_await out.write(sse_event(std::to_string(i)));
               if (s.ok()) s = co_await out.write(kSseDone);
               co_return Response{};  // ignored: the handler streamed
             });
  routes.add(Method::kGet, "/health", text("ok"));
  start(std::move(routes));
  RawConn c = connect();
  ASSERT_TRUE(c.send_all(post("/stream", "{}")));
  const RawResponse r = c.read_response();
  ASSERT_TRUE(r.complete);
  EXPECT_TRUE(r.chunked);
  EXPECT_EQ(r.header("content-type"), "text/event-stream");
  EXPECT_EQ(r.body, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\ndata: [DONE]\n\n");
  ASSERT_TRUE(c.send_all(get("/health")));  // the same connection serves the next request
  EXPECT_EQ(c.read_response().body, "ok");
}

TEST_F(ServerTest, TheHeadGoesOutWithTheFirstBodyBytesAndTheLastChunkWithTheBody) {
  // write_head() sends nothing by itself: the head leaves with the first write (one send, one
  // wake-up of the client), and write(bytes, true) carries the terminating chunk.
  std::promise<net::steady_timer*> head_set;
  Routes routes;
  routes.add(Method::kGet, "/lazy", [&](Request&, ResponseWriter& out) -> net::awaitable<Response> {
    Status s = co_await out.write_head(200, kSseContentType);
    net::steady_timer go(co_await net::this_coro::executor, std::chrono::hours(1));
    head_set.set_value(&go);
    co_await go.async_wait(use_nothrow);  // cancelled by the test
    if (s.ok()) s = co_await out.write(sse_event("only"), /*last=*/true);
    co_return Response{};
  });
  routes.add(Method::kGet, "/health", text("ok"));
  start(std::move(routes));
  RawConn c = connect();
  ASSERT_TRUE(c.send_all(get("/lazy")));
  net::steady_timer* go = head_set.get_future().get();
  // An eager head would be in this socket's receive queue now (loopback delivers within send).
  EXPECT_EQ(c.read_some(Ms(0)), -1) << c.pending();
  net::post(go->get_executor(), [go] { go->cancel(); });
  const RawResponse r = c.read_response();
  ASSERT_TRUE(r.complete);
  EXPECT_TRUE(r.chunked);
  EXPECT_EQ(r.header("content-type"), "text/event-stream");
  EXPECT_EQ(r.body, "data: only\n\n");
  ASSERT_TRUE(c.send_all(get("/health")));  // complete on the wire: the connection is reused
  EXPECT_EQ(c.read_response().body, "ok");
}

TEST_F(ServerTest, FlushSendsTheHeadBeforeAnyBody) {
  std::promise<net::steady_timer*> flushed;
  Routes routes;
  routes.add(Method::kGet, "/flush", [&](Request&, ResponseWriter& out) -> net::awaitable<Response> {
    Status s = co_await out.write_head(200, kSseContentType);
    if (s.ok()) s = co_await out.flush();
    net::steady_timer go(co_await net::this_coro::executor, std::chrono::hours(1));
    flushed.set_value(&go);
    co_await go.async_wait(use_nothrow);  // cancelled by the test
    co_return Response{};  // the server finishes the empty body
  });
  start(std::move(routes));
  RawConn c = connect();
  ASSERT_TRUE(c.send_all(get("/flush")));
  net::steady_timer* go = flushed.get_future().get();
  ASSERT_TRUE(c.read_until("\r\n\r\n"));
  EXPECT_EQ(c.pending().rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << c.pending();
  net::post(go->get_executor(), [go] { go->cancel(); });
  ASSERT_TRUE(c.read_until("0\r\n\r\n"));
}

TEST_F(ServerTest, StreamingWritesWaitForASlowClient) {
  constexpr size_t kChunk = 64 * 1024;
  constexpr size_t kTotal = 16 * 1024 * 1024;
  // Kernel buffers (both sides, doubled by Linux) plus one chunk in progress: far below kTotal.
  constexpr size_t kSlack = 1024 * 1024;
  std::atomic<size_t> written{0};
  std::promise<Status> done;
  Routes routes;
  routes.add(Method::kGet, "/big", [&](Request&, ResponseWriter& out) -> net::awaitable<Response> {
    Status s = co_await out.write_head(200, "application/octet-stream");
    const std::string chunk(kChunk, 'b');
    while (s.ok() && written.load() < kTotal) {
      s = co_await out.write(chunk);
      if (s.ok()) written.fetch_add(chunk.size());
    }
    if (s.ok()) s = co_await out.finish();
    done.set_value(s);
    co_return Response{};
  });
  ServerOptions options;
  options.socket_send_buffer_bytes = 16 * 1024;
  start(std::move(routes), options);
  RawConn c = connect(/*rcvbuf=*/16 * 1024);
  ASSERT_TRUE(c.send_all(get("/big")));
  size_t read_total = 0;
  size_t max_lead = 0;
  // Read slowly, in small pieces; the handler may never be further ahead than the buffers.
  while (read_total < kTotal) {
    const long n = c.read_some(Ms(5000), 16 * 1024);
    ASSERT_GT(n, 0);
    read_total += static_cast<size_t>(n);
    const size_t w = written.load();
    if (w > read_total) max_lead = std::max(max_lead, w - read_total);
    ASSERT_LE(w, read_total + kSlack) << "the handler ran ahead of the client";
  }
  RawResponse r = c.read_response(Ms(10000));  // the rest of the chunked body (already counted)
  (void)r;
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(f.get().ok());
  EXPECT_GT(max_lead, 0u);
}

TEST_F(ServerTest, ClientDisconnectCancelsTheHandler) {
  std::promise<void> entered;
  std::promise<std::pair<bool, bool>> outcome;  // (timer aborted, writer.client_gone())
  Routes routes;
  routes.add(Method::kPost, "/slow",
             [&](Request&, ResponseWriter& out) -> net::awaitable<Response> {
               net::steady_timer t(co_await net::this_coro::executor, std::chrono::seconds(30));
               entered.set_value();
               auto [ec] = co_await t.async_wait(use_nothrow);
               outcome.set_value({ec == net::error::operation_aborted, out.client_gone()});
               co_return Response::text(200, "late");
             });
  start(std::move(routes));
  RawConn c = connect();
  ASSERT_TRUE(c.send_all(post("/slow", "{}")));
  ASSERT_EQ(entered.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
  c.close();
  auto f = outcome.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const auto [aborted, gone] = f.get();
  EXPECT_TRUE(aborted);
  EXPECT_TRUE(gone);
  EXPECT_TRUE(wait_until([&] { return server_->stats().client_disconnects == 1; }));
}

// The client's EOF read by the handler's client watch just as the handler ends (the read done
// by the other loop thread, its completion queued behind the handler): the answer goes out and
// the connection closes. Asio reports a socket's readiness once (edge-triggered epoll, no retry
// after a short read), so a keep-alive wait for the next request would sit in CLOSE-WAIT until
// the idle timeout; a load test left tens of such sockets per run before the fix.
TEST_F(ServerTest, EofReadAsTheHandlerEndsClosesTheConnection) {
  std::atomic<bool> half_closed{false};
  std::promise<void>* entered = nullptr;
  Routes routes;
  routes.add(Method::kPost, "/x", [&](Request&, ResponseWriter&) -> net::awaitable<Response> {
    // Let the client watch start its read, then hold the strand while the client's EOF comes
    // in and the other thread's reactor reads it.
    co_await net::post(co_await net::this_coro::executor, net::use_awaitable);
    entered->set_value();
    while (!half_closed.load()) std::this_thread::yield();
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
    while (std::chrono::steady_clock::now() < until) std::this_thread::yield();
    co_return Response::text(200, "ok");
  });
  ServerOptions options;
  options.idle_timeout = Ms(60000);
  start(std::move(routes), options);
  for (int round = 0; round < 10; ++round) {
    std::promise<void> in_handler;
    entered = &in_handler;
    half_closed = false;
    RawConn c = connect();
    ASSERT_TRUE(c.send_all(post("/x", "{}")));
    ASSERT_EQ(in_handler.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
    c.shutdown_write();
    half_closed = true;
    (void)c.read_response();  // answered, or dropped as a departed client's: either is right
    EXPECT_TRUE(c.wait_eof(Ms(5000))) << "round " << round << ": the server kept the connection";
  }
  EXPECT_TRUE(wait_until([&] { return server_->stats().connections_open == 0; }));
}

TEST_F(ServerTest, StreamWriteFailsOnceTheClientLeaves) {
  std::promise<Status> outcome;
  Routes routes;
  routes.add(Method::kGet, "/tokens",
             [&](Request&, ResponseWriter& out) -> net::awaitable<Response> {
               Status s = co_await out.write_head(200, kSseContentType);
               net::steady_timer pace(co_await net::this_coro::executor);
               while (s.ok()) {
                 s = co_await out.write(sse_event("{\"token\":1}"));
                 pace.expires_after(Ms(1));
                 co_await pace.async_wait(use_nothrow);
               }
               outcome.set_value(s);
               co_return Response{};
             });
  start(std::move(routes));
  RawConn c = connect();
  ASSERT_TRUE(c.send_all(get("/tokens")));
  ASSERT_TRUE(c.read_until("data: "));
  c.reset();
  auto f = outcome.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(f.get().code(), StatusCode::kCancelled);
}

TEST_F(ServerTest, GracefulShutdownLetsAnOpenStreamFinish) {
  std::promise<net::steady_timer*> gate_ready;
  Routes routes;
  routes.add(Method::kGet, "/stream",
             [&](Request&, ResponseWriter& out) -> net::awaitable<Response> {
               (void)co_await out.write_head(200, kSseContentType);
               (void)co_await out.write(sse_event("first"));
               net::steady_timer gate(co_await net::this_coro::executor,
                                      net::steady_timer::time_point::max());
               gate_ready.set_value(&gate);
               co_await gate.async_wait(use_nothrow);  // opened by the test (cancel)
               (void)co_await out.write(sse_event("second"));
               (void)co_await out.finish();
               co_return Response{};
             });
  routes.add(Method::kGet, "/health", text("ok"));
  start(std::move(routes));

  RawConn idle = connect();  // a keep-alive connection between requests
  ASSERT_TRUE(idle.send_all(get("/health")));
  ASSERT_EQ(idle.read_response().body, "ok");

  RawConn streaming = connect();
  ASSERT_TRUE(streaming.send_all(get("/stream")));
  ASSERT_TRUE(streaming.read_until("data: first\n\n"));
  auto gate_future = gate_ready.get_future();
  ASSERT_EQ(gate_future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  net::steady_timer* gate = gate_future.get();

  const auto begin = TestClock::now();
  auto shutdown = std::async(std::launch::async, [&] { server_->shutdown(Ms(10000)); });
  // New connections are refused, the idle one is closed, the stream stays open.
  EXPECT_TRUE(wait_until([&] { return !connect().ok(); }));
  EXPECT_TRUE(idle.wait_eof(Ms(5000)));
  EXPECT_EQ(shutdown.wait_for(Ms(0)), std::future_status::timeout);

  net::post(gate->get_executor(), [gate] { gate->cancel(); });
  const RawResponse rest = streaming.read_response();
  EXPECT_TRUE(rest.complete);
  EXPECT_NE((streaming.pending() + rest.body).find("data: second\n\n"), std::string::npos);
  EXPECT_TRUE(streaming.wait_eof(Ms(5000)));
  ASSERT_EQ(shutdown.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_LT(TestClock::now() - begin, Ms(9000));  // ended by the stream, not by the drain bound
}

TEST_F(ServerTest, ShutdownClosesStreamsThatOutliveTheDrainBound) {
  std::promise<bool> cancelled;
  Routes routes;
  routes.add(Method::kGet, "/forever",
             [&](Request&, ResponseWriter& out) -> net::awaitable<Response> {
               (void)co_await out.write_head(200, kSseContentType);
               (void)co_await out.write(sse_event("first"));
               net::steady_timer t(co_await net::this_coro::executor, std::chrono::hours(1));
               auto [ec] = co_await t.async_wait(use_nothrow);
               cancelled.set_value(ec == net::error::operation_aborted);
               co_return Response{};
             });
  start(std::move(routes));
  RawConn c = connect();
  ASSERT_TRUE(c.send_all(get("/forever")));
  ASSERT_TRUE(c.read_until("data: first\n\n"));
  const auto begin = TestClock::now();
  server_->shutdown(Ms(200));
  EXPECT_LT(TestClock::now() - begin, Ms(4000));
  auto f = cancelled.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(f.get());
  EXPECT_TRUE(c.wait_eof(Ms(5000)));
  EXPECT_EQ(c.pending().find("0\r\n\r\n"), std::string::npos);  // cut, not finished
}

TEST_F(ServerTest, BindingAPortInUseIsAnError) {
  Routes routes;
  routes.add(Method::kGet, "/health", text("ok"));
  start(std::move(routes));
  ServerOptions options;
  options.port = server_->port();
  Routes more;
  more.add(Method::kGet, "/health", text("ok"));
  auto second = Server::start(loop_, options, std::move(more));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("cannot bind"), std::string::npos);
}

}  // namespace
}  // namespace infera::http
