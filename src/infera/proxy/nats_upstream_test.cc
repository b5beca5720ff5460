// --request-transport nats end to end on loopback: NatsUpstream (router side) -> a real
// nats-server (Debian) -> RequestRelay (worker side) -> an HTTP engine stand-in, through the
// same relay loop as the HTTP transport, with a recording client side.
#include "infera/proxy/nats_upstream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "infera/http/event_loop.h"
#include <boost/asio/use_future.hpp>

#include "infera/http/net.h"
#include "infera/http/sse.h"
#include "infera/nats/client.h"
#include "infera/nats/request_relay.h"
#include "tests/support/nats_process.h"

namespace infera::proxy {
namespace {

using namespace std::chrono_literals;
using infera::testing::eventually;

class Recorder final : public Downstream {
 public:
  explicit Recorder(int fail_after_writes = -1) : fail_after_(fail_after_writes) {}
  net::awaitable<Status> write_head(int status, http::Headers headers) override {
    status_ = status;
    headers_ = std::move(headers);
    started_ = true;
    co_return ok_status();
  }
  net::awaitable<Status> write(std::string_view bytes, bool last) override {
    if (fail_after_ >= 0 && writes_ >= fail_after_) {
      gone_ = true;
      co_return unavailable("client gone");
    }
    ++writes_;
    body += bytes;
    finished = finished || last;  // `last` ends the body in the same write
    co_return ok_status();
  }
  net::awaitable<Status> finish() override {
    finished = true;
    co_return ok_status();
  }
  bool started() const override { return started_; }
  bool client_gone() const override { return gone_; }

  int status_ = 0;
  http::Headers headers_;
  std::string body;
  bool finished = false;

 private:
  int fail_after_;
  int writes_ = 0;
  bool started_ = false;
  bool gone_ = false;
};

std::string sse_stream(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += http::sse_event("{\"i\":" + std::to_string(i) + ",\"t\":\"tok\"}");
  return out + std::string(http::kSseDone);
}

class NatsUpstreamTest : public ::testing::Test {
 protected:
  void SetUp() override { start(0); }

  void start(size_t max_payload) {
    infera::testing::NatsServerOptions so;
    so.max_payload = max_payload;
    auto s = infera::testing::NatsProcess::start(so);
    ASSERT_TRUE(s.ok());
    server_ = std::move(*s);
    engine_loop_ = std::make_unique<http::EventLoop>(1);
    http::Routes routes;
    routes.add(http::Method::kPost, "/stream", [](http::Request& r, http::ResponseWriter& out) -> net::awaitable<http::Response> {
      const int n = std::stoi(std::string(r.header("X-Events")));
      Status st = co_await out.write_head(200, http::kSseContentType);
      for (int i = 0; st.ok() && i < n; ++i) st = co_await out.write(http::sse_event("{\"i\":" + std::to_string(i) + ",\"t\":\"tok\"}"));
      if (st.ok()) st = co_await out.write(http::kSseDone);
      co_return http::Response{};
    });
    routes.add(http::Method::kPost, "/echo-size", [](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
      uint64_t sum = 0;
      for (unsigned char c : r.body) sum = sum * 31 + c;
      co_return http::Response::json(200, "{\"bytes\":" + std::to_string(r.body.size()) + ",\"sum\":" + std::to_string(sum) + "}");
    });
    routes.add(http::Method::kGet, "/v1/models", [](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
      co_return http::Response::json(200, "{\"data\":[{\"id\":\"m\"}]}");
    });
    routes.add(http::Method::kPost, "/fail", [](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
      co_return http::Response::json(503, "{\"error\":\"busy\"}");
    });
    routes.add(http::Method::kPost, "/hang", [this](http::Request&, http::ResponseWriter& out) -> net::awaitable<http::Response> {
      Status st = co_await out.write_head(200, http::kSseContentType);
      if (st.ok()) st = co_await out.write(http::sse_event("first"));
      if (st.ok()) st = co_await out.flush();
      net::steady_timer t(co_await net::this_coro::executor, std::chrono::hours(1));
      hanging_ = true;
      auto [ec] = co_await t.async_wait(use_nothrow);
      if (ec) engine_saw_cancel_ = true;  // the relay closed the engine's connection
      co_return http::Response{};
    });
    http::ServerOptions ho;
    ho.host = "127.0.0.1";
    ho.port = 0;
    auto engine = http::Server::start(*engine_loop_, ho, std::move(routes));
    ASSERT_TRUE(engine.ok());
    engine_ = std::move(*engine);
    worker_bus_ = bus();
    router_bus_ = bus();
    start_relay();
    router_loop_ = std::make_unique<http::EventLoop>(1);
  }

