// TLS end to end (issue 25 item 6): the real `infera server` with --ssl-certfile/--ssl-keyfile
// answering curl (a client that is not ours) with a test CA, a plain-HTTP curl on the same port
// failing cleanly while the server goes on serving, the startup errors of the TLS flags, and an
// https:// worker: a TLS `infera server` in front of a mock engine, itself the worker of a plain
// server that verifies it with --upstream-ca-file (the right CA: answers; another CA: a clean
// error and the verify failure in the log). Certificates from a throwaway CA made with the
// openssl command line (src/infera/http/tls_test_support.h). Prints one FAULT_ROW per fault.
#include <gtest/gtest.h>

#include <cstdio>

#include "infera/http/tls_test_support.h"
#include "tests/e2e/e2e_support.h"

namespace infera::e2e {
namespace {

using http::testing::TestCa;

struct CurlResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CurlResult curl(const TestCa& ca, std::vector<std::string> args) {
  static int calls = 0;
  const std::string log = ca.path("curl_" + std::to_string(++calls) + ".log");
  args.insert(args.begin(), {"curl", "-sS", "--max-time", "20"});
  CurlResult r;
  const Result<int> code = run_process(args, Ms(30'000), log);
  r.exit_code = code.ok() ? *code : -1;
  r.output = read_text(log);
  return r;
}

std::string completion_body() {
  return R"({"model":"m","prompt":"Once upon a time","max_tokens":4})";
}

class TlsE2eTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(ca_.ok()) << ca_.log(); }
  std::vector<std::string> tls_flags() const {
    return {"--ssl-certfile", ca_.cert_file(), "--ssl-keyfile", ca_.key_file()};
  }
  static std::vector<std::string> concat(std::vector<std::string> a,
                                         const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  TestCa ca_;
};

TEST_F(TlsE2eTest, CurlWithTheTestCaIsServedAndPlainHttpFailsCleanly) {
  auto engine = start_engine("tls-engine");
  ASSERT_TRUE(engine->ready());
  auto server = start_server("tls-server", concat({"--worker", engine->worker_flag()}, tls_flags()));
  ASSERT_TRUE(server->ready());
  EXPECT_EQ(server->url().substr(0, 8), "https://") << server->log();
  const std::string base = "https://127.0.0.1:" + std::to_string(server->port());

  const CurlResult health = curl(ca_, {"--cacert", ca_.ca_file(), base + "/health"});
  EXPECT_EQ(health.exit_code, 0) << health.output;
  const CurlResult completion =
      curl(ca_, {"--cacert", ca_.ca_file(), "-H", "Content-Type: application/json", "-d",
                 completion_body(), base + "/v1/completions"});
  EXPECT_EQ(completion.exit_code, 0) << completion.output;
  EXPECT_NE(completion.output.find("\"choices\""), std::string::npos) << completion.output;

  // Plain HTTP on the TLS port: the handshake fails, the connection is closed, nothing crashes.
  int sent = 0;
  int failed_clean = 0;
  for (int i = 0; i < 3; ++i) {
    ++sent;
    const CurlResult plain =
        curl(ca_, {"http://127.0.0.1:" + std::to_string(server->port()) + "/health"});
    if (plain.exit_code != 0 && plain.output.find("HTTP/") == std::string::npos) ++failed_clean;
  }
  EXPECT_EQ(failed_clean, sent);
  // A client that does not trust the server's CA refuses it; the server carries on.
  const CurlResult untrusted = curl(ca_, {"--cacert", ca_.other_ca_file(), base + "/health"});
  EXPECT_NE(untrusted.exit_code, 0) << untrusted.output;
  const CurlResult after = curl(ca_, {"--cacert", ca_.ca_file(), base + "/health"});
  EXPECT_EQ(after.exit_code, 0) << after.output;
  EXPECT_TRUE(server->process().running());
  std::printf(
      "FAULT_ROW {\"fault\":\"plain-HTTP client on the TLS port (curl http://)\",\"sent\":%d,"
      "\"succeeded\":0,\"retried\":0,\"failed_clean\":%d,\"lost\":%d}\n",
      sent, failed_clean, sent - failed_clean);
}

TEST_F(TlsE2eTest, HttpsWorkerIsVerifiedAgainstTheUpstreamCa) {
  auto engine = start_engine("tls-worker-engine");
  ASSERT_TRUE(engine->ready());
  // The https:// worker: a TLS server in front of the mock engine.
  auto worker = start_server("tls-worker", concat({"--worker", engine->worker_flag()}, tls_flags()));
  ASSERT_TRUE(worker->ready());
  auto front = start_server("tls-front", {"--worker", worker->url(), "--upstream-ca-file",
                                          ca_.ca_file(), "--retries", "0"});
  ASSERT_TRUE(front->ready());
  const Reply ok = post(front->port(), "/v1/completions", completion_body());
  EXPECT_EQ(ok.status, 200) << ok.body << "\n" << front->log();
  EXPECT_NE(ok.body.find("\"choices\""), std::string::npos) << ok.body;

  auto wrong = start_server("tls-front-wrong-ca", {"--worker", worker->url(), "--upstream-ca-file",
                                                   ca_.other_ca_file(), "--retries", "0"});
  ASSERT_TRUE(wrong->ready());
  int sent = 0;
  int failed_clean = 0;
  for (int i = 0; i < 3; ++i) {
    ++sent;
    const Reply refused = post(wrong->port(), "/v1/completions", completion_body());
    const bool openai_error = refused.status >= 400 && refused.complete &&
                              find(parse_json(refused.body), "error/message") != nullptr;
    if (openai_error) ++failed_clean;
    EXPECT_TRUE(openai_error) << refused.status << " " << refused.body;
  }
  EXPECT_TRUE(eventually([&] {
    return wrong->log().find("TLS: certificate verify failed") != std::string::npos;
  }, Ms(10'000))) << wrong->log();
  std::printf(
      "FAULT_ROW {\"fault\":\"https:// worker whose certificate the router does not trust\","
      "\"sent\":%d,\"succeeded\":0,\"retried\":0,\"failed_clean\":%d,\"lost\":%d}\n",
      sent, failed_clean, sent - failed_clean);
}

TEST_F(TlsE2eTest, BadTlsFlagsEndStartupWithOneLineNamingThem) {
  const auto startup = [&](const std::string& name, std::vector<std::string> flags) {
    std::vector<std::string> argv = {kBinary, "server", "--host", "127.0.0.1", "--port", "0",
                                     "--worker", "http://127.0.0.1:1"};
    argv = infera::testing::with_dev_transports(concat(std::move(argv), flags));
    const std::string log = ca_.path(name + ".log");
    const Result<int> code = run_process(argv, Ms(30'000), log);
    EXPECT_TRUE(code.ok() && *code != 0) << name;
    return read_text(log);
  };
  const std::string alone = startup("cert-alone", {"--ssl-certfile", ca_.cert_file()});
  EXPECT_NE(alone.find("--ssl-certfile and --ssl-keyfile go together"), std::string::npos) << alone;
  const std::string missing =
      startup("missing", {"--ssl-certfile", ca_.path("nope.pem"), "--ssl-keyfile", ca_.key_file()});
  EXPECT_NE(missing.find(ca_.path("nope.pem")), std::string::npos) << missing;
  const std::string not_pem =
      startup("not-pem", {"--ssl-certfile", ca_.path("server.ext"), "--ssl-keyfile", ca_.key_file()});
  EXPECT_NE(not_pem.find(ca_.path("server.ext")), std::string::npos) << not_pem;
  const std::string bad_ca = startup("bad-ca", {"--upstream-ca-file", ca_.key_file()});
  EXPECT_NE(bad_ca.find(ca_.key_file()), std::string::npos) << bad_ca;
}

}  // namespace
}  // namespace infera::e2e
