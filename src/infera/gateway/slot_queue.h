// Requests waiting for a worker below its --max-inflight-per-worker cap, woken one at a time as
// in-flight calls end (oldest first), instead of each polling the fleet on a timer: under
// sustained overload thousands of pollers burnt the gateway's cores and its goodput collapsed
// (docs/reliability.md). Thread-safe: waiters run on their connections' strands, notify_one()
// is called from any.
//
// A waiter registers before it re-checks the fleet, so a slot freed between its check and its
// wait still wakes it; a woken waiter that finds the slot taken waits again (at the back), and
// one that is woken but gives up (its client left) passes the wake-up on. A waiter says which
// workers it could use (its model, stage, protocol): a slot freed on a worker wakes the oldest
// waiter that could take it, so in a fleet of several models (or prefill and decode pools) a
// freed slot is not spent waking a request that cannot use it while one that can waits on.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>

#include "infera/common/spin_mutex.h"
#include "infera/http/net.h"

namespace infera::gateway {

struct FleetMember;

class SlotQueue {
 public:
  class Ticket;
  enum class Wake { kWoken, kTimedOut, kCancelled };
  // Whether a waiter could use a slot freed on this worker. Called under the queue's lock, from
  // the thread that frees the slot: it must only read the member. Empty: any worker will do.
  using Fits = std::function<bool(const FleetMember&)>;

  // Registers a waiter on the calling coroutine's executor, unless `max_waiting` already wait
  // (then nullopt: the queue is full). Keep the ticket across the fleet check and the wait; it
  // deregisters when destroyed.
  net::awaitable<std::optional<Ticket>> enter(size_t max_waiting, Fits fits = {});

  // A call on `freed` ended: wakes the oldest waiter, not woken yet, that could use it (with
  // null `freed`, the oldest of all). Any thread.
  void notify_one(const FleetMember* freed = nullptr);

  size_t waiting() const {
    std::lock_guard lock(mu_);
    return waiters_.size();
  }

 private:
  struct Waiter {
    Waiter(const net::any_io_executor& ex, Fits f) : timer(ex), fits(std::move(f)) {}
    net::steady_timer timer;  // cancelled (on its strand) to wake the waiter
    const Fits fits;
    bool woken = false;       // under mu_
  };
  using List = std::list<std::shared_ptr<Waiter>>;

  void leave(List::iterator it);  // passes on a wake-up it was given and did not use

  mutable SpinMutex mu_;
  List waiters_;

 public:
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& o) noexcept : q_(o.q_), it_(o.it_), w_(std::move(o.w_)) { o.q_ = nullptr; }
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    ~Ticket() {
      if (q_) q_->leave(it_);
    }
    // Waits until woken by notify_one(), `timeout` passed, or the coroutine is cancelled.
    // kWoken: a slot was freed (it may already be taken again); the ticket is then back at the
    // end of the queue, ready for another check and wait.
    net::awaitable<Wake> wait(std::chrono::steady_clock::duration timeout);

   private:
    friend class SlotQueue;
    Ticket(SlotQueue* q, List::iterator it, std::shared_ptr<Waiter> w)
        : q_(q), it_(it), w_(std::move(w)) {}
    SlotQueue* q_ = nullptr;
    List::iterator it_;
    std::shared_ptr<Waiter> w_;
  };
};

}  // namespace infera::gateway
