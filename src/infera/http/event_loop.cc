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

struct EventLoop::Guard {
  explicit Guard(net::io_context& c) : work(net::make_work_guard(c)) {}
  net::executor_work_guard<net::io_context::executor_type> work;
};

EventLoop::EventLoop(int threads)
    // The concurrency hint lets a one-thread loop take its single-thread fast paths.
    : context_(std::make_unique<net::io_context>(threads)),
      guard_(std::make_unique<Guard>(*context_)) {
  INFERA_CHECK(threads >= 1);
  threads_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      current_loop = this;
      // Handlers never throw by contract (co_spawn completions log); an exception here is a bug
      // in a callback, reported rather than silently ending a loop thread.
      for (;;) {
        try {
          context_->run();
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

bool EventLoop::in_loop_thread() const {
  return current_loop == this;
}

void EventLoop::stop() {
  INFERA_CHECK(!in_loop_thread());
  guard_.reset();
  context_->stop();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace infera::http