  void start_relay() {
    nats::RequestRelayOptions ro;
    ro.worker_id = kWorker;
    ro.engine = {"127.0.0.1", engine_->port()};
    relay_ = std::make_unique<nats::RequestRelay>(*worker_bus_, ro);
    ASSERT_TRUE(relay_->start().ok());
    ASSERT_TRUE(worker_bus_->flush().ok());  // subscribed before the first request
  }

  std::unique_ptr<nats::Client> bus() {
    nats::ClientOptions o;
    o.servers = *nats::parse_server_urls(server_->url());
    auto c = std::make_unique<nats::Client>(o);
    EXPECT_TRUE(c->connect().ok());
    return c;
  }

  http::Request request(std::string target, std::string body = "{}") {
    http::Request r;
    r.method = http::Method::kPost;
    r.target = std::move(target);
    r.headers.push_back({"Content-Type", "application/json"});
    r.body = std::move(body);
    return r;
  }

  ForwardOutcome relay(http::Request r, Recorder& out, NatsUpstreamOptions o = {},
                       Nanos deadline = Nanos::max()) {
    NatsUpstream up(*router_bus_, o, clock_);
    ForwardOptions fo;
    fo.deadline = deadline;
    bool first = false;
    fo.on_first_byte = [&] { first = true; };
    auto f = net::co_spawn(router_loop_->context(),
                           up.relay(worker_endpoint_, std::move(r), out, std::move(fo)),
                           net::use_future);
    ForwardOutcome o2 = f.get();
    if (o2.result == ForwardResult::kCompleted) {
      EXPECT_TRUE(first);
    }
    return o2;
  }

  const std::string kWorker = "127.0.0.1:30000";
  const http::Endpoint worker_endpoint_{"127.0.0.1", 30000};  // outlives every call (by reference)
  SteadyClock clock_;
  std::optional<infera::testing::NatsProcess> server_;
  std::unique_ptr<http::EventLoop> engine_loop_;
  std::unique_ptr<http::Server> engine_;
  std::unique_ptr<nats::Client> worker_bus_, router_bus_;
  std::unique_ptr<nats::RequestRelay> relay_;
  std::unique_ptr<http::EventLoop> router_loop_;
  std::atomic<bool> hanging_{false}, engine_saw_cancel_{false};

