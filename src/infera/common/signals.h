// SIGTERM and SIGINT taken synchronously, the way every command shuts down: the main thread
// blocks them before it starts any other thread (threads inherit the mask, so none of them takes
// the signal), then waits for one and shuts down on that thread, outside any signal handler.
// `infera server` takes SIGHUP the same way (its reload request) instead of dying of it.
// A TerminationSignals belongs to the thread that made it; only that thread may wait on it.
#pragma once

#include <chrono>

namespace infera {

class TerminationSignals;

// Blocks SIGTERM and SIGINT in the calling thread, and SIGCHLD as well with
// `wake_on_child_exit` (so that wait_for returns early when a child exits). Call it before any
// other thread starts; a child process spawned afterwards inherits the mask too.
TerminationSignals block_termination_signals(bool wake_on_child_exit = false);

// As block_termination_signals(), and SIGHUP too: the waits return it like the other two, so a
// SIGHUP no longer ends the process (its default action) but is the caller's to act on.
TerminationSignals block_termination_and_hangup_signals();

class TerminationSignals {
 public:
  // Waits for SIGTERM or SIGINT (or SIGHUP, when taken) and returns it.
  int wait() const;
  // Waits at most `timeout` (0: only looks): SIGTERM or SIGINT (or SIGHUP, when taken), or 0
  // when the time ran out or, made to wake on child exits, when a SIGCHLD came.
  int wait_for(std::chrono::milliseconds timeout) const;

 private:
  friend TerminationSignals block_termination_signals(bool wake_on_child_exit);
  friend TerminationSignals block_termination_and_hangup_signals();
  TerminationSignals(bool wake_on_child_exit, bool hangup)
      : wake_on_child_exit_(wake_on_child_exit), hangup_(hangup) {}

  bool wake_on_child_exit_;
  bool hangup_;
};

// "SIGTERM" for SIGTERM, "SIGHUP" for SIGHUP, "SIGINT" for anything else: the names of what the
// waits return.
const char* termination_signal_name(int sig);

}  // namespace infera
