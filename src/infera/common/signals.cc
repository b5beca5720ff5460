#include "infera/common/signals.h"

#include <pthread.h>
#include <signal.h>

#include <ctime>

namespace infera {
namespace {

// SIGTERM and SIGINT, plus SIGCHLD when `with_child_exit`.
sigset_t signal_set(bool with_child_exit) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (with_child_exit) sigaddset(&signals, SIGCHLD);
  return signals;
}

}  // namespace

TerminationSignals block_termination_signals(bool wake_on_child_exit) {
  const sigset_t signals = signal_set(wake_on_child_exit);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return TerminationSignals(wake_on_child_exit);
}

int TerminationSignals::wait() const {
  // SIGCHLD, when blocked, stays pending: only a termination signal ends this wait.
  const sigset_t signals = signal_set(false);
  int sig = 0;
  sigwait(&signals, &sig);
  return sig;
}

int TerminationSignals::wait_for(std::chrono::milliseconds timeout) const {
  const sigset_t signals = signal_set(wake_on_child_exit_);
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000) * 1'000'000);
  const int sig = ::sigtimedwait(&signals, nullptr, &ts);
  return sig == SIGTERM || sig == SIGINT ? sig : 0;
}

const char* termination_signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : "SIGINT";
}

}  // namespace infera
