// EventLoop: one io_context run by N threads, the event loop that a Server, its handlers and the
// Client connections they open share. Owned by the composition root (gateway, engine, bench),
// which must destroy servers before their loop. Constructed and stopped from a non-loop thread;
// context() may be used from any thread.
#pragma once

#include <memory>
#include <thread>
#include <vector>

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace infera::http {

class EventLoop {
 public:
  // Starts `threads` (>= 1) threads running the loop until stop().
  explicit EventLoop(int threads);
  ~EventLoop();  // stop()
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  boost::asio::io_context& context() { return *context_; }
  int threads() const { return static_cast<int>(threads_.size()); }
  // True when called from one of this loop's threads.
  bool in_loop_thread() const;
  // Stops the loop (pending work is abandoned) and joins its threads. Idempotent. Not from a loop
  // thread (it would join itself).
  void stop();

 private:
  struct Guard;
  std::unique_ptr<boost::asio::io_context> context_;
  std::unique_ptr<Guard> guard_;
  std::vector<std::thread> threads_;
};

}  // namespace infera::http
