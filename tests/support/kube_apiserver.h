// The Kubernetes API stand-in (tests/support/k8s/apiserver.py, held honest by kubectl and
// python3-kubernetes in k8s_standin_fidelity_test) for C++ tests: started on a free port with a
// temporary directory (test CA, token, kubeconfig files), stopped, killed and restarted on the
// same port and state; pods created, patched and deleted through `kubectl` and `curl` as a user
// or a kubelet would; the stand-in's control endpoints for faults. Header-only; one owner thread.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "infera/common/status.h"
#include "infera/common/subprocess.h"
#include "tests/support/etcd_process.h"  // free_port, port_open, eventually

namespace infera::testing {

class KubeApiServer {
 public:
  KubeApiServer() = default;
  KubeApiServer(KubeApiServer&&) = default;
  ~KubeApiServer() {
    process_.stop(std::chrono::milliseconds(2000));
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  static Result<KubeApiServer> start(double bookmark_interval_s = 0.5) {
    KubeApiServer s;
    s.dir_ = std::filesystem::temp_directory_path() /
             ("infera_k8s_" + std::to_string(::getpid()) + "_" + std::to_string(free_port()));
    std::filesystem::create_directories(s.dir_);
    s.bookmark_interval_s_ = bookmark_interval_s;
    INFERA_RETURN_IF_ERROR(s.launch(0));
    return s;
  }

  uint16_t port() const { return port_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::string kubeconfig(const std::string& variant = "kubeconfig") const {
    return (dir_ / variant).string();
  }
  std::string url(const std::string& path) const {
    return "https://127.0.0.1:" + std::to_string(port_) + path;
  }
  bool running() { return process_.running(); }

  void kill() { process_.stop(std::chrono::milliseconds(2000)); }
  // Again on the same port, CA and objects (the state file).
  Status restart() {
    kill();
    return launch(port_);
  }

  // kubectl against the stand-in; its exit code, output in `out`. By client certificate, so
  // that it keeps working while a test rotates the bearer tokens.
  int kubectl(std::vector<std::string> args, std::string* out = nullptr,
              const std::string& variant = "kubeconfig-cert") const {
    std::vector<std::string> argv = {"kubectl", "--kubeconfig", kubeconfig(variant)};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, out);
  }
  // An authenticated request with curl (as a kubelet updates a pod's status); the HTTP code.
  int request(const std::string& method, const std::string& path, const std::string& body = {},
              const std::string& content_type = "application/merge-patch+json",
              std::string* out = nullptr) const {
    std::vector<std::string> argv = {"curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "20",
                                     "--cacert", (dir_ / "ca.crt").string(), "-X", method,
                                     "-H", "Authorization: Bearer " + token(), url(path)};
    if (!body.empty()) {
      argv.insert(argv.end(), {"-H", "Content-Type: " + content_type, "--data-binary", body});
    }
    std::string text;
    if (run(argv, &text) != 0) return 0;
    const auto nl = text.rfind('\n');
    if (out) *out = text.substr(0, nl);
    return std::atoi(text.c_str() + nl + 1);
  }
  // A control endpoint of the stand-in (/_standin/...); true when it answered 2xx.
  bool control(const std::string& what, const std::string& body = "{}") const {
    return request("POST", "/_standin/" + what, body, "application/json") / 100 == 2;
  }
  std::string token() const {
    std::ifstream in(dir_ / "token");
    std::string t;
    std::getline(in, t);
    return t;
  }

  // The kubelet's part: a pod becomes Ready (or not) at `ip`.
  int set_ready(const std::string& name, bool ready, const std::string& ip = "127.0.0.1",
                const std::string& ns = "default") const {
    const std::string status = ready ? "True" : "False";
    return request("PATCH", "/api/v1/namespaces/" + ns + "/pods/" + name + "/status",
                   R"({"status":{"phase":"Running","podIP":")" + ip +
                       R"(","conditions":[{"type":"Ready","status":")" + status + R"("}]}})");
  }

 private:
  Status launch(uint16_t port) {
    std::filesystem::remove(dir_ / "port");
    SpawnOptions so;
    so.stdout_path = (dir_ / "apiserver.log").string();
    so.stderr_path = "stdout";
    INFERA_ASSIGN_OR_RETURN(
        process_,
        Subprocess::spawn({"/usr/bin/python3", std::string(INFERA_SOURCE_DIR) + "/tests/support/k8s/apiserver.py",
                           "--dir", dir_.string(), "--port", std::to_string(port),
                           "--bookmark-interval-s", std::to_string(bookmark_interval_s_),
                           "--state-file", (dir_ / "state.json").string(), "--max-grace-s", "0.5"},
                          so));
    const bool up = eventually([&] {
      std::ifstream in(dir_ / "port");
      unsigned p = 0;
      if (!(in >> p) || p == 0) return !process_.running();
      port_ = static_cast<uint16_t>(p);
      return port_open(port_);
    });
    if (!up || !process_.running()) {
      std::ifstream log(dir_ / "apiserver.log");
      std::stringstream ss;
      ss << log.rdbuf();
      return unavailable("the Kubernetes API stand-in did not start: " + ss.str());
    }
    return ok_status();
  }

  static int run(const std::vector<std::string>& argv, std::string* out) {
    const std::string log = std::filesystem::temp_directory_path() /
                            ("infera_k8s_cmd_" + std::to_string(::getpid()) + ".log");
    auto code = run_process(argv, std::chrono::seconds(30), log);
    if (out) {
      std::ifstream in(log);
      std::stringstream ss;
      ss << in.rdbuf();
      *out = ss.str();
    }
    std::filesystem::remove(log);
    return code.ok() ? *code : -1;
  }

  std::filesystem::path dir_;
  double bookmark_interval_s_ = 0.5;
  uint16_t port_ = 0;
  Subprocess process_;
};

}  // namespace infera::testing
