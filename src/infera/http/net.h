// The one Asio + Beast include of the project. Aliases, in namespace infera: `net` (Boost.Asio),
// `beast`, `bhttp` (Beast's HTTP; plain `http` is this module, infera::http), `tcp`; the
// completion token `use_nothrow` (co_await yields an error_code tuple instead of throwing, the
// project's rule for expected I/O outcomes); and the awaitable operators `||` / `&&` (timeouts,
// races). Asio and Beast are compiled once, in net_impl.cc (BOOST_ASIO_SEPARATE_COMPILATION):
// a target that includes this header links infera_http. Keep it out of other modules' headers.
#pragma once

// clang-format off
#include <utility>  // first: Boost.Asio's awaitable.hpp uses std::exchange without it
// clang-format on

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include "infera/http/awaitable.h"

namespace infera {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = boost::asio::ip::tcp;

// `auto [ec, n] = co_await sock.async_read_some(buf, use_nothrow);`
inline constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

// `co_await net::co_spawn(other_strand, op(), use_awaitable_uncancelled())`: the caller's
// cancellation does not follow the call to the other executor. Boost 1.81's co_spawn forwards it
// through a handler that is freed when the call ends as the signal comes (ASan,
// heap-use-after-free in cancellation_signal::emit, 2026-12-01); callers that must stop such a
// call post the stop themselves (mock/kv_transfer.cc).
inline auto use_awaitable_uncancelled() {
  return net::bind_cancellation_slot(net::cancellation_slot(), net::use_awaitable);
}

// `co_await (op() || timer.async_wait(net::use_awaitable))`: the first to finish wins and the
// other is cancelled (and awaited).
using boost::asio::experimental::awaitable_operators::operator||;
using boost::asio::experimental::awaitable_operators::operator&&;

// Waits `d` on the current executor; false when cancelled first (a backoff a stop() ends).
inline net::awaitable<bool> pause_for(std::chrono::milliseconds d) {
  net::steady_timer timer(co_await net::this_coro::executor);
  timer.expires_after(d);
  auto [ec] = co_await timer.async_wait(use_nothrow);
  co_return !ec;
}

}  // namespace infera
