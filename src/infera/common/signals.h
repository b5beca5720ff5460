// SIGTERM and SIGINT taken synchronously, the way every command shuts down: the main thread
// blocks them before it starts any other thread (threads inherit the mask, so none of them takes
// the signal), then waits for one and shuts down on that thread, outside any signal handler.
// A TerminationSignals belongs to the thread that made it; only that thread may wait on it.
#pragma once

#include <chrono>

namespace infera {

class TerminationSignals;

// Blocks SIGTERM and SIGINT in the calling thread, and SIGCHLD as well with
// `wake_on_child_exit` (so that wait_for returns early when a child exits). Call it before any
// other thread starts; a child process spawned afterwards inherits the mask too.
TerminationSignals block_termination_signals(bool wake_on_child_exit = false);

class TerminationSignals {
 public:
  // Waits for SIGTERM or SIGINT and returns it.
  int wait() const;
  // Waits at most `timeout` (0: only looks): SIGTERM or SIGINT, or 0 when the time ran out or,
  // made to wake on child exits, when a SIGCHLD came.
  int wait_for(std::chrono::milliseconds timeout) const;

 private:
  friend TerminationSignals block_termination_signals(bool wake_on_child_exit);
  explicit TerminationSignals(bool wake_on_child_exit) : wake_on_child_exit_(wake_on_child_exit) {}

  bool wake_on_child_exit_;
};

// "SIGTERM" for SIGTERM, "SIGINT" for anything else: the names of what the waits return.
const char* termination_signal_name(int sig);

}  // namespace infera
