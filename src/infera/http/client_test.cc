// The client against the real server (server.h) and against raw loopback sockets that misbehave
// on purpose (never answer, stall, cut, garble), all on ephemeral ports.
#include "infera/http/client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <thread>

#include "infera/http/error.h"
#include "infera/http/net.h"
#include "infera/http/server.h"
#include "infera/http/sse.h"
#include "infera/http/test_run.h"
#include "infera/http/test_support.h"

namespace infera::http {
namespace {

using testing::Ms;
using testing::run;
using testing::SilentListener;
using testing::TestClock;
using testing::wait_until;


// Reads a whole request header from a raw socket; false on EOF.
bool read_request_head(int fd, std::string& buffer) {
  char tmp[4096];
  while (buffer.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buffer.append(tmp, static_cast<size_t>(n));
  }
  buffer.erase(0, buffer.find("\r\n\r\n") + 4);
  return true;
}

void send_raw(int fd, std::string_view data) {
  ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
}

// A raw upstream: accepts connections and runs `script` on each, on its own thread.
class RawUpstream {
 public:
  explicit RawUpstream(std::function<void(int fd, int index)> script)
      : thread_([this, script = std::move(script)] {
          for (int i = 0; !stop_.load(); ++i) {
            const int fd = listener_.accept_one(Ms(20));
            if (fd < 0) continue;
            script(fd, i);
            ::close(fd);
          }
        }) {}
  ~RawUpstream() {
    stop_.store(true);
    thread_.join();
  }
  Endpoint endpoint() const { return Endpoint{"127.0.0.1", listener_.port()}; }

 private:
  SilentListener listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Request get(std::string target) {
  Request r;
  r.method = Method::kGet;
  r.target = std::move(target);
  return r;
}

class ClientTest : public ::testing::Test {
 protected:
  void start(Routes routes, ServerOptions options = {}) {
    auto s = Server::start(loop_, std::move(options), std::move(routes));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(s.value());
    endpoint_ = Endpoint{"127.0.0.1", server_->port()};
  }
  void TearDown() override {
    if (server_) server_->shutdown(Ms(1000));
    server_.reset();
    loop_.stop();
  }

