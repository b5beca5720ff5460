#include "infera/common/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace infera {
namespace {

TEST(SubprocessTest, RunsAndReportsExitCodes) {
  auto ok = run_process({"true"}, std::chrono::seconds(10));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 0);
  auto fail = run_process({"sh", "-c", "exit 3"}, std::chrono::seconds(10));
  ASSERT_TRUE(fail.ok());
  EXPECT_EQ(*fail, 3);
  EXPECT_FALSE(Subprocess::spawn({"/nonexistent/binary"}).ok());
}

TEST(SubprocessTest, PassesEnvironmentAndCapturesOutput) {
  const auto log = std::filesystem::temp_directory_path() /
                   ("infera_subprocess_" + std::to_string(::getpid()) + ".log");
  SpawnOptions o;
  o.env = {{"INFERA_TEST_VALUE", "hello"}};
  o.stdout_path = log.string();
  auto child = Subprocess::spawn({"sh", "-c", "echo $INFERA_TEST_VALUE"}, o);
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(child->wait_for(std::chrono::seconds(10)), 0);
  std::stringstream ss;
  ss << std::ifstream(log).rdbuf();
  EXPECT_EQ(ss.str(), "hello\n");
  std::filesystem::remove(log);
}

TEST(SubprocessTest, StopTerminatesAHungChild) {
  auto child = Subprocess::spawn({"sleep", "60"});
  ASSERT_TRUE(child.ok());
  EXPECT_TRUE(child->running());
  EXPECT_FALSE(child->wait_for(std::chrono::milliseconds(20)).has_value());
  EXPECT_EQ(child->stop(std::chrono::seconds(5)), 128 + SIGTERM);
  EXPECT_FALSE(child->running());
}

TEST(SubprocessTest, DeadlineExceededKillsTheChild) {
  auto r = run_process({"sleep", "60"}, std::chrono::milliseconds(50));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace infera
