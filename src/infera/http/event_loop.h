// EventLoop: N threads, each running its own io_context, the event loop that a Server, its
// handlers and the Client connections they open share. A Server spreads its connections over
// the threads (round-robin at accept), and a connection's handler, its upstream calls and their
// pooled connections all run on that connection's thread: an exchange never crosses threads
// (docs/architecture.md, "Threads"). Background work (probes, polls, discovery) runs on
// context(), the first thread's. Owned by the composition root (gateway, engine, bench), which
// must destroy servers before their loop. Constructed and stopped from a non-loop thread;
// context() and next_context() may be used from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace infera::http {

class EventLoop {
 public:
  // Starts `threads` (>= 1) threads, each running its own io_context until stop().
  explicit EventLoop(int threads);
  ~EventLoop();  // stop()
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // The first thread's context: where background work runs.
  boost::asio::io_context& context() { return context(0); }
  boost::asio::io_context& context(int thread);
  // The contexts in turn: where a new connection (or a load generator's next client) runs.
  boost::asio::io_context& next_context();
  int threads() const { return static_cast<int>(threads_.size()); }
  // True when called from one of this loop's threads.
  bool in_loop_thread() const;
  // Stops every thread's context (pending work is abandoned) and joins the threads. Idempotent.
  // Not from a loop thread (it would join itself).
  void stop();

 private:
  struct Thread;
  std::vector<std::unique_ptr<Thread>> threads_;
  std::atomic<unsigned> next_{0};
};

}  // namespace infera::http
