// TLS on both sides of the http module over real loopback sockets: the server with a TLS
// context answering the client with one (whole, posted and streamed responses, keep-alive),
// verification failures, plain HTTP on the TLS port, a stalled handshake, a client leaving a TLS
// stream, and the contexts' own errors. Certificates come from a throwaway CA made with the
// openssl command line (tls_test_support.h).
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <string>

#include "infera/http/client.h"
#include "infera/http/net.h"
#include "infera/http/server.h"
#include "infera/http/sse.h"
#include "infera/http/test_run.h"
#include "infera/http/test_support.h"
#include "infera/http/tls.h"
#include "infera/http/tls_files.h"
#include "infera/http/tls_test_support.h"

namespace infera::http {
namespace {

using testing::Ms;
using testing::run;
using testing::RawConn;
using testing::TestCa;
using testing::TestClock;
using testing::wait_until;


Request get(std::string target) {
  Request r;
  r.method = Method::kGet;
  r.target = std::move(target);
  return r;
}

// Three SSE events, the second larger than a TLS record (16 KiB), then [DONE].
std::vector<std::string> sse_pieces() {
  return {sse_event(R"({"n":1})"), sse_event("{\"big\":\"" + std::string(40000, 'x') + "\"}"),
          sse_event(R"({"n":3})"), std::string(kSseDone)};
}

Routes test_routes() {
  Routes routes;
  routes.add(Method::kGet, "/health", [](Request&, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::text(200, "ok");
  });
  routes.add(Method::kPost, "/echo", [](Request& r, ResponseWriter&) -> net::awaitable<Response> {
    co_return Response::text(200, "echo:" + std::to_string(r.body.size()));
  });
  routes.add(Method::kGet, "/stream",
             [](Request&, ResponseWriter& out) -> net::awaitable<Response> {
               if (!(co_await out.write_head(200, kSseContentType)).ok()) co_return Response{};
               for (const std::string& piece : sse_pieces()) {
                 if (!(co_await out.write(piece)).ok()) co_return Response{};
               }
               co_return Response{};
             });
  return routes;
}

class TlsTest : public ::testing::Test {
 protected:
  // One CA for the suite: making it runs openssl seven times.
  static void SetUpTestSuite() { shared_ca_ = new TestCa(); }
  static void TearDownTestSuite() {
    delete shared_ca_;
    shared_ca_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(ca_.ok()) << ca_.log(); }
  void TearDown() override {
    if (server_) server_->shutdown(Ms(1000));
    server_.reset();
    loop_.stop();
  }

  void start(Routes routes, ServerOptions options = {}, const std::string& cert = "",
             const std::string& key = "") {
    auto tls = load_tls_server_context(cert.empty() ? ca_.cert_file() : cert,
                                       key.empty() ? ca_.key_file() : key);
    ASSERT_TRUE(tls.ok()) << tls.status().to_string();
    options.tls = *tls;
    auto s = Server::start(loop_, std::move(options), std::move(routes));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(s.value());
  }

  ClientOptions trusting(const std::string& ca_file) {
    ClientOptions o;
    auto tls = load_tls_client_context(ca_file);
    EXPECT_TRUE(tls.ok()) << tls.status().to_string();
    if (tls.ok()) o.tls_context = *tls;
    return o;
  }

  Endpoint endpoint(const std::string& host = "127.0.0.1") const {
    return Endpoint{host, server_->port(), /*tls=*/true};
  }

