// The NATS client against a real nats-server (Debian), on a free loopback port.
#include "infera/nats/client.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <vector>

#include "tests/support/nats_process.h"

namespace infera::nats {
namespace {

using testing::NatsProcess;
using testing::NatsServerOptions;
using testing::eventually;

// Messages a handler received, for the test thread to wait on.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::string, std::string>> got;  // subject, payload
  std::vector<int> statuses;
  std::string last_reply;
  Handler handler() {
    return [this](const Message& m) {
      std::lock_guard lock(mu);
      got.emplace_back(std::string(m.subject), std::string(m.payload));
      statuses.push_back(m.status);
      last_reply = std::string(m.reply);
      cv.notify_all();
    };
  }
  bool wait_for(size_t n, std::chrono::milliseconds t = std::chrono::seconds(10)) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, t, [&] { return got.size() >= n; });
  }
  size_t size() {
    std::lock_guard lock(mu);
    return got.size();
  }
};

ClientOptions options_for(const std::string& url) {
  ClientOptions o;
  auto servers = parse_server_urls(url);
  EXPECT_TRUE(servers.ok());
  o.servers = *servers;
  o.reconnect_min = std::chrono::milliseconds(20);
  o.reconnect_max = std::chrono::milliseconds(200);
  return o;
}

TEST(NatsClient, PublishSubscribeInOrder) {
  auto server = NatsProcess::start();
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  Client c(options_for(server->url()));
  ASSERT_TRUE(c.connect().ok());
  Inbox in;
  ASSERT_TRUE(c.subscribe("t.*", in.handler()).ok());
  ASSERT_TRUE(c.flush().ok());  // the server has the SUB
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(c.publish("t." + std::to_string(i % 3), std::to_string(i)).ok());
  }
  ASSERT_TRUE(in.wait_for(1000));
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(in.got[i].second, std::to_string(i));
  EXPECT_EQ(c.stats().msgs_in, 1000u);
  EXPECT_TRUE(c.publish("bad subject", "x").code() == StatusCode::kInvalidArgument);
}

TEST(NatsClient, RequestReplyOnTheInboxAndNoResponders) {
  auto server = NatsProcess::start();
  ASSERT_TRUE(server.ok());
  Client responder(options_for(server->url()));
  Client requester(options_for(server->url()));
  ASSERT_TRUE(responder.connect().ok());
  ASSERT_TRUE(requester.connect().ok());
  ASSERT_TRUE(responder
                  .subscribe("svc.echo",
                             [&](const Message& m) {
                               ASSERT_TRUE(responder.publish(m.reply, "re:" + std::string(m.payload)).ok());
                             })
                  .ok());
  ASSERT_TRUE(responder.flush().ok());
  Inbox in;
  const std::string inbox = requester.make_inbox();
  requester.add_inbox(inbox, in.handler());
  ASSERT_TRUE(requester.publish("svc.echo", "ping", inbox).ok());
  ASSERT_TRUE(in.wait_for(1));
  EXPECT_EQ(in.got[0].second, "re:ping");
  EXPECT_EQ(in.statuses[0], 0);
  // Nobody listens: the server answers 503 at once.
  ASSERT_TRUE(requester.publish("svc.nobody", "x", inbox).ok());
  ASSERT_TRUE(in.wait_for(2));
  EXPECT_EQ(in.statuses[1], 503);
  requester.remove_inbox(inbox);
}

TEST(NatsClient, MaxPayloadFromInfoIsRespected) {
  NatsServerOptions so;
  so.max_payload = 4096;
  auto server = NatsProcess::start(so);
  ASSERT_TRUE(server.ok());
  Client c(options_for(server->url()));
  ASSERT_TRUE(c.connect().ok());
  EXPECT_EQ(c.max_payload(), 4096u);
  EXPECT_TRUE(c.publish("a", std::string(4096, 'x')).ok());
  Status big = c.publish("a", std::string(4097, 'x'));
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("max_payload"), std::string::npos);
  EXPECT_TRUE(c.flush().ok());  // still connected: nothing oversized reached the server
}

TEST(NatsClient, UserPasswordAndTokenAuthentication) {
  NatsServerOptions so;
  so.user = "router";
  so.password = "s3cret";
  auto server = NatsProcess::start(so);
  ASSERT_TRUE(server.ok());
  Client good(options_for(server->url()));
  EXPECT_TRUE(good.connect().ok());
  Client bad(options_for("nats://router:wrong@127.0.0.1:" + std::to_string(server->port())));
  Status s = bad.connect();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Authorization Violation"), std::string::npos) << s.message();

  NatsServerOptions to;
  to.token = "tok123";
  auto tserver = NatsProcess::start(to);
  ASSERT_TRUE(tserver.ok());
  Client tgood(options_for(tserver->url()));
  EXPECT_TRUE(tgood.connect().ok());
  Client tnone(options_for(tserver->url(false)));
  EXPECT_FALSE(tnone.connect().ok());
}

TEST(NatsClient, NoServerIsAClearErrorWithinTheDeadline) {
  const uint16_t port = testing::free_port();
  Client c(options_for("nats://127.0.0.1:" + std::to_string(port)));
  Status s = c.connect();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);
}

TEST(NatsClient, ReconnectsAndResubscribesAfterAServerRestart) {
  auto server = NatsProcess::start();
  ASSERT_TRUE(server.ok());
  Client sub(options_for(server->url()));
  Client pub(options_for(server->url()));
  std::mutex mu;
  int ups = 0, downs = 0;
  sub.set_state_callback([&](bool up) {
    std::lock_guard lock(mu);
    (up ? ups : downs)++;
  });
  ASSERT_TRUE(sub.connect().ok());
  ASSERT_TRUE(pub.connect().ok());
  Inbox in;
  ASSERT_TRUE(sub.subscribe("r.x", in.handler()).ok());
  ASSERT_TRUE(sub.flush().ok());
  ASSERT_TRUE(pub.publish("r.x", "before").ok());
  ASSERT_TRUE(in.wait_for(1));
  server->kill();
  ASSERT_TRUE(eventually([&] { return !sub.connected() && !pub.connected(); }));
  ASSERT_TRUE(server->restart().ok());
  ASSERT_TRUE(eventually([&] { return sub.connected() && pub.connected(); }));
  ASSERT_TRUE(sub.flush().ok());  // the re-sent SUB is in place
  ASSERT_TRUE(pub.publish("r.x", "after").ok());
  ASSERT_TRUE(in.wait_for(2));
  EXPECT_EQ(in.got[1].second, "after");
  std::lock_guard lock(mu);
  EXPECT_EQ(ups, 2);
  EXPECT_EQ(downs, 1);
  EXPECT_GE(sub.stats().connects, 2u);
}

TEST(NatsClient, AFullOutboundBufferDropsAndCountsInsteadOfBlocking) {
  auto server = NatsProcess::start();
  ASSERT_TRUE(server.ok());
  ClientOptions o = options_for(server->url());
  o.max_pending_bytes = 64 * 1024;
  Client c(o);
  ASSERT_TRUE(c.connect().ok());
  server->kill();
  ASSERT_TRUE(eventually([&] { return !c.connected(); }));
  int refused = 0;
  for (int i = 0; i < 100; ++i) {
    Status s = c.publish("a", std::string(1024, 'x'));
    if (s.code() == StatusCode::kResourceExhausted) ++refused;
  }
  EXPECT_GT(refused, 30);
  EXPECT_EQ(c.stats().dropped, static_cast<uint64_t>(refused));
  EXPECT_EQ(c.flush().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace infera::nats
