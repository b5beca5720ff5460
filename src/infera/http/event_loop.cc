#include "infera/http/event_loop.h"

#include <exception>

#include "infera/common/check.h"
#include "infera/common/log.h"

// clang-format off
#include "infera/http/awaitable.h"  // the net alias, and <utility> before Asio
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
// clang-format on

namespace infera::http {
namespace {
// The loop whose thread this is (set once per loop thread, before it runs anything).
thread_local const EventLoop* current_loop = nullptr;
}  // namespace

struct EventLoop::Thread {
  // The concurrency hint of 1 lets each context take Asio's single-thread fast paths (other
  // threads still post to it: a slot freed elsewhere, the mock engine's core).
  Thread() : context(1), work(net::make_work_guard(context)) {}
  net::io_context context;
  net::executor_work_guard<net::io_context::executor_type> work;
  std::thread thread;
};

EventLoop::EventLoop(int threads) {
  INFERA_CHECK(threads >= 1);
  threads_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) threads_.push_back(std::make_unique<Thread>());
  for (auto& t : threads_) {
    t->thread = std::thread([this, context = &t->context] {
      current_loop = this;
      // Handlers never throw by contract (co_spawn completions log); an exception here is a bug
      // in a callback, reported rather than silently ending a loop thread.
      for (;;) {
        try {
          context->run();
          return;
        } catch (const std::exception& e) {
          INFERA_LOG(kError, "http").msg("exception escaped the event loop").kv("what", e.what());
        }
      }
    });
  }
}

EventLoop::~EventLoop() {
  stop();
}

net::io_context& EventLoop::context(int thread) {
  INFERA_CHECK(thread >= 0 && thread < threads());
  return threads_[static_cast<size_t>(thread)]->context;
}

net::io_context& EventLoop::next_context() {
  const unsigned n = next_.fetch_add(1, std::memory_order_relaxed);
  return threads_[n % threads_.size()]->context;
}

bool EventLoop::in_loop_thread() const {
  return current_loop == this;
}

void EventLoop::stop() {
  INFERA_CHECK(!in_loop_thread());
  for (auto& t : threads_) {
    t->work.reset();
    t->context.stop();
  }
  for (auto& t : threads_) {
    if (t->thread.joinable()) t->thread.join();
  }
}

}  // namespace infera::http
