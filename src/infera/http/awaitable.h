// The coroutine type of the project's asynchronous APIs and nothing more of Asio: headers that
// other modules include (server.h, client.h) need only `net::awaitable<T>`, which keeps their
// compile cost low. Code that does I/O includes net.h instead (the full Asio + Beast include).
//
// GCC 12 coroutine pitfalls, both inside the operand of a co_await (build the value in a named
// variable first): an aggregate temporary with a non-trivial member, e.g.
// `co_await f(Error{status, origin})`, is destroyed twice (a double free); a braced list such as
// `co_await out.write_head(200, {{"Content-Type", "x"}})` does not compile ("array used as
// initializer"). Calls with function results (`co_await out.write(sse_event(json))`) are fine.
#pragma once

// clang-format off
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange (Boost 1.74 bug)
#include <boost/asio/awaitable.hpp>
// clang-format on

namespace infera {
namespace net = boost::asio;
}  // namespace infera
