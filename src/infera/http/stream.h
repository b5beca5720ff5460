// Internal to the http module (server.cc, client.cc, io.h): one connection's byte stream, plain
// TCP or TLS over it. The socket is always the Stream's own (the deadline closes it, the server
// peeks it, the pool checks it), and TLS, when started, is an OpenSSL layer that reads and writes
// through it. Reads go through async_read_some (Beast's parsers take a Stream as they take a
// socket), writes through io::write (io.h); the plain path is one branch on a null pointer. Includes Asio's SSL: never include it
// from a header of another module. One thread: the connection's.
#pragma once

#include <memory>
#include <utility>

#include "infera/http/net.h"
#include "infera/http/tls.h"

namespace infera::http {

class Stream {
 public:
  using executor_type = tcp::socket::executor_type;
  using TlsLayer = net::ssl::stream<tcp::socket&>;

  explicit Stream(tcp::socket socket) : socket_(std::move(socket)) {}
  explicit Stream(const net::any_io_executor& executor) : socket_(executor) {}
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  tcp::socket& socket() { return socket_; }
  executor_type get_executor() { return socket_.get_executor(); }
  bool is_tls() const { return tls_ != nullptr; }
  // The TLS layer (only when is_tls()): its handshake, and whole writes through it.
  TlsLayer& tls() { return *tls_; }

  // Puts TLS over the socket, before any I/O on it; `context` outlives the stream.
  TlsLayer& start_tls(net::ssl::context& context) {
    tls_ = std::make_unique<TlsLayer>(socket_, context);
    return *tls_;
  }

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    if (tls_) return tls_->async_read_some(buffers, std::forward<Token>(token));
    return socket_.async_read_some(buffers, std::forward<Token>(token));
  }

  // TLS only: sends close_notify now if the session is established and has not sent it, as far
  // as the socket takes it without waiting (the socket is non-blocking; nothing is awaited, so
  // no deadline is needed). The peer then tells a complete body ending with the connection from
  // a cut one. Only while no TLS operation is pending on the stream.
  void send_close_notify();

  // Closes the socket (shutdown both ways first); pending operations end with
  // operation_aborted. Idempotent.
  void close() {
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

 private:
  tcp::socket socket_;
  std::unique_ptr<TlsLayer> tls_;  // null: plain TCP
};

}  // namespace infera::http
