// Test-only helpers for the http module's socket tests: a blocking loopback TCP connection with
// deadlines on every wait (POSIX sockets + poll), independent of the client under test, a
// minimal HTTP/1.1 response reader, and wait_until() for conditions owned by other threads.
// Each object belongs to one test thread.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <thread>

namespace infera::http::testing {

using Ms = std::chrono::milliseconds;
using TestClock = std::chrono::steady_clock;

// Polls `cond` until it holds or `deadline` passes; returns its last value.
inline bool wait_until(const std::function<bool()>& cond, Ms deadline = Ms(5000)) {
  const auto end = TestClock::now() + deadline;
  while (!cond()) {
    if (TestClock::now() >= end) return cond();
    std::this_thread::sleep_for(Ms(2));
  }
  return true;
}

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool chunked = false;
  bool complete = false;  // the whole message arrived
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class RawConn {
 public:
  RawConn() = default;
  // Connects to 127.0.0.1:port; rcvbuf > 0 sets SO_RCVBUF first (a slow reader's window).
  explicit RawConn(uint16_t port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  RawConn(RawConn&& o) noexcept : fd_(o.fd_), pending_(std::move(o.pending_)) { o.fd_ = -1; }
  ~RawConn() { close(); }

  bool ok() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Sends a FIN (the server reads EOF) and keeps reading.
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // Closes with a TCP reset instead of a FIN.
  void reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close();
  }

  bool send_all(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads what is available within `deadline` (at least one byte unless EOF/timeout) into the
  // pending buffer. Returns bytes read, 0 on EOF, -1 on timeout or error.
  long read_some(Ms deadline, size_t max = 64 * 1024) {
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(deadline.count()));
    if (r <= 0) return -1;
    std::string buf(max, '\0');
    const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n < 0) return errno == ECONNRESET ? 0 : -1;
    pending_.append(buf.data(), static_cast<size_t>(n));
    return n;
  }

  // True once the peer closed the connection (EOF or reset) within `deadline`; bytes that
  // arrive meanwhile are kept in pending().
  bool wait_eof(Ms deadline) {
    const auto end = TestClock::now() + deadline;
    for (;;) {
      const auto left = std::chrono::duration_cast<Ms>(end - TestClock::now());
      if (left.count() <= 0) return false;
      const long n = read_some(left);
      if (n == 0) return true;
      if (n < 0 && TestClock::now() >= end) return false;
    }
  }

  // Reads until pending() contains `needle`; false on EOF or deadline.
  bool read_until(std::string_view needle, Ms deadline = Ms(5000)) {
    const auto end = TestClock::now() + deadline;
    while (pending_.find(needle) == std::string::npos) {
      const auto left = std::chrono::duration_cast<Ms>(end - TestClock::now());
      if (left.count() <= 0) return false;
      if (read_some(left) <= 0) return false;
    }
    return true;
  }

  // Reads one whole response (Content-Length, chunked, or until EOF). `complete` is false when
  // the deadline passed or the connection ended early.
  RawResponse read_response(Ms deadline = Ms(5000)) {
    RawResponse r;
    const auto end = TestClock::now() + deadline;
    auto more = [&]() {
      const auto left = std::chrono::duration_cast<Ms>(end - TestClock::now());
      return left.count() > 0 && read_some(left) > 0;
    };
    size_t head_end;
    while ((head_end = pending_.find("\r\n\r\n")) == std::string::npos) {
      if (!more()) return r;
    }
    const std::string head = pending_.substr(0, head_end);
    pending_.erase(0, head_end + 4);
    r.status = std::atoi(head.substr(9, 3).c_str());
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos && pos < head.size()) {
      const size_t next = head.find("\r\n", pos + 2);
      const std::string line =
          head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        r.headers[name] = value;
      }
      pos = next;
    }
    if (r.status == 100 || r.status == 204 || r.status == 304) {
      r.complete = true;
      return r;
    }
    if (r.header("transfer-encoding") == "chunked") {
      r.chunked = true;
      for (;;) {
        size_t line_end;
        while ((line_end = pending_.find("\r\n")) == std::string::npos) {
          if (!more()) return r;
        }
        const size_t size = std::strtoul(pending_.substr(0, line_end).c_str(), nullptr, 16);
        while (pending_.size() < line_end + 2 + size + 2) {
          if (!more()) return r;
        }
        r.body.append(pending_, line_end + 2, size);
        pending_.erase(0, line_end + 2 + size + 2);
        if (size == 0) {
          r.complete = true;
          return r;
        }
      }
    }
    if (!r.header("content-length").empty()) {
      const size_t len = std::strtoul(r.header("content-length").c_str(), nullptr, 10);
      while (pending_.size() < len) {
        if (!more()) return r;
      }
      r.body = pending_.substr(0, len);
      pending_.erase(0, len);
      r.complete = true;
      return r;
    }
    while (more()) {
    }
    r.body = std::move(pending_);
    pending_.clear();
    r.complete = true;
    return r;
  }

  std::string& pending() { return pending_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::string pending_;
};

// A listening socket on 127.0.0.1 that never accepts: connects succeed (the kernel completes
// the handshake) and requests are never answered.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  uint16_t port() const { return port_; }
  int fd() const { return fd_; }
  // Accepts one pending connection (blocking up to `deadline`); -1 if none.
  int accept_one(Ms deadline = Ms(5000)) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(deadline.count())) <= 0) return -1;
    return ::accept(fd_, nullptr, nullptr);
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// A port on 127.0.0.1 with nothing listening (bound, then closed): connects are refused.
inline uint16_t closed_port() {
  SilentListener l;
  return l.port();
}

}  // namespace infera::http::testing