  void TearDown() override {
    router_loop_.reset();
    relay_.reset();
    if (engine_) engine_->shutdown(0ms);
    engine_.reset();  // before its loop
    engine_loop_.reset();
  }
};

TEST_F(NatsUpstreamTest, StreamsSseByteExactThroughASmallWindow) {
  http::Request r = request("/stream");
  r.headers.push_back({"X-Events", "2000"});
  Recorder out;
  NatsUpstreamOptions o;
  o.window = 2;  // the relay must wait for acknowledgements all along
  ForwardOutcome res = relay(std::move(r), out, o);
  ASSERT_EQ(res.result, ForwardResult::kCompleted) << res.error.to_string();
  EXPECT_EQ(out.status_, 200);
  EXPECT_EQ(http::find_header(out.headers_, "Content-Type"), http::kSseContentType);
  EXPECT_EQ(out.body, sse_stream(2000));
  EXPECT_TRUE(out.finished);
  EXPECT_TRUE(eventually([&] { return relay_->stats().completed == 1; }));
}

TEST_F(NatsUpstreamTest, FetchReadsAWholeAnswer) {
  NatsUpstream up(*router_bus_, {}, clock_);
  http::Request r;
  r.target = "/v1/models";
  auto call = [&]() -> net::awaitable<std::optional<http::ClientResult<http::Response>>> {
    const http::Endpoint to{"127.0.0.1", 30000};  // named: see awaitable.h on GCC 12
    co_return co_await up.fetch(to, std::move(r), Nanos::max());
  };
  const nats::ClientStats before = router_bus_->stats();
  auto answer = *net::co_spawn(router_loop_->context(), call(), net::use_future).get();
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->body, "{\"data\":[{\"id\":\"m\"}]}");
  // A whole answer is one message each way: the request, and a head that carries the body and
  // ends it (Infera-Last); no acknowledgement is owed for it.
  const nats::ClientStats after = router_bus_->stats();
  EXPECT_EQ(after.msgs_out - before.msgs_out, 1u);
  EXPECT_EQ(after.msgs_in - before.msgs_in, 1u);
}

TEST_F(NatsUpstreamTest, AStreamIsAcknowledgedEveryHalfWindow) {
  http::Request r = request("/stream");
  r.headers.push_back({"X-Events", "640"});
  Recorder out;
  const nats::ClientStats before = router_bus_->stats();
  ForwardOutcome res = relay(std::move(r), out, NatsUpstreamOptions{});  // window 64
  ASSERT_EQ(res.result, ForwardResult::kCompleted) << res.error.to_string();
  EXPECT_EQ(out.body, sse_stream(640));
  EXPECT_TRUE(out.finished);
  const nats::ClientStats after = router_bus_->stats();
  const uint64_t frames = after.msgs_in - before.msgs_in;
  const uint64_t acks = after.msgs_out - before.msgs_out - 1;  // less the request
  EXPECT_GE(frames, 2u);
  EXPECT_LE(acks, frames / 32 + 1) << frames << " frames";
}

TEST_F(NatsUpstreamTest, ARequestBodyAboveMaxPayloadArrivesWhole) {
  TearDown();
  start(8192);
  std::string body;
  for (int i = 0; i < 100000; ++i) body.push_back(static_cast<char>('a' + (i * 7) % 26));
  uint64_t sum = 0;
  for (unsigned char c : body) sum = sum * 31 + c;
  Recorder out;
  ForwardOutcome res = relay(request("/echo-size", body), out);
  ASSERT_EQ(res.result, ForwardResult::kCompleted) << res.error.to_string();
  EXPECT_EQ(out.body, "{\"bytes\":100000,\"sum\":" + std::to_string(sum) + "}");
}

TEST_F(NatsUpstreamTest, AnEngine5xxIsRetryableAndNothingReachesTheClient) {
  Recorder out;
  ForwardOutcome res = relay(request("/fail"), out);
  EXPECT_EQ(res.result, ForwardResult::kRetryable);
  EXPECT_EQ(res.upstream_status, 503);
  EXPECT_FALSE(out.started());
}

TEST_F(NatsUpstreamTest, NoRelayIsRetryableAtOnce) {
  relay_->stop();
  ASSERT_TRUE(worker_bus_->flush().ok());
  Recorder out;
  NatsUpstreamOptions o;
  o.first_byte_timeout = 60s;  // the answer must come from the 503, not a timeout
  ForwardOutcome res = relay(request("/stream"), out, o);
  EXPECT_EQ(res.result, ForwardResult::kRetryable);
  EXPECT_NE(res.error.message().find("no relay serves"), std::string::npos) << res.error.to_string();
  EXPECT_FALSE(out.started());
}

TEST_F(NatsUpstreamTest, ARelayStoppedMidStreamIsABrokenStreamWithAnErrorEvent) {
  Recorder out;
  std::future<ForwardOutcome> f = std::async(std::launch::async, [&] { return relay(request("/hang"), out); });
  ASSERT_TRUE(eventually([&] { return hanging_.load(); }));
  ASSERT_TRUE(eventually([&] { return relay_->stats().bytes > 0; }));
  relay_->stop();
  ForwardOutcome res = f.get();
  EXPECT_EQ(res.result, ForwardResult::kBrokenStream);
  EXPECT_NE(out.body.find("\"error\""), std::string::npos) << out.body;
  EXPECT_TRUE(out.body.ends_with(std::string(http::kSseDone))) << out.body;
  EXPECT_TRUE(eventually([&] { return engine_saw_cancel_.load(); }));
}

TEST_F(NatsUpstreamTest, AClientThatLeavesCancelsTheEngineCall) {
  Recorder out(/*fail_after_writes=*/0);
  ForwardOutcome res = relay(request("/hang"), out);
  EXPECT_EQ(res.result, ForwardResult::kClientGone);
  EXPECT_TRUE(eventually([&] { return engine_saw_cancel_.load(); }));
  EXPECT_TRUE(eventually([&] { return relay_->stats().cancelled == 1 && relay_->stats().active == 0; }));
}

TEST_F(NatsUpstreamTest, TheRequestDeadlineEndsAWaitBeforeTheFirstByte) {
  relay_->stop();
  // A subscriber that takes requests and never answers: no 503, only the deadline.
  auto sid = worker_bus_->subscribe("infera.requests.127_0_0_1_30000", [](const nats::Message&) {});
  ASSERT_TRUE(sid.ok());
  ASSERT_TRUE(worker_bus_->flush().ok());
  Recorder out;
  ForwardOutcome res = relay(request("/stream"), out, {}, clock_.now() + Nanos(300ms));
  EXPECT_EQ(res.result, ForwardResult::kRetryable);
  EXPECT_EQ(res.error.code(), StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace infera::proxy
