// Internal to the http module (server.cc, client.cc): writes that go out at once when the socket
// takes them. Includes Beast: never include it from a header of another module.
#pragma once

#include <boost/beast/core/buffers_suffix.hpp>

#include "infera/common/check.h"
#include "infera/http/net.h"

namespace infera::http::io {

// Writes `buffers` (a buffer sequence that outlives the call) to `stream`: first as one
// non-blocking send, then, for whatever the socket did not take, as an async write bounded by
// the stream's timer (armed by the caller). The socket must be in non-blocking mode
// (`socket().non_blocking(true)`, set where the server accepts and the client connects).
//
// Why not async_write alone: almost every write of a proxied exchange fits the socket's send
// buffer, and Asio's async write then still completes through the event loop (a posted
// completion, one more zero-timeout epoll_wait) and Beast's stream arms and cancels its timer
// (a timer-queue insert and a posted cancellation). Measured in docs/benchmarks.md ("Writes that
// go out at once").
template <typename Buffers>
net::awaitable<beast::error_code> write(beast::tcp_stream& stream, const Buffers& buffers) {
  INFERA_CHECK(stream.socket().non_blocking());
  beast::error_code ec;
  const size_t total = net::buffer_size(buffers);
  const size_t sent = total == 0 ? 0 : stream.socket().write_some(buffers, ec);
  if (!ec && sent == total) co_return ec;
  if (ec && ec != net::error::would_block && ec != net::error::try_again) co_return ec;
  beast::buffers_suffix<Buffers> rest(buffers);
  rest.consume(ec ? 0 : sent);
  auto [wec, n] = co_await net::async_write(stream, rest, use_nothrow);
  co_return wec;
}

}  // namespace infera::http::io
