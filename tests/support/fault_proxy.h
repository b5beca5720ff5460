// FaultProxy: a TCP forwarder for fault-injection tests. It listens on a free loopback port and
// relays each connection to a target port on 127.0.0.1, and lets a test switch faults on and
// off while traffic runs: a partition (no byte moves either way; connections stay open and new
// ones are accepted and wait, as with packets dropped on the wire), a hung peer (connections
// accepted and read, never answered), HTTP 500 answers, a delay before each answer, cutting
// every open connection, a new target (an engine restarted elsewhere), and dropping whole
// ZeroMQ messages coming from the target (ZMTP 3 framing, to make KV-event sequence gaps).
// Header-only. One thread of its own (poll with a 5 ms slice). The setters may be called from
// any thread; each returns once the proxy thread works with the new setting (at most one
// slice later), so every byte relayed after it returns follows it.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace infera::testing {

class FaultProxy {
 public:
  enum class Mode {
    kForward,    // relay both ways
    kPartition,  // move no byte on any connection, open or new, until the mode changes
    kHang,       // new connections are read and never answered (open ones are cut first)
    kHttp500,    // new connections get one HTTP 500 per request (open ones are cut first)
    // Leaving kHang or kHttp500 cuts the connections accepted in that mode.
  };
  enum class Protocol { kRaw, kZmtp };  // kZmtp: messages from the target can be dropped

