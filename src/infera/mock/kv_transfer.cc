#include "infera/mock/kv_transfer.h"

#include <atomic>
#include <unordered_map>

#include "infera/http/net.h"

namespace infera::mock {

using engine::RequestId;

namespace {

using Clock = std::chrono::steady_clock;

// One side waiting for the other: woken by a cancel of its timer with `done` set.
struct Waiter {
  explicit Waiter(const net::any_io_executor& ex) : timer(ex) {}
  net::steady_timer timer;
  bool done = false;
};

struct Entry {
  bool offered = false;
  RequestId id = 0;
  uint32_t blocks = 0;
  Clock::time_point expires_at;
  std::shared_ptr<Waiter> offerer;  // an offer waiting to be taken (SGLang)
  std::shared_ptr<Waiter> taker;    // a pull waiting for its offer (SGLang)
};

}  // namespace

struct KvTransfers::Impl : std::enable_shared_from_this<KvTransfers::Impl> {
  Impl(net::io_context& io, Options o, std::function<void(RequestId)> r)
      : strand(net::make_strand(io)), sweep(strand), options(o), release(std::move(r)) {}

  // Strand only, below.
  // Releases offers nobody waits on whose time ran out, and re-arms for the next one.
  void expire() {
    const Clock::time_point now = Clock::now();
    std::optional<Clock::time_point> next;
    for (auto it = entries.begin(); it != entries.end();) {
      Entry& e = it->second;
      if (e.offered && !e.offerer) {
        if (e.expires_at <= now) {
          release(e.id);
          it = entries.erase(it);
          continue;
        }
        if (!next || e.expires_at < *next) next = e.expires_at;
      }
      ++it;
    }
    pending_offers.store(count_offers());
    if (!next) return;
    sweep.expires_at(*next);
    sweep.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->expire();
    });
  }
  size_t count_offers() const {
    size_t n = 0;
    for (const auto& [key, e] : entries) n += e.offered ? 1 : 0;
    return n;
  }

  net::awaitable<Status> offer(std::string key, RequestId id, uint32_t blocks, bool wait) {
    auto it = entries.find(key);
    if ((it != entries.end() && it->second.offered) ||
        (it == entries.end() && entries.size() >= options.max_entries)) {
      release(id);
      co_return it == entries.end()
          ? resource_exhausted("too many KV transfers in progress")
          : failed_precondition("a KV transfer for '" + key + "' is already on offer");
    }
    Entry& e = entries[key];
    e.offered = true;
    e.id = id;
    e.blocks = blocks;
    e.expires_at = Clock::now() + options.timeout;
    if (e.taker) {
      e.taker->done = true;
      e.taker->timer.cancel();
    }
    if (!wait) {
      expire();  // arms the sweep for this offer
      co_return ok_status();
    }
    auto waiter = std::make_shared<Waiter>(strand);
    e.offerer = waiter;
    pending_offers.store(count_offers());
    waiter->timer.expires_at(e.expires_at);
    auto [ec] = co_await waiter->timer.async_wait(use_nothrow);
    if (waiter->done) co_return ok_status();
    // Not taken: timed out, or the caller went away. The blocks are freed here.
    it = entries.find(key);
    if (it != entries.end() && it->second.offerer == waiter) {
      release(it->second.id);
      entries.erase(it);
    }
    pending_offers.store(count_offers());
    if (ec == net::error::operation_aborted) co_return cancelled("the prefill request was cancelled");
    co_return deadline_exceeded("no decode engine took the KV blocks of '" + key + "' within " +
                                std::to_string(options.timeout.count()) + " ms");
  }

  // The caller went away: its wait (offer or pull of `key`) ends now, as cancelled.
  void stop_waits(const std::string& key) {
    auto it = entries.find(key);
    if (it == entries.end()) return;
    if (it->second.offerer) it->second.offerer->timer.cancel();
    if (it->second.taker) it->second.taker->timer.cancel();
  }

  // A default-constructible result (co_spawn needs one).
  struct Taken {
    Status status;
    uint32_t blocks = 0;
  };
  net::awaitable<Taken> take(std::string key, bool wait) {
    auto it = entries.find(key);
    if (it == entries.end() || !it->second.offered) {
      if (!wait) co_return Taken{not_found("no KV blocks are on offer for '" + key + "'"), 0};
      if ((it == entries.end() && entries.size() >= options.max_entries) ||
          (it != entries.end() && it->second.taker)) {
        co_return Taken{resource_exhausted("cannot wait for the KV blocks of '" + key + "'"), 0};
      }
      auto waiter = std::make_shared<Waiter>(strand);
      entries[key].taker = waiter;
      waiter->timer.expires_after(options.timeout);
      (void)co_await waiter->timer.async_wait(use_nothrow);
      it = entries.find(key);
      if (!waiter->done) {
        if (it != entries.end() && !it->second.offered && it->second.taker == waiter) {
          entries.erase(it);
        }
        co_return Taken{deadline_exceeded("no prefill offered the KV blocks of '" + key + "' within " +
                                    std::to_string(options.timeout.count()) + " ms"), 0};
      }
      if (it == entries.end() || !it->second.offered) {
        co_return Taken{not_found("the KV blocks of '" + key + "' are gone"), 0};
      }
    }
    Entry e = std::move(it->second);
    entries.erase(it);
    release(e.id);
    if (e.offerer) {
      e.offerer->done = true;
      e.offerer->timer.cancel();
    }
    pending_offers.store(count_offers());
    co_return Taken{ok_status(), e.blocks};
  }

  net::strand<net::io_context::executor_type> strand;
  net::steady_timer sweep;
  Options options;
  std::function<void(RequestId)> release;
  std::unordered_map<std::string, Entry> entries;
  std::atomic<size_t> pending_offers{0};
};