  EventLoop loop_{2};
  std::unique_ptr<Server> server_;
  Endpoint endpoint_;
};

Routes echo_routes() {
  Routes routes;
  routes.add(Method::kPost, "/echo", [](Request& r, ResponseWriter&) -> net::awaitable<Response> {
    Response out = Response::json(201, r.body);
    out.headers.push_back({"X-Seen-Host", std::string(r.header("Host"))});
    out.headers.push_back({"X-Seen-Trace", std::string(r.header("X-Trace"))});
    co_return out;
  });
  routes.add(Method::kGet, "/health", [](Request&, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::text(200, "ok");
  });
  return routes;
}

TEST_F(ClientTest, SendsARequestAndReadsTheWholeResponse) {
  start(echo_routes());
  Client client;
  Request req;
  req.method = Method::kPost;
  req.target = "/echo";
  req.headers = {{"Content-Type", "application/json"}, {"X-Trace", "t-1"}};
  req.body = R"({"model":"m","prompt":"hi"})";
  auto r = run(loop_, client.request(endpoint_, req));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, req.body);
  EXPECT_EQ(r->header("content-type"), "application/json");
  EXPECT_EQ(r->header("X-Seen-Host"), endpoint_.key());
  EXPECT_EQ(r->header("X-Seen-Trace"), "t-1");
}

TEST_F(ClientTest, PoolReusesOneKeepAliveConnection) {
  start(echo_routes());
  Client client;
  for (int i = 0; i < 20; ++i) {
    auto r = run(loop_, client.request(endpoint_, get("/health")));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->body, "ok");
  }
  EXPECT_EQ(server_->stats().connections_accepted, 1u);
  EXPECT_EQ(client.stats().connects, 1u);
  EXPECT_EQ(client.stats().reuses, 19u);
  EXPECT_EQ(client.stats().idle, 1u);
}

TEST_F(ClientTest, ConcurrentRequestsShareThePool) {
  start(echo_routes());
  Client client;
  constexpr int kWorkers = 8;
  constexpr int kEach = 10;
  std::atomic<int> ok{0};
  std::vector<std::future<void>> done;
  for (int w = 0; w < kWorkers; ++w) {
    std::promise<void> p;
    done.push_back(p.get_future());
    net::co_spawn(
        net::make_strand(loop_.context()),
        [&]() -> net::awaitable<void> {
          for (int i = 0; i < kEach; ++i) {
            auto r = co_await client.request(endpoint_, get("/health"));
            if (r.ok() && r->body == "ok") ok.fetch_add(1);
          }
        },
        [p = std::move(p)](std::exception_ptr) mutable { p.set_value(); });
  }
  for (auto& f : done) ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(ok.load(), kWorkers * kEach);
  EXPECT_LE(server_->stats().connections_accepted, static_cast<uint64_t>(kWorkers));
  EXPECT_EQ(client.stats().connects + client.stats().reuses,
            static_cast<uint64_t>(kWorkers * kEach));
}

TEST_F(ClientTest, StreamDeliversPiecesAsTheyArrive) {
  std::promise<net::steady_timer*> gate_ready;
  Routes routes;
  routes.add(Method::kPost, "/v1/completions",
             [&](Request&, ResponseWriter& out) -> net::awaitable<Response> {
               (void)co_await out.write_head(200, kSseContentType);
               (void)co_await out.write(sse_event(R"({"text":"a"})"));
               net::steady_timer gate(co_await net::this_coro::executor,
                                      net::steady_timer::time_point::max());
               gate_ready.set_value(&gate);
               co_await gate.async_wait(use_nothrow);
               (void)co_await out.write(sse_event(R"({"text":"b"})"));
               (void)co_await out.write(kSseDone);
               co_return Response{};
             });
  start(std::move(routes));
  Client client;
  Request req;
  req.method = Method::kPost;
  req.target = "/v1/completions";
  req.body = R"({"stream":true})";
  auto opened = run(loop_, client.stream(endpoint_, req));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  ClientStream stream = std::move(opened.value());
  EXPECT_EQ(stream.status(), 200);
  EXPECT_EQ(stream.header("Content-Type"), kSseContentType);

  SseParser parser;
  std::vector<std::string> events;
  auto read_events = [&](size_t want) -> net::awaitable<Status> {
    SseEvent ev;
    while (events.size() < want) {
      Result<std::string_view> piece = co_await stream.read();
      if (!piece.ok()) co_return piece.status();
      if (piece->empty()) co_return out_of_range("body ended");
      parser.feed(*piece);
      while (parser.next(ev)) events.emplace_back(ev.data);
    }
    co_return ok_status();
  };
  // The first event arrives while the upstream is still generating (the gate is closed).
  ASSERT_TRUE(run(loop_, read_events(1)).ok());
  EXPECT_EQ(events[0], R"({"text":"a"})");
  auto gate_future = gate_ready.get_future();
  ASSERT_EQ(gate_future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  net::steady_timer* gate = gate_future.get();
  net::post(gate->get_executor(), [gate] { gate->cancel(); });
  ASSERT_TRUE(run(loop_, read_events(3)).ok());
  EXPECT_EQ(events[1], R"({"text":"b"})");
  EXPECT_EQ(events[2], "[DONE]");
  auto end = run(loop_, stream.read());
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(end->empty());
  EXPECT_TRUE(stream.done());
  EXPECT_TRUE(parser.idle());
  EXPECT_EQ(client.stats().idle, 1u);  // the connection went back to the pool
}

TEST_F(ClientTest, StreamReadReturnsEveryChunkAlreadyReceivedInOnePiece) {
  // A relay that fell behind catches up with one piece (one write downstream), not one per chunk.
  RawUpstream upstream([](int fd, int) {
    std::string buf;
    read_request_head(fd, buf);
    send_raw(fd,
             "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
             "\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n9\r\ndata: 3\n\n\r\n0\r\n\r\n");
    char tmp[64];
    while (::recv(fd, tmp, sizeof(tmp), 0) > 0) {  // until the client closes
    }
  });
  Client client;
  auto opened = run(loop_, client.stream(upstream.endpoint(), get("/")));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  ClientStream stream = std::move(opened.value());
  auto piece = run(loop_, [&]() -> net::awaitable<Result<std::string>> {
    auto p = co_await stream.read();
    if (!p.ok()) co_return p.status();
    co_return std::string(*p);
  }());
  ASSERT_TRUE(piece.ok()) << piece.status().to_string();
  EXPECT_EQ(*piece, "data: 1\n\ndata: 2\n\ndata: 3\n\n");
  EXPECT_TRUE(stream.done());
}

TEST_F(ClientTest, AMalformedChunkAfterGoodOnesFailsTheReadAfterTheirPiece) {
  RawUpstream upstream([](int fd, int) {
    std::string buf;
    read_request_head(fd, buf);
    send_raw(fd,
             "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
             "\r\n9\r\ndata: 1\n\n\r\nZZ\r\ngarbage\r\n");
    char tmp[64];
    while (::recv(fd, tmp, sizeof(tmp), 0) > 0) {
    }
  });
  Client client;
  auto opened = run(loop_, client.stream(upstream.endpoint(), get("/")));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  ClientStream stream = std::move(opened.value());
  auto read_one = [&]() -> net::awaitable<Result<std::string>> {
    auto p = co_await stream.read();
    if (!p.ok()) co_return p.status();
    co_return std::string(*p);
  };
  auto first = run(loop_, read_one());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(*first, "data: 1\n\n");
  auto second = run(loop_, read_one());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kDataLoss) << second.status().to_string();
  EXPECT_FALSE(stream.done());
}

TEST_F(ClientTest, RefusedConnectionFailsBeforeTheFirstByte) {
  Client client;
  auto r = run(loop_, client.request(Endpoint{"127.0.0.1", testing::closed_port()}, get("/")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(r.error().before_first_byte);
}

TEST_F(ClientTest, SilentUpstreamHitsTheResponseDeadline) {
  SilentListener silent;  // accepts at the kernel level, never answers
  ClientOptions options;
  options.response_timeout = Ms(200);
  Client client(options);
  const auto begin = TestClock::now();
  auto r = run(loop_, client.request(Endpoint{"127.0.0.1", silent.port()}, get("/")));
  const auto elapsed = TestClock::now() - begin;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(r.error().before_first_byte);
  EXPECT_GE(elapsed, Ms(150));
  EXPECT_LT(elapsed, Ms(3000));
}

// A whole-answer request ends at the caller's deadline even when each read's own timeout is
// far longer: an upstream that sends the head and then a trickle never holds it past it.
TEST_F(ClientTest, WholeResponseRequestEndsAtTheCallersDeadline) {
  std::promise<void> release;
  auto released = release.get_future().share();
  RawUpstream upstream([released](int fd, int) {
    std::string buf;
    read_request_head(fd, buf);
    send_raw(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello");
    released.wait_for(std::chrono::seconds(10));  // stall with the connection open
  });
  ClientOptions options;
  options.read_timeout = Ms(60000);
  options.response_timeout = Ms(60000);
  Client client(options);
  const auto begin = TestClock::now();
  auto r = run(loop_, client.request(upstream.endpoint(), get("/"),
                                     std::chrono::steady_clock::now() + Ms(200)));
  const auto elapsed = TestClock::now() - begin;
  release.set_value();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(r.error().before_first_byte);
  EXPECT_GE(elapsed, Ms(150));
  EXPECT_LT(elapsed, Ms(10000));
}

TEST_F(ClientTest, UpstreamClosingBeforeAnsweringFailsBeforeTheFirstByte) {
  RawUpstream upstream([](int fd, int) {
    std::string buf;
    read_request_head(fd, buf);
  });
  Client client;
  auto r = run(loop_, client.request(upstream.endpoint(), get("/")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(r.error().before_first_byte);
}

TEST_F(ClientTest, PartialHeaderCountsAsAfterTheFirstByte) {
  RawUpstream upstream([](int fd, int) {
    std::string buf;
    read_request_head(fd, buf);
    send_raw(fd, "HTTP/1.1 200 OK\r\nContent-Le");
  });
  Client client;
  auto r = run(loop_, client.request(upstream.endpoint(), get("/")));
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.error().before_first_byte);
}

TEST_F(ClientTest, TruncatedBodyIsDataLossAfterTheFirstByte) {
  RawUpstream upstream([](int fd, int) {
    std::string buf;
    read_request_head(fd, buf);
    send_raw(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc");
  });
  Client client;
  auto r = run(loop_, client.request(upstream.endpoint(), get("/")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status.code(), StatusCode::kDataLoss);
  EXPECT_FALSE(r.error().before_first_byte);
}

TEST_F(ClientTest, MalformedResponseIsDataLoss) {
  RawUpstream upstream([](int fd, int) {
    std::string buf;
    read_request_head(fd, buf);
    send_raw(fd, "SMTP ready\r\n\r\n");
  });
  Client client;
  auto r = run(loop_, client.request(upstream.endpoint(), get("/")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status.code(), StatusCode::kDataLoss);
}

TEST_F(ClientTest, OversizedResponseBodyIsRefused) {
  Routes routes;
  routes.add(Method::kGet, "/big", [](Request&, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::text(200, std::string(4096, 'x'));
  });
  start(std::move(routes));
  ClientOptions options;
  options.max_body_bytes = 1024;
  Client client(options);
  auto r = run(loop_, client.request(endpoint_, get("/big")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status.code(), StatusCode::kResourceExhausted);
}

TEST_F(ClientTest, StreamStallingMidBodyHitsTheReadDeadline) {
  std::promise<void> release;
  auto released = release.get_future().share();
  RawUpstream upstream([released](int fd, int) {
    std::string buf;
    read_request_head(fd, buf);
    send_raw(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
    released.wait_for(std::chrono::seconds(10));  // stall with the connection open
  });
  ClientOptions options;
  options.read_timeout = Ms(200);
  Client client(options);
  auto opened = run(loop_, client.stream(upstream.endpoint(), get("/")));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  ClientStream stream = std::move(opened.value());
  auto first = run(loop_, stream.read());
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, "hello");
  const auto begin = TestClock::now();
  auto stalled = run(loop_, stream.read());
  EXPECT_EQ(stalled.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(TestClock::now() - begin, Ms(3000));
  EXPECT_EQ(run(loop_, stream.read()).status().code(), StatusCode::kCancelled);  // closed
  release.set_value();
}

TEST_F(ClientTest, ClosingAStreamCancelsTheUpstreamRequest) {
  std::promise<Status> upstream_saw;
  Routes routes;
  routes.add(Method::kGet, "/tokens",
             [&](Request&, ResponseWriter& out) -> net::awaitable<Response> {
               Status s = co_await out.write_head(200, kSseContentType);
               net::steady_timer pace(co_await net::this_coro::executor);
               while (s.ok()) {
                 s = co_await out.write(sse_event(R"({"token":1})"));
                 pace.expires_after(Ms(2));
                 auto [ec] = co_await pace.async_wait(use_nothrow);
                 if (ec) s = cancelled("handler cancelled");
               }
               upstream_saw.set_value(s);
               co_return Response{};
             });
  start(std::move(routes));
  Client client;
  auto opened = run(loop_, client.stream(endpoint_, get("/tokens")));
  ASSERT_TRUE(opened.ok());
  ClientStream stream = std::move(opened.value());
  auto piece = run(loop_, stream.read());
  ASSERT_TRUE(piece.ok());
  EXPECT_FALSE(piece->empty());
  stream.close();
  auto f = upstream_saw.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(f.get().code(), StatusCode::kCancelled);
  EXPECT_EQ(client.stats().idle, 0u);  // a cancelled exchange never returns to the pool
}

TEST_F(ClientTest, AsioCancellationOfAPendingReadClosesTheStream) {
  Routes routes;
  routes.add(Method::kGet, "/hang", [](Request&, ResponseWriter& out) -> net::awaitable<Response> {
    (void)co_await out.write_head(200, kSseContentType);
    (void)co_await out.flush();  // the client's stream() returns with the head
    net::steady_timer t(co_await net::this_coro::executor, std::chrono::hours(1));
    co_await t.async_wait(use_nothrow);  // cancelled when the client leaves
    co_return Response{};
  });
  start(std::move(routes));
  Client client;
  auto opened = run(loop_, client.stream(endpoint_, get("/hang")));
  ASSERT_TRUE(opened.ok());
  ClientStream stream = std::move(opened.value());
  // A timeout raced against the read: the loser (the read) is cancelled, as a handler's read is
  // when its own client leaves.
  auto raced = run(loop_, [&]() -> net::awaitable<Status> {
    net::steady_timer t(co_await net::this_coro::executor, Ms(50));
    Status read_status;
    auto read = [&]() -> net::awaitable<void> { read_status = (co_await stream.read()).status(); };
    co_await (read() || t.async_wait(net::use_awaitable));
    co_return read_status;
  }());
  EXPECT_EQ(raced.code(), StatusCode::kCancelled);
  EXPECT_TRUE(wait_until([&] { return server_->stats().client_disconnects == 1; }));
}

TEST_F(ClientTest, IdleConnectionClosedByTheUpstreamIsNotReused) {
  ServerOptions options;
  options.idle_timeout = Ms(100);
  start(echo_routes(), options);
  Client client;
  ASSERT_TRUE(run(loop_, client.request(endpoint_, get("/health"))).ok());
  ASSERT_TRUE(wait_until([&] { return server_->stats().connections_open == 0; }));
  auto r = run(loop_, client.request(endpoint_, get("/health")));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(client.stats().connects, 2u);
}

TEST_F(ClientTest, PooledConnectionThatDiesWithTheRequestIsRetriedOnce) {
  // Connection 0 answers one request, then reads the next one and closes without answering: the
  // keep-alive race. The client retries on a fresh connection (1), which answers.
  RawUpstream upstream([](int fd, int index) {
    std::string buf;
    if (!read_request_head(fd, buf)) return;
    send_raw(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    if (index == 0) read_request_head(fd, buf);
  });
  Client client;
  ASSERT_TRUE(run(loop_, client.request(upstream.endpoint(), get("/"))).ok());
  auto r = run(loop_, client.request(upstream.endpoint(), get("/")));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->body, "ok");
  EXPECT_EQ(client.stats().stale_retries, 1u);
  EXPECT_EQ(client.stats().connects, 2u);
}

// The relay loop of client.h's example, as the gateway will run it: an upstream streams SSE, a
// proxy route relays it through the pooled client, and a raw client reads it.
class RelayTest : public ClientTest {
 protected:
  // Starts the upstream on its own server and a proxy (this fixture's server) relaying to it.
  void start_relay(Handler upstream_handler) {
    Routes upstream_routes;
    upstream_routes.add(Method::kPost, "/v1/completions", std::move(upstream_handler));
    auto s = Server::start(loop_, ServerOptions{}, std::move(upstream_routes));
    ASSERT_TRUE(s.ok());
    upstream_ = std::move(s.value());
    const Endpoint to{"127.0.0.1", upstream_->port()};
    Routes routes;
    routes.add(Method::kPost, "/v1/completions",
               [this, to](Request& req, ResponseWriter& out) -> net::awaitable<Response> {
                 Request forward;
                 forward.method = Method::kPost;
                 forward.target = req.target;
                 forward.headers.push_back({"Content-Type", "application/json"});
                 forward.body = std::move(req.body);
                 auto opened = co_await client_.stream(to, std::move(forward));
                 if (!opened.ok()) {
                   co_return error_response(opened.error().status,
                                            {.origin = ErrorOrigin::kUpstream});
                 }
                 ClientStream& up = opened.value();
                 if (!(co_await out.write_head(up.status(), up.header("Content-Type"))).ok()) {
                   co_return Response{};
                 }
                 for (;;) {
                   Result<std::string_view> piece = co_await up.read();
                   if (!piece.ok()) {
                     std::string event =
                         sse_error_event(piece.status(), {.origin = ErrorOrigin::kUpstream});
                     co_await out.write(event);
                     break;
                   }
                   if (piece->empty()) break;
                   if (!(co_await out.write(*piece)).ok()) break;
                 }
                 co_return Response{};
               });
    start(std::move(routes));
  }
  void TearDown() override {
    if (server_) server_->shutdown(Ms(1000));
    if (upstream_) upstream_->shutdown(Ms(1000));
    ClientTest::TearDown();
  }

  Client client_;
  std::unique_ptr<Server> upstream_;
};

TEST_F(RelayTest, RelaysTheUpstreamStreamByteForByte) {
  std::string expected;
  for (int i = 0; i < 50; ++i)
    append_sse_event(expected, R"({"choices":[{"text":"t)" + std::to_string(i) + "\"}]}");
  expected += kSseDone;
  start_relay([expected](Request&, ResponseWriter& out) -> net::awaitable<Response> {
    Status s = co_await out.write_head(200, kSseContentType);
    // Uneven pieces, so the relay cannot depend on event boundaries.
    for (size_t pos = 0; s.ok() && pos < expected.size(); pos += 37) {
      s = co_await out.write(std::string_view(expected).substr(pos, 37));
    }
    co_return Response{};
  });
  testing::RawConn c(server_->port());
  ASSERT_TRUE(
      c.send_all("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}"));
  const testing::RawResponse r = c.read_response();
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), kSseContentType);
  EXPECT_EQ(r.body, expected);
}

TEST_F(RelayTest, ClientLeavingTheProxyCancelsTheUpstream) {
  std::promise<void> upstream_done;
  start_relay([&](Request&, ResponseWriter& out) -> net::awaitable<Response> {
    Status s = co_await out.write_head(200, kSseContentType);
    net::steady_timer pace(co_await net::this_coro::executor);
    while (s.ok()) {  // an endless generation, until its client (the proxy) goes away
      s = co_await out.write(sse_event(R"({"token":1})"));
      pace.expires_after(Ms(2));
      auto [ec] = co_await pace.async_wait(use_nothrow);
      if (ec) break;
    }
    upstream_done.set_value();
    co_return Response{};
  });
  testing::RawConn c(server_->port());
  ASSERT_TRUE(
      c.send_all("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}"));
  ASSERT_TRUE(c.read_until("data: "));
  c.close();
  auto f = upstream_done.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(wait_until([&] { return upstream_->stats().client_disconnects == 1; }));
  EXPECT_TRUE(wait_until([&] { return server_->stats().client_disconnects == 1; }));
}

TEST_F(RelayTest, UpstreamDyingMidStreamEndsTheStreamWithAnErrorEvent) {
  start_relay([](Request&, ResponseWriter& out) -> net::awaitable<Response> {
    (void)co_await out.write_head(200, kSseContentType);
    (void)co_await out.write(sse_event(R"({"token":1})"));
    throw std::runtime_error("engine crashed");  // the server cuts the stream without its end
  });
  testing::RawConn c(server_->port());
  ASSERT_TRUE(
      c.send_all("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}"));
  const testing::RawResponse r = c.read_response();
  ASSERT_TRUE(r.complete);  // the downstream stream still ends cleanly
  SseParser parser;
  parser.feed(r.body);
  SseEvent ev;
  ASSERT_TRUE(parser.next(ev));
  EXPECT_EQ(ev.data, R"({"token":1})");
  ASSERT_TRUE(parser.next(ev));
  EXPECT_NE(ev.data.find(R"("type":"upstream_error")"), std::string_view::npos) << ev.data;
}

}  // namespace
}  // namespace infera::http