  static TestCa* shared_ca_;
  const TestCa& ca_ = *shared_ca_;
  EventLoop loop_{2};
  std::unique_ptr<Server> server_;
};

TestCa* TlsTest::shared_ca_ = nullptr;

TEST_F(TlsTest, ServerAnswersTheClientOverTlsAndKeepsTheConnection) {
  start(test_routes());
  Client client(trusting(ca_.ca_file()));
  auto first = run(loop_, client.request(endpoint(), get("/health")));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, "ok");
  // A body larger than a TLS record and than one read, on the same connection.
  Request post;
  post.method = Method::kPost;
  post.target = "/echo";
  post.body = std::string(200'000, 'p');
  auto second = run(loop_, client.request(endpoint(), std::move(post)));
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->body, "echo:200000");
  EXPECT_EQ(client.stats().connects, 1u);
  EXPECT_EQ(client.stats().reuses, 1u);
  EXPECT_EQ(server_->stats().connections_accepted, 1u);
  EXPECT_EQ(server_->stats().tls_handshake_failures, 0u);
}

TEST_F(TlsTest, StreamedSseResponseArrivesWholeOverTls) {
  start(test_routes());
  Client client(trusting(ca_.ca_file()));
  auto body = run(loop_, [&]() -> net::awaitable<Result<std::string>> {
    auto opened = co_await client.stream(endpoint(), get("/stream"));
    if (!opened.ok()) co_return opened.status();
    EXPECT_EQ(opened->header("Transfer-Encoding"), "chunked");
    std::string all;
    for (;;) {
      Result<std::string_view> piece = co_await opened->read();
      if (!piece.ok()) co_return piece.status();
      if (piece->empty()) break;
      all.append(*piece);
    }
    co_return all;
  }());
  ASSERT_TRUE(body.ok()) << body.status().to_string();
  std::string expected;
  for (const std::string& piece : sse_pieces()) expected += piece;
  EXPECT_EQ(*body, expected);
  // The stream's connection went back to the pool: a second request reuses it.
  auto again = run(loop_, client.request(endpoint(), get("/health")));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(client.stats().reuses, 1u);
}

TEST_F(TlsTest, PooledTlsConnectionTheServerClosedIsNotReused) {
  ServerOptions options;
  options.idle_timeout = Ms(100);
  start(test_routes(), std::move(options));
  Client client(trusting(ca_.ca_file()));
  ASSERT_TRUE(run(loop_, client.request(endpoint(), get("/health"))).ok());
  ASSERT_TRUE(wait_until([&] { return server_->stats().connections_open == 0; }));
  auto again = run(loop_, client.request(endpoint(), get("/health")));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->body, "ok");
  EXPECT_EQ(client.stats().connects, 2u);
}

TEST_F(TlsTest, HostNameIsCheckedAgainstTheCertificatesDnsName) {
  start(test_routes());
  Client client(trusting(ca_.ca_file()));
  auto r = run(loop_, client.request(endpoint("localhost"), get("/health")));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->body, "ok");
}

TEST_F(TlsTest, UntrustedCertificateFailsBeforeTheFirstByteWithTheVerifyError) {
  start(test_routes());
  Client client(trusting(ca_.other_ca_file()));
  auto r = run(loop_, client.request(endpoint(), get("/health")));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().before_first_byte);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("TLS: certificate verify failed ("), std::string::npos)
      << r.status().message();
  // The server saw the client give up: counted, and it goes on serving.
  EXPECT_TRUE(wait_until([&] { return server_->stats().tls_handshake_failures == 1; }));
  Client trusting_client(trusting(ca_.ca_file()));
  EXPECT_TRUE(run(loop_, trusting_client.request(endpoint(), get("/health"))).ok());
}

TEST_F(TlsTest, CertificateForAnotherNameFailsVerification) {
  start(test_routes(), {}, ca_.name_only_cert_file(), ca_.name_only_key_file());
  Client client(trusting(ca_.ca_file()));
  auto r = run(loop_, client.request(endpoint(), get("/health")));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().before_first_byte);
  EXPECT_NE(r.status().message().find("certificate verify failed (IP address mismatch)"),
            std::string::npos)
      << r.status().message();
}

