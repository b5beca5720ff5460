#include "infera/common/signals.h"

#include <pthread.h>
#include <signal.h>

#include <ctime>

namespace infera {
namespace {

// SIGTERM and SIGINT, plus SIGCHLD when `with_child_exit` and SIGHUP when `with_hangup`.
sigset_t signal_set(bool with_child_exit, bool with_hangup) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (with_child_exit) sigaddset(&signals, SIGCHLD);
  if (with_hangup) sigaddset(&signals, SIGHUP);
  return signals;
}

}  // namespace

TerminationSignals block_termination_signals(bool wake_on_child_exit) {
  const sigset_t signals = signal_set(wake_on_child_exit, false);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return TerminationSignals(wake_on_child_exit, false);
}

TerminationSignals block_termination_and_hangup_signals() {
  const sigset_t signals = signal_set(false, true);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return TerminationSignals(false, true);
}

int TerminationSignals::wait() const {
  // SIGCHLD, when blocked, stays pending: only a termination signal (or SIGHUP) ends this wait.
  const sigset_t signals = signal_set(false, hangup_);
  int sig = 0;
  sigwait(&signals, &sig);
  return sig;
}

int TerminationSignals::wait_for(std::chrono::milliseconds timeout) const {
  const sigset_t signals = signal_set(wake_on_child_exit_, hangup_);
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000) * 1'000'000);
  const int sig = ::sigtimedwait(&signals, nullptr, &ts);
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP ? sig : 0;
}

const char* termination_signal_name(int sig) {
  if (sig == SIGTERM) return "SIGTERM";
  if (sig == SIGHUP) return "SIGHUP";
  return "SIGINT";
}

}  // namespace infera
