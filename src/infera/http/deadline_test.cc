// http::Deadline on a real loopback socket pair, one io_context run by the test thread: a wait
// that outlasts the deadline ends as a timeout; a deadline moved later or disarmed does not cut
// a wait at the instant it was first armed for; one moved earlier cuts it then. The peer's
// write is scheduled by a timer on the same loop (no sleeps).
#include "infera/http/deadline.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <optional>
#include <string>

namespace infera::http {
namespace {

using Ms = std::chrono::milliseconds;

struct Pair {
  explicit Pair(net::io_context& ctx) : ours(ctx), peer(ctx) {
    tcp::acceptor acceptor(ctx, tcp::endpoint(net::ip::address_v4::loopback(), 0));
    ours.connect(acceptor.local_endpoint());
    acceptor.accept(peer);
  }
  tcp::socket ours;
  tcp::socket peer;
};

struct Outcome {
  beast::error_code ec;
  std::string got;
  bool expired = false;
};

// Runs `setup` (arming the deadline), then one read on `ours`; the peer writes "x" after
// `peer_writes_after` (never when nullopt). Returns how the read ended.
template <typename Setup>
Outcome read_with(Setup setup, std::optional<Ms> peer_writes_after) {
  net::io_context ctx(1);
  Pair pair(ctx);
  Deadline deadline(ctx.get_executor(), pair.ours);
  Outcome out;
  net::steady_timer writer(ctx);
  if (peer_writes_after) {
    writer.expires_after(*peer_writes_after);
    writer.async_wait([&](beast::error_code ec) {
      if (!ec) net::write(pair.peer, net::buffer(std::string_view("x")));
    });
  }
  net::co_spawn(
      ctx,
      [&]() -> net::awaitable<void> {
        setup(deadline);
        std::array<char, 8> buf{};
        auto [ec, n] = co_await pair.ours.async_read_some(net::buffer(buf), use_nothrow);
        out.ec = deadline.disarm(ec);
        out.got.assign(buf.data(), n);
        out.expired = deadline.expired();
        deadline.stop();
        writer.cancel();
      },
      net::detached);
  ctx.run_for(std::chrono::seconds(20));
  return out;
}

TEST(DeadlineTest, AWaitThatOutlastsTheDeadlineEndsAsATimeout) {
  const auto start = Deadline::Clock::now();
  const Outcome out = read_with([](Deadline& d) { d.arm(Ms(100)); }, std::nullopt);
  EXPECT_EQ(out.ec, beast::error_code(beast::error::timeout)) << out.ec.message();
  EXPECT_TRUE(out.expired);
  EXPECT_LT(Deadline::Clock::now() - start, std::chrono::seconds(10));
}

TEST(DeadlineTest, ADeadlineMovedLaterDoesNotCutTheWaitAtTheFirstOne) {
  // The timer still waits for the first instant (100 ms) when the deadline moves to 10 s: it
  // must wait again instead of closing the socket. The peer writes at 300 ms.
  const Outcome out = read_with(
      [](Deadline& d) {
        d.arm(Ms(100));
        d.arm(Ms(10'000));
      },
      Ms(300));
  EXPECT_FALSE(out.ec) << out.ec.message();
  EXPECT_EQ(out.got, "x");
  EXPECT_FALSE(out.expired);
}

TEST(DeadlineTest, ADisarmedDeadlineCutsNothing) {
  const Outcome out = read_with(
      [](Deadline& d) {
        d.arm(Ms(100));
        (void)d.disarm({});
      },
      Ms(300));
  EXPECT_FALSE(out.ec) << out.ec.message();
  EXPECT_EQ(out.got, "x");
}

TEST(DeadlineTest, ADeadlineMovedEarlierCutsTheWaitThen) {
  const auto start = Deadline::Clock::now();
  const Outcome out = read_with(
      [](Deadline& d) {
        d.arm(Ms(60'000));
        d.arm(Ms(100));
      },
      std::nullopt);
  EXPECT_EQ(out.ec, beast::error_code(beast::error::timeout)) << out.ec.message();
  EXPECT_LT(Deadline::Clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace infera::http
