#include "infera/common/signals.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <ctime>
#include <thread>

namespace infera {
namespace {

using std::chrono::milliseconds;

// Each test starts and ends with this thread's own mask and nothing pending: a termination
// signal left pending when the mask is restored would end the test binary.
class TerminationSignalsTest : public ::testing::Test {
 protected:
  void SetUp() override { pthread_sigmask(SIG_SETMASK, nullptr, &saved_); }
  void TearDown() override {
    sigset_t ours;
    sigemptyset(&ours);
    sigaddset(&ours, SIGTERM);
    sigaddset(&ours, SIGINT);
    sigaddset(&ours, SIGCHLD);
    sigaddset(&ours, SIGHUP);
    const timespec now{};
    while (sigtimedwait(&ours, nullptr, &now) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }

  static bool pending(int sig) {
    sigset_t set;
    sigpending(&set);
    return sigismember(&set, sig) == 1;
  }

 private:
  sigset_t saved_{};
};

TEST_F(TerminationSignalsTest, WaitReturnsSigtermRaisedAfterBlocking) {
  const TerminationSignals signals = block_termination_signals();
  // Unblocked, SIGTERM would end the process here.
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_EQ(signals.wait(), SIGTERM);
  EXPECT_FALSE(pending(SIGTERM));
}

TEST_F(TerminationSignalsTest, WaitReturnsSigint) {
  const TerminationSignals signals = block_termination_signals();
  ASSERT_EQ(raise(SIGINT), 0);
  EXPECT_EQ(signals.wait(), SIGINT);
}

TEST_F(TerminationSignalsTest, ThreadStartedAfterBlockingLeavesTheSignalToTheWaiter) {
  const TerminationSignals signals = block_termination_signals();
  // A signal sent to the process while another thread runs: that thread inherited the mask, so
  // the signal stays pending for the wait instead of ending the process.
  std::thread other([] { ::kill(::getpid(), SIGTERM); });
  other.join();
  EXPECT_EQ(signals.wait(), SIGTERM);
}

TEST_F(TerminationSignalsTest, WaitForReturnsZeroWhenNoSignalCame) {
  const TerminationSignals signals = block_termination_signals();
  EXPECT_EQ(signals.wait_for(milliseconds(0)), 0);
}

TEST_F(TerminationSignalsTest, WaitForReturnsAPendingSignal) {
  const TerminationSignals signals = block_termination_signals();
  ASSERT_EQ(raise(SIGINT), 0);
  EXPECT_EQ(signals.wait_for(milliseconds(0)), SIGINT);
}

TEST_F(TerminationSignalsTest, ChildExitEndsATimedWaitWithZero) {
  const TerminationSignals signals = block_termination_signals(/*wake_on_child_exit=*/true);
  ASSERT_EQ(raise(SIGCHLD), 0);
  // Returns at once: the SIGCHLD is pending (a missed one would show as a minute's wait).
  EXPECT_EQ(signals.wait_for(std::chrono::minutes(1)), 0);
  EXPECT_FALSE(pending(SIGCHLD));
}

TEST_F(TerminationSignalsTest, WaitLeavesAChildExitPending) {
  const TerminationSignals signals = block_termination_signals(/*wake_on_child_exit=*/true);
  ASSERT_EQ(raise(SIGCHLD), 0);
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_EQ(signals.wait(), SIGTERM);
  EXPECT_TRUE(pending(SIGCHLD));
}

TEST_F(TerminationSignalsTest, HangupIsLeftAloneUnlessAskedFor) {
  const TerminationSignals signals = block_termination_signals();
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  EXPECT_EQ(sigismember(&mask, SIGHUP), 0);  // its default action still applies
  EXPECT_EQ(sigismember(&mask, SIGTERM), 1);
  EXPECT_EQ(signals.wait_for(milliseconds(0)), 0);
}

TEST_F(TerminationSignalsTest, WaitReturnsSighupWhenTaken) {
  const TerminationSignals signals = block_termination_and_hangup_signals();
  // Unblocked, SIGHUP would end the process here.
  ASSERT_EQ(raise(SIGHUP), 0);
  EXPECT_EQ(signals.wait(), SIGHUP);
  EXPECT_FALSE(pending(SIGHUP));
}

TEST_F(TerminationSignalsTest, WaitForReturnsSighupAndStillTakesSigterm) {
  const TerminationSignals signals = block_termination_and_hangup_signals();
  ASSERT_EQ(raise(SIGHUP), 0);
  EXPECT_EQ(signals.wait_for(std::chrono::minutes(1)), SIGHUP);
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_EQ(signals.wait_for(std::chrono::minutes(1)), SIGTERM);
}

TEST(TerminationSignalNameTest, NamesEachSignal) {
  EXPECT_STREQ(termination_signal_name(SIGTERM), "SIGTERM");
  EXPECT_STREQ(termination_signal_name(SIGINT), "SIGINT");
  EXPECT_STREQ(termination_signal_name(SIGHUP), "SIGHUP");
}

}  // namespace
}  // namespace infera
