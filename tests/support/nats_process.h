// A real NATS server (Debian nats-server) for tests: started on a free loopback port from a
// config file the test shapes (max_payload, a user and password or a token, TLS), ready when
// its port answers, stopped, killed or restarted on the same port on demand. Header-only; one
// owner thread.
#pragma once

#include <unistd.h>

#include <csignal>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "infera/common/status.h"
#include "infera/common/subprocess.h"
#include "tests/support/etcd_process.h"  // free_port, port_open, eventually

namespace infera::testing {

struct NatsServerOptions {
  size_t max_payload = 0;  // 0: the server's default (1 MiB)
  std::string user, password, token;
  std::string tls_cert_file, tls_key_file;  // both: TLS required
  size_t max_pending = 0;   // bytes buffered for a slow client before it is cut (0: default)
};

class NatsProcess {
 public:
  NatsProcess() = default;
  NatsProcess(NatsProcess&&) = default;
  NatsProcess& operator=(NatsProcess&&) = default;
  ~NatsProcess() {
    process_.stop(std::chrono::milliseconds(2000));
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  static Result<NatsProcess> start(NatsServerOptions options = {}) {
    NatsProcess n;
    n.options_ = std::move(options);
    n.dir_ = std::filesystem::temp_directory_path() /
             ("infera_nats_" + std::to_string(::getpid()) + "_" + std::to_string(free_port()));
    std::filesystem::create_directories(n.dir_);
    for (int attempt = 0; attempt < 5; ++attempt) {
      n.port_ = free_port();
      if (n.launch().ok()) return n;
    }
    return unavailable("could not start nats-server (is Debian's nats-server installed?)");
  }

  uint16_t port() const { return port_; }
  // nats://[credentials@]127.0.0.1:PORT
  std::string url(bool with_credentials = true) const {
    std::string cred;
    if (with_credentials && !options_.user.empty()) cred = options_.user + ":" + options_.password + "@";
    if (with_credentials && !options_.token.empty()) cred = options_.token + "@";
    return "nats://" + cred + "127.0.0.1:" + std::to_string(port_);
  }
  std::string log() const {
    std::ifstream in(dir_ / "nats.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  void stop() { process_.stop(std::chrono::milliseconds(5000)); }
  void kill() {
    process_.signal(SIGKILL);
    process_.wait_for(std::chrono::seconds(5));
  }
  Status restart() {
    stop();
    return launch();
  }
  bool running() { return process_.running(); }

 private:
  Status launch() {
    const std::filesystem::path conf = dir_ / "nats.conf";
    {
      std::ofstream out(conf);
      out << "listen: 127.0.0.1:" << port_ << "\n";
      if (options_.max_payload) out << "max_payload: " << options_.max_payload << "\n";
      if (options_.max_pending) out << "max_pending: " << options_.max_pending << "\n";
      if (!options_.user.empty()) {
        out << "authorization { user: \"" << options_.user << "\", password: \""
            << options_.password << "\" }\n";
      }
      if (!options_.token.empty()) out << "authorization { token: \"" << options_.token << "\" }\n";
      if (!options_.tls_cert_file.empty()) {
        out << "tls { cert_file: \"" << options_.tls_cert_file << "\", key_file: \""
            << options_.tls_key_file << "\" }\n";
      }
    }
    SpawnOptions o;
    o.stdout_path = (dir_ / "nats.log").string();
    o.stderr_path = "stdout";
    auto p = Subprocess::spawn({"nats-server", "-c", conf.string()}, o);
    if (!p.ok()) return p.status();
    process_ = std::move(*p);
    const uint16_t port = port_;
    if (!eventually([&] { return port_open(port) || !process_.running(); },
                    std::chrono::seconds(20)) ||
        !process_.running()) {
      process_.stop(std::chrono::milliseconds(1000));
      return unavailable("nats-server did not come up");
    }
    return ok_status();
  }

  NatsServerOptions options_;
  std::filesystem::path dir_;
  uint16_t port_ = 0;
  Subprocess process_;
};

}  // namespace infera::testing