  explicit FaultProxy(uint16_t target_port, Protocol protocol = Protocol::kRaw)
      : protocol_(protocol), target_port_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in addr = loopback(0);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listener_, 128);
    socklen_t len = sizeof(addr);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;
  ~FaultProxy() {
    stop_ = true;
    thread_.join();
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    applied_cv_.notify_all();
    for (Conn& c : conns_) close_conn(c, false);
    ::close(listener_);
  }

  uint16_t port() const { return port_; }

  void set_mode(Mode mode) {
    apply([&] {
      if (mode == Mode::kHang || mode == Mode::kHttp500) cut_before_ = generation_;
      // Leaving a failure mode, its connections go too (a recovered peer answers properly on
      // the connections it accepts from now on).
      if (mode != mode_ && (mode_ == Mode::kHang || mode_ == Mode::kHttp500)) {
        cut_faulty_before_ = generation_;
      }
      mode_ = mode;
    });
  }
  // Connections opened from now on go to `port`.
  void set_target(uint16_t port) {
    apply([&] { target_port_ = port; });
  }
  // Closes every open connection with a reset, on both sides.
  void cut() {
    apply([&] { cut_before_ = generation_; });
  }
  // Bytes from the target wait until `delay` after the last bytes the client sent: each
  // answer of a request/response exchange starts that late (a slow first byte), and a
  // stream's later pieces are not held.
  void set_answer_delay(std::chrono::milliseconds delay) {
    apply([&] { answer_delay_ = delay; });
  }
  // Drops the next `n` whole messages the target sends (kZmtp only).
  void drop_messages(uint64_t n) {
    apply([&] { drop_pending_ += n; });
  }
  uint64_t dropped_messages() const { return dropped_.load(); }

 private:
  using Clock = std::chrono::steady_clock;

  // Changes the settings under the lock as a new generation, then waits until the proxy
  // thread has begun a slice with them.
  template <typename Change>
  void apply(Change&& change) {
    std::unique_lock lock(mu_);
    ++generation_;
    change();
    const uint64_t wanted = generation_;
    applied_cv_.wait(lock, [&] { return applied_generation_ >= wanted || stopped_; });
  }

  enum class Kind { kForward, kHang, kHttp500 };
  static constexpr size_t kMaxBuffered = 1 << 20;

  struct Conn {
    Kind kind = Kind::kForward;
    uint64_t generation = 0;  // of the settings it was accepted under
    int client = -1;
    int upstream = -1;
    std::string to_upstream;
    std::string to_client;
    std::string request;        // kHttp500: the request read so far
    std::string from_upstream;  // kZmtp: bytes not yet parsed into whole frames
    size_t greeting_left = 64;  // kZmtp: the greeting passes through unparsed
    bool in_message = false;    // kZmtp: inside a multi-frame message
    bool dropping = false;      // kZmtp: the current message is being dropped
    bool upstream_eof = false;
    Clock::time_point answer_at{};
  };

  static sockaddr_in loopback(uint16_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    return addr;
  }

  static void close_fd(int& fd, bool reset) {
    if (fd < 0) return;
    if (reset) {
      linger l{1, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    ::close(fd);
    fd = -1;
  }
  static void close_conn(Conn& c, bool reset) {
    close_fd(c.client, reset);
    close_fd(c.upstream, reset);
  }

  // Reads what is there into `into`; false on EOF or error.
  static bool read_into(int fd, std::string& into) {
    char buf[64 * 1024];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      into.append(buf, static_cast<size_t>(n));
      return true;
    }
    return n < 0 && (errno == EAGAIN || errno == EINTR);
  }
  // Writes what the socket takes from the front of `from`; false on error.
  static bool write_from(int fd, std::string& from) {
    if (from.empty()) return true;
    const ssize_t n = ::send(fd, from.data(), from.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      from.erase(0, static_cast<size_t>(n));
      return true;
    }
    return n < 0 && (errno == EAGAIN || errno == EINTR);
  }

  // ZMTP 3 (rfc.zeromq.org/spec/23): a 64-byte greeting, then frames of a flags byte (0x01
  // more, 0x02 long size, 0x04 command), a 1- or 8-byte big-endian size and the body. Moves
  // whole frames from `from_upstream` to `to_client`, leaving out the frames of dropped
  // messages (a message starts at its first non-command frame and ends with one without
  // 'more'); commands always pass.
  void parse_zmtp(Conn& c) {
    std::string& in = c.from_upstream;
    size_t at = 0;
    if (c.greeting_left > 0) {
      const size_t n = std::min(c.greeting_left, in.size());
      c.to_client.append(in, 0, n);
      c.greeting_left -= n;
      at = n;
    }
    while (c.greeting_left == 0 && in.size() - at >= 2) {
      const uint8_t flags = static_cast<uint8_t>(in[at]);
      const bool long_size = (flags & 0x02) != 0;
      const size_t header = long_size ? 9 : 2;
      if (in.size() - at < header) break;
      uint64_t size = 0;
      if (long_size) {
        for (size_t i = 1; i < 9; ++i) size = (size << 8) | static_cast<uint8_t>(in[at + i]);
      } else {
        size = static_cast<uint8_t>(in[at + 1]);
      }
      if (in.size() - at - header < size) break;
      const size_t frame = header + static_cast<size_t>(size);
      const bool command = (flags & 0x04) != 0;
      if (!command && !c.in_message) {
        std::lock_guard lock(mu_);
        c.dropping = drop_pending_ > 0;
        if (c.dropping) --drop_pending_;
      }
      if (command || !c.dropping) c.to_client.append(in, at, frame);
      if (!command) {
        c.in_message = (flags & 0x01) != 0;
        if (!c.in_message && c.dropping) {
          c.dropping = false;
          ++dropped_;
        }
      }
      at += frame;
    }
    in.erase(0, at);
  }

  // kHttp500: answers once the request head and its Content-Length body are in.
  static void answer_500(Conn& c) {
    for (;;) {
      const size_t head_end = c.request.find("\r\n\r\n");
      if (head_end == std::string::npos) return;
      size_t length = 0;
      std::string head = c.request.substr(0, head_end);
      for (char& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (const size_t at = head.find("content-length:"); at != std::string::npos) {
        length = std::strtoul(head.c_str() + at + 15, nullptr, 10);
      }
      if (c.request.size() < head_end + 4 + length) return;
      c.request.erase(0, head_end + 4 + length);
      const std::string body =
          R"({"error":{"message":"injected fault","type":"server_error","param":null,"code":500}})";
      c.to_client +=
          "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
          "Content-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
    }
  }

  void accept_new(Mode mode, uint16_t target, uint64_t generation) {
    for (;;) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK);
      if (fd < 0) return;
      Conn c;
      c.generation = generation;
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      c.client = fd;
      c.kind = mode == Mode::kHang      ? Kind::kHang
               : mode == Mode::kHttp500 ? Kind::kHttp500
                                        : Kind::kForward;
      if (c.kind == Kind::kForward) {
        // Loopback connects complete or fail at once; a refused target is a reset client.
        c.upstream = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr = loopback(target);
        if (::connect(c.upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
          close_conn(c, true);
          continue;
        }
        ::setsockopt(c.upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      }
      conns_.push_back(std::move(c));
    }
  }

  void run() {
    while (!stop_) {
      Mode mode;
      uint16_t target;
      uint64_t generation;
      std::chrono::milliseconds delay;
      {
        std::lock_guard lock(mu_);
        mode = mode_;
        target = target_port_;
        generation = generation_;
        delay = answer_delay_;
        for (auto it = conns_.begin(); it != conns_.end();) {
          if (it->generation < cut_before_ ||
              (it->kind != Kind::kForward && it->generation < cut_faulty_before_)) {
            close_conn(*it, true);
            it = conns_.erase(it);
          } else {
            ++it;
          }
        }
        applied_generation_ = generation;
      }
      applied_cv_.notify_all();
      const bool frozen = mode == Mode::kPartition;
      const auto now = Clock::now();
      std::vector<pollfd> fds;
      fds.push_back({listener_, POLLIN, 0});
      // A connection with nothing to wait for is left out (fd -1), so a peer that closed
      // while frozen or held back does not make poll() spin on POLLHUP.
      for (Conn& c : conns_) {
        const bool frozen_conn = frozen && c.kind == Kind::kForward;
        short client_events = 0;
        short upstream_events = 0;
        if (!frozen_conn) {
          if (c.to_upstream.size() < kMaxBuffered) client_events |= POLLIN;
          if (!c.to_client.empty() && now >= c.answer_at) client_events |= POLLOUT;
          if (c.upstream >= 0 && !c.upstream_eof && c.to_client.size() < kMaxBuffered) {
            upstream_events |= POLLIN;
          }
          if (c.upstream >= 0 && !c.to_upstream.empty()) upstream_events |= POLLOUT;
        }
        fds.push_back({client_events ? c.client : -1, client_events, 0});
        fds.push_back({upstream_events ? c.upstream : -1, upstream_events, 0});
      }
      ::poll(fds.data(), fds.size(), 5);  // 5 ms: also the pace of answer delays
      if (fds[0].revents & POLLIN) accept_new(mode, target, generation);

      size_t i = 1;
      for (auto it = conns_.begin(); it != conns_.end(); i += 2) {
        Conn& c = *it;
        const short cr = i < fds.size() ? fds[i].revents : 0;
        const short ur = i + 1 < fds.size() ? fds[i + 1].revents : 0;
        bool alive = true;
        if (cr & (POLLIN | POLLHUP | POLLERR)) {
          std::string& sink = c.kind == Kind::kHttp500 ? c.request : c.to_upstream;
          const size_t before = sink.size();
          alive = read_into(c.client, sink);
          if (sink.size() > before) {
            c.answer_at = Clock::now() + delay;
            if (c.kind == Kind::kHang) sink.clear();
            if (c.kind == Kind::kHttp500) answer_500(c);
          }
        }
        if (alive && (ur & (POLLIN | POLLHUP | POLLERR))) {
          std::string& sink = protocol_ == Protocol::kZmtp ? c.from_upstream : c.to_client;
          if (!read_into(c.upstream, sink)) c.upstream_eof = true;
          if (protocol_ == Protocol::kZmtp) parse_zmtp(c);
        }
        if (alive && (ur & POLLOUT)) alive = write_from(c.upstream, c.to_upstream);
        if (alive && (cr & POLLOUT)) alive = write_from(c.client, c.to_client);
        // The target closed: pass on what it sent, then close the client's side too.
        if (alive && c.upstream_eof && c.to_client.empty()) alive = false;
        if (!alive) {
          close_conn(c, false);
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  int listener_ = -1;
  uint16_t port_ = 0;
  const Protocol protocol_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> dropped_{0};
  std::list<Conn> conns_;  // proxy thread only

  std::mutex mu_;  // guards the settings below
  Mode mode_ = Mode::kForward;
  uint16_t target_port_;
  std::chrono::milliseconds answer_delay_{0};
  uint64_t drop_pending_ = 0;
  std::condition_variable applied_cv_;
  uint64_t generation_ = 0;          // bumped by every setter
  uint64_t applied_generation_ = 0;  // the one the proxy thread works with
  bool stopped_ = false;
  uint64_t cut_before_ = 0;         // connections of older generations are cut
  uint64_t cut_faulty_before_ = 0;  // the same, for hung and 500 connections only
};

}  // namespace infera::testing
