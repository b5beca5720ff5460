#include "infera/gateway/slot_queue.h"

namespace infera::gateway {

net::awaitable<std::optional<SlotQueue::Ticket>> SlotQueue::enter(size_t max_waiting, Fits fits) {
  auto w = std::make_shared<Waiter>(co_await net::this_coro::executor, std::move(fits));
  List::iterator it;
  {
    std::lock_guard lock(mu_);
    if (waiters_.size() >= max_waiting) co_return std::nullopt;
    it = waiters_.insert(waiters_.end(), w);
  }
  co_return Ticket(this, it, std::move(w));
}

void SlotQueue::notify_one(const FleetMember* freed) {
  std::shared_ptr<Waiter> w;
  {
    std::lock_guard lock(mu_);
    for (const auto& candidate : waiters_) {
      if (!candidate->woken && (!freed || !candidate->fits || candidate->fits(*freed))) {
        candidate->woken = true;
        w = candidate;
        break;
      }
    }
  }
  if (!w) return;
  // The timer belongs to the waiter's strand: cancel it there.
  net::post(w->timer.get_executor(), [w] { w->timer.cancel(); });
}

void SlotQueue::leave(List::iterator it) {
  bool was_woken = false;
  {
    std::lock_guard lock(mu_);
    was_woken = (*it)->woken;
    waiters_.erase(it);
  }
  // A wake-up this waiter will not use goes to the next one (which worker freed it is not
  // kept: the oldest waiter gets it).
  if (was_woken) notify_one();
}

net::awaitable<SlotQueue::Wake> SlotQueue::Ticket::wait(
    std::chrono::steady_clock::duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    {
      std::lock_guard lock(q_->mu_);
      if (w_->woken) {
        w_->woken = false;
        // Back to the end of the queue: waiting again after a lost race is a new turn.
        q_->waiters_.splice(q_->waiters_.end(), q_->waiters_, it_);
        co_return Wake::kWoken;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) co_return Wake::kTimedOut;
    w_->timer.expires_at(deadline);
    (void)co_await w_->timer.async_wait(use_nothrow);
    // A wake-up kept (woken stays set) when cancelled goes to the next waiter on leave().
    const net::cancellation_state cs = co_await net::this_coro::cancellation_state;
    if (cs.cancelled() != net::cancellation_type::none) co_return Wake::kCancelled;
    // Otherwise: woken, timed out, or a late cancel of a wake-up already taken; the loop tells.
  }
}

}  // namespace infera::gateway
