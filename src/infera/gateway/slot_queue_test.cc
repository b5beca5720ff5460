#include "infera/gateway/slot_queue.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <future>
#include <optional>
#include <vector>

#include "infera/gateway/fleet.h"
#include "infera/http/event_loop.h"

namespace infera::gateway {
namespace {

using namespace std::chrono_literals;
using Wake = SlotQueue::Wake;

// A waiter on its own strand: enters, reports that it is registered, then waits up to `timeout`.
struct Waiting {
  std::promise<void> entered;
  std::future<Wake> woke;
};

constexpr size_t kUnbounded = SIZE_MAX;

std::unique_ptr<Waiting> start_waiter(http::EventLoop& loop, SlotQueue& q,
                                      std::chrono::milliseconds timeout, SlotQueue::Fits fits = {}) {
  auto w = std::make_unique<Waiting>();
  std::promise<void>* entered = &w->entered;
  w->woke = net::co_spawn(
      net::make_strand(loop.context()),
      [&q, entered, timeout, fits = std::move(fits)]() -> net::awaitable<Wake> {
        SlotQueue::Ticket t = *co_await q.enter(kUnbounded, fits);
        entered->set_value();
        co_return co_await t.wait(timeout);
      },
      net::use_future);
  return w;
}

TEST(SlotQueueTest, WakesTheOldestWaiterFirstOnePerNotify) {
  http::EventLoop loop(2);
  SlotQueue q;
  std::vector<std::unique_ptr<Waiting>> ws;
  for (int i = 0; i < 3; ++i) {
    ws.push_back(start_waiter(loop, q, 30s));
    ws.back()->entered.get_future().wait();  // registered in this order
  }
  EXPECT_EQ(q.waiting(), 3u);
  q.notify_one();
  ASSERT_EQ(ws[0]->woke.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(ws[0]->woke.get(), Wake::kWoken);
  EXPECT_EQ(ws[1]->woke.wait_for(0s), std::future_status::timeout);  // one notify, one waiter
  q.notify_one();
  ASSERT_EQ(ws[1]->woke.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(ws[1]->woke.get(), Wake::kWoken);
  q.notify_one();
  ASSERT_EQ(ws[2]->woke.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(ws[2]->woke.get(), Wake::kWoken);
  // Tickets leave the queue with their coroutines.
  EXPECT_EQ(q.waiting(), 0u);
  q.notify_one();  // nobody waits: nothing happens
  loop.stop();
}

TEST(SlotQueueTest, ANotifyBetweenEnterAndWaitIsNotLost) {
  http::EventLoop loop(1);
  SlotQueue q;
  auto woke = net::co_spawn(
      loop.context(),
      [&]() -> net::awaitable<Wake> {
        SlotQueue::Ticket t = *co_await q.enter(kUnbounded);
        q.notify_one();  // a slot freed after registering, before waiting
        co_return co_await t.wait(30s);
      },
      net::use_future);
  ASSERT_EQ(woke.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(woke.get(), Wake::kWoken);
  loop.stop();
}

TEST(SlotQueueTest, AWaitEndsAtItsTimeoutWithoutANotify) {
  http::EventLoop loop(1);
  SlotQueue q;
  auto w = start_waiter(loop, q, 20ms);
  ASSERT_EQ(w->woke.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(w->woke.get(), Wake::kTimedOut);
  EXPECT_EQ(q.waiting(), 0u);
  loop.stop();
}

// A slot freed on a worker wakes the oldest waiter that could use it, not a request of another
// model (or stage) that is older: that one would find nothing and wait again, while this one
// waited on with the slot free.
TEST(SlotQueueTest, AFreedSlotWakesTheOldestWaiterThatCanUseIt) {
  http::EventLoop loop(2);
  SlotQueue q;
  FleetMember a_worker, b_worker;
  a_worker.slot = 1;
  b_worker.slot = 2;
  auto only = [](kv::WorkerId slot) { return [slot](const FleetMember& m) { return m.slot == slot; }; };
  std::vector<std::unique_ptr<Waiting>> ws;
  ws.push_back(start_waiter(loop, q, 30s, only(1)));  // oldest, wants worker 1
  ws.back()->entered.get_future().wait();
  ws.push_back(start_waiter(loop, q, 30s, only(2)));  // wants worker 2
  ws.back()->entered.get_future().wait();
  ws.push_back(start_waiter(loop, q, 30s));           // any worker
  ws.back()->entered.get_future().wait();
  q.notify_one(&b_worker);
  ASSERT_EQ(ws[1]->woke.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(ws[1]->woke.get(), Wake::kWoken);
  EXPECT_EQ(ws[0]->woke.wait_for(0s), std::future_status::timeout);
  q.notify_one(&b_worker);  // the next that can use worker 2: the one that takes any
  ASSERT_EQ(ws[2]->woke.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(ws[2]->woke.get(), Wake::kWoken);
  q.notify_one(&b_worker);  // nobody left can use worker 2: nobody is woken
  EXPECT_EQ(ws[0]->woke.wait_for(50ms), std::future_status::timeout);
  q.notify_one(&a_worker);
  ASSERT_EQ(ws[0]->woke.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(ws[0]->woke.get(), Wake::kWoken);
  loop.stop();
}

// A waiter that was woken but leaves without using the wake-up (its client went away) passes
// it to the next one, so a freed slot is never left unused while others wait.
TEST(SlotQueueTest, AWakeUpNotUsedGoesToTheNextWaiter) {
  http::EventLoop loop(1);
  SlotQueue q;
  auto woke = net::co_spawn(
      loop.context(),
      [&]() -> net::awaitable<Wake> {
        std::optional<SlotQueue::Ticket> a = co_await q.enter(kUnbounded);
        SlotQueue::Ticket b = *co_await q.enter(kUnbounded);
        q.notify_one();  // wakes a, the oldest
        a.reset();       // a leaves without waiting
        co_return co_await b.wait(30s);
      },
      net::use_future);
  ASSERT_EQ(woke.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(woke.get(), Wake::kWoken);
  EXPECT_EQ(q.waiting(), 0u);
  loop.stop();
}

TEST(SlotQueueTest, AFullQueueRefusesTheNextWaiterAndTakesOneOnceAPlaceFrees) {
  http::EventLoop loop(1);
  SlotQueue q;
  auto entered = net::co_spawn(
      loop.context(),
      [&]() -> net::awaitable<std::vector<bool>> {
        std::optional<SlotQueue::Ticket> a = co_await q.enter(2);
        std::optional<SlotQueue::Ticket> b = co_await q.enter(2);
        std::optional<SlotQueue::Ticket> c = co_await q.enter(2);  // full: refused
        const bool refused = !c.has_value();
        a.reset();  // a place frees
        std::optional<SlotQueue::Ticket> d = co_await q.enter(2);
        co_return std::vector<bool>{b.has_value(), refused, d.has_value(), q.waiting() == 2};
      },
      net::use_future);
  ASSERT_EQ(entered.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(entered.get(), (std::vector<bool>{true, true, true, true}));
  EXPECT_EQ(q.waiting(), 0u);
  loop.stop();
}

}  // namespace
}  // namespace infera::gateway
