// Internal to the http module (server.cc, client.cc): writes that go out at once when the socket
// takes them. Includes Beast: never include it from a header of another module.
#pragma once

#include <string>

#include <boost/beast/core/buffers_suffix.hpp>

#include "infera/http/deadline.h"
#include "infera/http/net.h"
#include "infera/http/stream.h"

namespace infera::http::io {

// The TLS half of write(): always the async write, under the deadline. Small buffer sequences
// are copied into one buffer first: Asio's TLS write encrypts one buffer of a sequence per
// record, so a chunk's size line, bytes and CRLF would be three records and three sends.
template <typename Buffers>
net::awaitable<beast::error_code> write_tls(Stream& stream, Deadline& deadline,
                                            const Buffers& buffers, std::chrono::milliseconds limit,
                                            Deadline::Clock::time_point cap) {
  constexpr size_t kCoalesceBytes = size_t{16} * 1024;  // a TLS record's plaintext, at most
  const size_t total = net::buffer_size(buffers);
  deadline.arm(limit, cap);
  if (total > kCoalesceBytes) {
    auto [wec, n] = co_await net::async_write(stream.tls(), buffers, use_nothrow);
    co_return deadline.disarm(wec);
  }
  std::string flat(total, '\0');
  net::buffer_copy(net::buffer(flat), buffers);
  auto [wec, n] = co_await net::async_write(stream.tls(), net::buffer(flat), use_nothrow);
  co_return deadline.disarm(wec);
}

// Writes `buffers` (a buffer sequence that outlives the call) to `stream`: over plain TCP, first
// as one non-blocking send, then, for whatever the socket did not take, as an async write that
// `deadline` bounds (armed only then, for `limit` but never past `cap`; a timeout comes back as
// beast::error::timeout). Over TLS: write_tls().
// The socket is put in non-blocking mode where the server accepts and the client connects; one
// that is not (or is no longer open) is handled here rather than trusted.
//
// Why not async_write alone: almost every write of a proxied exchange fits the socket's send
// buffer, and Asio's async write then still completes through the event loop (a posted
// completion: one more zero-timeout epoll_wait per write). Measured in docs/benchmarks.md
// ("Writes at once, reads from the buffer, lazy deadlines").
template <typename Buffers>
net::awaitable<beast::error_code> write(
    Stream& stream, Deadline& deadline, const Buffers& buffers, std::chrono::milliseconds limit,
    Deadline::Clock::time_point cap = Deadline::Clock::time_point::max()) {
  tcp::socket& socket = stream.socket();
  beast::error_code ec;
  // A socket its deadline closed (say, as the connect completed) is an error, not a crash.
  if (!socket.is_open()) co_return net::error::make_error_code(net::error::bad_descriptor);
  if (stream.is_tls()) co_return co_await write_tls(stream, deadline, buffers, limit, cap);
  if (!socket.non_blocking()) {
    socket.non_blocking(true, ec);
    if (ec) co_return ec;
  }
  const size_t total = net::buffer_size(buffers);
  const size_t sent = total == 0 ? 0 : socket.write_some(buffers, ec);
  if (!ec && sent == total) co_return ec;
  if (ec && ec != net::error::would_block && ec != net::error::try_again) co_return ec;
  beast::buffers_suffix<Buffers> rest(buffers);
  rest.consume(ec ? 0 : sent);
  deadline.arm(limit, cap);
  auto [wec, n] = co_await net::async_write(socket, rest, use_nothrow);
  co_return deadline.disarm(wec);
}

}  // namespace infera::http::io
