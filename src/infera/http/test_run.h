// Test-only: runs a coroutine on an EventLoop and waits for its result, for the http module's
// socket tests (client, TLS). A test whose coroutine cannot finish in time aborts: the coroutine
// still references the test's locals.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
#include <future>

#include "infera/http/event_loop.h"
#include "infera/http/net.h"
#include "infera/http/test_support.h"

namespace infera::http::testing {

template <typename T>
T run(EventLoop& loop, net::awaitable<T> task, Ms deadline = Ms(20000)) {
  std::promise<T> done;
  auto result = done.get_future();
  // Through an awaitable<void>: co_spawn's completion needs a default-constructible T.
  net::co_spawn(
      net::make_strand(loop.context()),
      [&]() -> net::awaitable<void> { done.set_value(co_await std::move(task)); },
      [&done](const std::exception_ptr& e) {
        if (e) done.set_exception(e);
      });
  if (result.wait_for(deadline) != std::future_status::ready) {
    ADD_FAILURE() << "coroutine did not finish in time";
    std::abort();
  }
  return result.get();
}

}  // namespace infera::http::testing