TEST_F(TlsTest, PlainHttpClientOnTheTlsPortIsClosedAndCounted) {
  start(test_routes());
  RawConn plain(server_->port());
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(plain.send_all("GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_TRUE(plain.wait_eof(Ms(5000)));
  EXPECT_EQ(plain.pending().find("HTTP/1.1 200"), std::string::npos);
  EXPECT_TRUE(wait_until([&] { return server_->stats().tls_handshake_failures == 1; }));
  EXPECT_TRUE(wait_until([&] { return server_->stats().connections_open == 0; }));
  Client client(trusting(ca_.ca_file()));
  auto r = run(loop_, client.request(endpoint(), get("/health")));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->body, "ok");
}

TEST_F(TlsTest, StalledHandshakeIsClosedAtTheHeaderTimeout) {
  ServerOptions options;
  options.header_timeout = Ms(300);
  start(test_routes(), std::move(options));
  const auto began = TestClock::now();
  RawConn silent(server_->port());
  ASSERT_TRUE(silent.ok());
  ASSERT_TRUE(silent.send_all(std::string("\x16\x03\x01", 3)));  // a ClientHello's first bytes
  EXPECT_TRUE(silent.wait_eof(Ms(5000)));
  EXPECT_GE(TestClock::now() - began, Ms(250));
  EXPECT_TRUE(wait_until([&] { return server_->stats().tls_handshake_failures == 1; }));
  EXPECT_TRUE(wait_until([&] { return server_->stats().connections_open == 0; }));
}

TEST_F(TlsTest, ClientLeavingATlsStreamCancelsTheHandler) {
  std::atomic<bool> cancelled{false};
  Routes routes;
  routes.add(Method::kGet, "/slow", [&](Request&, ResponseWriter& out) -> net::awaitable<Response> {
    if (!(co_await out.write_head(200, kSseContentType)).ok()) co_return Response{};
    if (!(co_await out.flush()).ok()) co_return Response{};
    // Until the client leaves (the test's deadline is far shorter than this).
    if (!co_await pause_for(Ms(60'000))) cancelled = true;
    co_return Response{};
  });
  start(std::move(routes));
  Client client(trusting(ca_.ca_file()));
  const bool opened = run(loop_, [&]() -> net::awaitable<bool> {
    auto stream = co_await client.stream(endpoint(), get("/slow"));
    if (!stream.ok()) co_return false;
    stream->close();  // close_notify, then FIN
    co_return true;
  }());
  ASSERT_TRUE(opened);
  EXPECT_TRUE(wait_until([&] { return cancelled.load(); }));
  EXPECT_TRUE(wait_until([&] { return server_->stats().client_disconnects == 1; }));
}

TEST_F(TlsTest, ShutdownClosesIdleTlsConnectionsAtOnce) {
  start(test_routes());
  Client client(trusting(ca_.ca_file()));
  ASSERT_TRUE(run(loop_, client.request(endpoint(), get("/health"))).ok());
  ASSERT_EQ(server_->stats().connections_open, 1u);  // kept alive, idle
  const auto began = TestClock::now();
  server_->shutdown(Ms(10'000));
  EXPECT_LT(TestClock::now() - began, Ms(5000));
  EXPECT_EQ(server_->stats().connections_open, 0u);
}

TEST_F(TlsTest, TlsClientAgainstAPlainServerFailsBeforeTheFirstByte) {
  auto plain = Server::start(loop_, {}, test_routes());
  ASSERT_TRUE(plain.ok());
  Client client(trusting(ca_.ca_file()));
  auto r = run(loop_, client.request(Endpoint{"127.0.0.1", (*plain)->port(), true}, get("/health")));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().before_first_byte);
  EXPECT_NE(r.status().message().find("TLS: "), std::string::npos) << r.status().message();
  (*plain)->shutdown(Ms(1000));
}

TEST_F(TlsTest, ServerContextErrorsNameTheFile) {
  auto missing = load_tls_server_context(ca_.path("nope.pem"), ca_.key_file());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(ca_.path("nope.pem")), std::string::npos);
  // A key where the certificate should be: not a certificate chain.
  auto swapped = load_tls_server_context(ca_.key_file(), ca_.cert_file());
  ASSERT_FALSE(swapped.ok());
  EXPECT_NE(swapped.status().message().find(ca_.key_file()), std::string::npos)
      << swapped.status().message();
  // Another certificate's key.
  auto mismatched = load_tls_server_context(ca_.cert_file(), ca_.name_only_key_file());
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("key values mismatch"), std::string::npos)
      << mismatched.status().message();
  auto no_ca = load_tls_client_context(ca_.key_file());
  ASSERT_FALSE(no_ca.ok());
  EXPECT_NE(no_ca.status().message().find(ca_.key_file()), std::string::npos);
}

}  // namespace
}  // namespace infera::http
