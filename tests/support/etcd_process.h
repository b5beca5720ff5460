// A real etcd (Debian etcd-server) for tests: started on free loopback ports with a temporary
// data directory, ready when its client port answers, stopped (or killed, or restarted on the
// same ports and data) on demand. Header-only; one owner thread.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "infera/common/status.h"
#include "infera/common/subprocess.h"

namespace infera::testing {

// A port the kernel reports free right now (bind to 0, read it back, close).
inline uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Whether something accepts TCP connections on 127.0.0.1:port.
inline bool port_open(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// Polls `condition` until it holds or `timeout` passes. For waiting on another process, which
// gives no other signal; never for ordering threads of our own.
template <typename Fn>
bool eventually(Fn&& condition, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(2);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  return true;
}

class EtcdProcess {
 public:
  EtcdProcess() = default;
  EtcdProcess(EtcdProcess&&) = default;
  EtcdProcess& operator=(EtcdProcess&&) = default;
  ~EtcdProcess() {
    process_.stop(std::chrono::milliseconds(2000));
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  static Result<EtcdProcess> start() {
    EtcdProcess e;
    e.dir_ = std::filesystem::temp_directory_path() /
             ("infera_etcd_" + std::to_string(::getpid()) + "_" + std::to_string(free_port()));
    std::filesystem::create_directories(e.dir_);
    for (int attempt = 0; attempt < 5; ++attempt) {
      e.client_port_ = free_port();
      e.peer_port_ = free_port();
      if (e.client_port_ == e.peer_port_) continue;
      Status s = e.launch();
      if (s.ok()) return e;
    }
    return unavailable("could not start etcd");
  }

  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }
  uint16_t port() const { return client_port_; }

  void stop() { process_.stop(std::chrono::milliseconds(5000)); }
  void kill() { process_.signal(SIGKILL); process_.wait_for(std::chrono::seconds(5)); }
  Status restart() {
    stop();
    return launch();
  }

 private:
  Status launch() {
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    SpawnOptions o;
    o.stdout_path = (dir_ / "etcd.log").string();
    o.stderr_path = "stdout";
    auto p = Subprocess::spawn({"etcd", "--name", "infera-test", "--data-dir", (dir_ / "data").string(),
                                "--listen-client-urls", client, "--advertise-client-urls", client,
                                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                "--initial-cluster", "infera-test=" + peer,
                                "--log-level", "error"},
                               o);
    if (!p.ok()) return p.status();
    process_ = std::move(*p);
    const uint16_t port = client_port_;
    if (!eventually([&] { return port_open(port) || !process_.running(); },
                    std::chrono::seconds(20)) ||
        !process_.running()) {
      process_.stop(std::chrono::milliseconds(1000));
      return unavailable("etcd did not come up");
    }
    return ok_status();
  }

  std::filesystem::path dir_;
  uint16_t client_port_ = 0;
  uint16_t peer_port_ = 0;
  Subprocess process_;
};

}  // namespace infera::testing