KvTransfers::KvTransfers(net::io_context& io, Options options,
                         std::function<void(RequestId)> release)
    : impl_(std::make_shared<Impl>(io, options, std::move(release))) {}

KvTransfers::~KvTransfers() {
  net::post(impl_->strand, [impl = impl_] { impl->sweep.cancel(); });
}

namespace {

// The caller's cancellation reaches a wait on the strand by a post of our own, not through
// co_spawn (use_awaitable_uncancelled, http/net.h: a cancelled SGLang prefill killed the engine
// that way). Returns the slot to clear once the call is over.
net::awaitable<net::cancellation_slot> on_cancel_stop(std::shared_ptr<KvTransfers::Impl> impl,
                                                      std::string key) {
  const net::cancellation_state cs = co_await net::this_coro::cancellation_state;
  net::cancellation_slot slot = cs.slot();
  if (slot.is_connected()) {
    slot.assign([impl, key](net::cancellation_type) {
      net::post(impl->strand, [impl, key] { impl->stop_waits(key); });
    });
  }
  co_return slot;
}

}  // namespace

net::awaitable<Status> KvTransfers::offer(std::string key, RequestId id, uint32_t blocks,
                                          bool wait_until_taken) {
  std::shared_ptr<Impl> impl = impl_;
  net::cancellation_slot slot = co_await on_cancel_stop(impl, key);
  Status s = co_await net::co_spawn(
      impl->strand, impl->offer(std::move(key), id, blocks, wait_until_taken), use_awaitable_uncancelled());
  if (slot.is_connected()) slot.clear();
  co_return s;
}

net::awaitable<Result<uint32_t>> KvTransfers::take(std::string key, bool wait_for_offer) {
  std::shared_ptr<Impl> impl = impl_;
  net::cancellation_slot slot = co_await on_cancel_stop(impl, key);
  Impl::Taken t = co_await net::co_spawn(
      impl->strand, impl->take(std::move(key), wait_for_offer), use_awaitable_uncancelled());
  if (slot.is_connected()) slot.clear();
  if (!t.status.ok()) co_return t.status;
  co_return t.blocks;
}

size_t KvTransfers::pending() const { return impl_->pending_offers.load(); }

}  // namespace infera::mock
