#include "infera/discovery/kube_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "infera/common/base64.h"

namespace infera::discovery {
namespace {

namespace fs = std::filesystem;

class KubeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("infera-kubeconfig-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  fs::path dir_;
};

const char kTwoContexts[] = R"(apiVersion: v1
kind: Config
current-context: test
clusters:
- name: c1
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: )";

TEST_F(KubeConfigTest, CurrentContextSelectsClusterUserAndNamespace) {
  const std::string yaml = std::string(kTwoContexts) + base64_encode("CA PEM") + R"(
- name: c2
  cluster:
    server: http://other:8080
contexts:
- name: test
  context: {cluster: c1, user: u1, namespace: ml}
- name: other
  context: {cluster: c2, user: u2}
users:
- name: u1
  user: {token: abc}
- name: u2
  user: {tokenFile: tok}
)";
  const std::string path = write("config", yaml);
  write("tok", "rotated-token\n");
  auto c = load_kubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->scheme, "https");
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_EQ(c->port, 6443);
  EXPECT_EQ(c->ca_pem, "CA PEM");
  EXPECT_EQ(c->ns, "ml");
  EXPECT_EQ(*c->bearer_token(), "abc");

  auto other = load_kubeconfig(path, "other");
  ASSERT_TRUE(other.ok()) << other.status().message();
  EXPECT_EQ(other->scheme, "http");
  EXPECT_EQ(other->host, "other");
  EXPECT_EQ(other->port, 8080);
  EXPECT_EQ(other->token_file, (dir_ / "tok").string());  // relative to the kubeconfig
  EXPECT_EQ(*other->bearer_token(), "rotated-token");
  write("tok", "second\n");
  EXPECT_EQ(*other->bearer_token(), "second");  // re-read on every connection
}

TEST_F(KubeConfigTest, ClientCertificateFilesAndMissingPiecesAreNamed) {
  write("ca.crt", "CA");
  write("client.crt", "CERT");
  write("client.key", "KEY");
  const std::string ok = write("ok", R"(current-context: x
clusters: [{name: c, cluster: {server: "https://[::1]:443", certificate-authority: ca.crt}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
users: [{name: u, user: {client-certificate: client.crt, client-key: client.key}}]
)");
  auto c = load_kubeconfig(ok);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->ca_pem, "CA");
  EXPECT_EQ(c->client_cert_pem, "CERT");
  EXPECT_EQ(c->client_key_pem, "KEY");
  EXPECT_EQ(*c->bearer_token(), "");

  const std::map<std::string, std::string> bad = {
      {"no current-context", "clusters: []\n"},
      {"context 'x' not found", "current-context: x\ncontexts: []\n"},
      {"cluster 'c' not found", "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"},
      {"exec", "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h'}}]\n"
               "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
               "users: [{name: u, user: {exec: {command: aws}}}]\n"},
      {"not valid YAML", "current-context: [x\n"},
      {"scheme", "current-context: x\nclusters: [{name: c, cluster: {server: 'ftp://h'}}]\n"
                 "contexts: [{name: x, context: {cluster: c}}]\n"},
      {"without its key", "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h'}}]\n"
                          "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                          "users: [{name: u, user: {client-certificate-data: QQ==}}]\n"},
  };
  for (const auto& [expect, text] : bad) {
    auto r = load_kubeconfig(write("bad", text));
    ASSERT_FALSE(r.ok()) << expect;
    EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(load_kubeconfig((dir_ / "absent").string()).ok());
}

TEST_F(KubeConfigTest, InClusterReadsServiceAccountAndEnvironment) {
  write("token", "sa-token\n");
  write("ca.crt", "SA CA");
  write("namespace", "inference\n");
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"}};
  EnvLookup lookup = [&](std::string_view k) -> std::optional<std::string> {
    auto it = env.find(std::string(k));
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  auto c = load_in_cluster_config(lookup, dir_.string());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->host, "10.96.0.1");
  EXPECT_EQ(c->port, 443);
  EXPECT_EQ(c->ca_pem, "SA CA");
  EXPECT_EQ(c->ns, "inference");
  EXPECT_EQ(*c->bearer_token(), "sa-token");

  env.clear();
  auto outside = load_in_cluster_config(lookup, dir_.string());
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("--kubeconfig"), std::string::npos);
  // KUBECONFIG wins over in-cluster when no flag is given.
  env["KUBECONFIG"] = write("kc", "current-context: x\nclusters: [{name: c, cluster: {server: 'http://h:1'}}]\n"
                                  "contexts: [{name: x, context: {cluster: c}}]\n");
  auto via_env = load_kube_config("", lookup);
  ASSERT_TRUE(via_env.ok()) << via_env.status().message();
  EXPECT_EQ(via_env->host, "h");
}

}  // namespace
}  // namespace infera::discovery
