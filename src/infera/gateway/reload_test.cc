#include "infera/gateway/reload.h"

#include "tests/support/dev_transports.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace infera::gateway {
namespace {

using config::ServerConfig;
using Flags = std::vector<std::string>;

// `infera server ARGS`, as the command parses them (the test fails on a parse error).
ServerConfig config_of(Flags args) {
  bool help = false;
  std::string text;
  auto c = config::parse_server_flags(infera::testing::with_dev_transports(args), &help, &text);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ServerConfig{};
}

const Flags kBase = {"--worker", "http://127.0.0.1:30000", "--worker", "http://127.0.0.1:30001"};

Flags with(Flags more) {
  Flags out = kBase;
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(ReloadTest, TheSameFlagsChangeNothing) {
  auto plan = plan_reload(config_of(kBase), config_of(kBase));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_TRUE(plan->applied.empty());
  EXPECT_TRUE(plan->not_applied.empty());
  EXPECT_FALSE(plan->log_level || plan->weights || plan->admin_token || plan->workers);
  EXPECT_TRUE(plan->running_after == config_of(kBase));
}

TEST(ReloadTest, ALogLevelIsAppliedLive) {
  auto plan = plan_reload(config_of(kBase), config_of(with({"--log-level", "debug"})));
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(plan->log_level.has_value());
  EXPECT_EQ(*plan->log_level, LogLevel::kDebug);
  EXPECT_EQ(plan->applied, Flags{"--log-level"});
  EXPECT_TRUE(plan->not_applied.empty());
  EXPECT_EQ(plan->running_after.log_level, LogLevel::kDebug);
}

TEST(ReloadTest, OverlapWeightsAreSwappedAsOneSet) {
  const ServerConfig running = config_of(with({"--kv-decode-overlap-weight", "0.5"}));
  auto plan = plan_reload(running, config_of(with({"--kv-overlap-weight", "4",
                                               "--kv-prefill-overlap-weight", "8"})));
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(plan->weights.has_value());
  EXPECT_EQ(*plan->weights, (OverlapWeights{4.0, 8.0, std::nullopt}));  // decode falls back again
  EXPECT_EQ(plan->applied, (Flags{"--kv-overlap-weight", "--kv-prefill-overlap-weight",
                                  "--kv-decode-overlap-weight"}));
  EXPECT_TRUE(plan->not_applied.empty());
}

TEST(ReloadTest, AnAdminTokenIsAppliedLiveAndNamedOnlyByItsFlag) {
  auto plan = plan_reload(config_of(with({"--admin-token", "old"})),
                          config_of(with({"--admin-token", "new"})));
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(plan->admin_token.has_value());
  EXPECT_EQ(*plan->admin_token, "new");
  EXPECT_EQ(plan->applied, Flags{"--admin-token"});
  // Removing the token is a change too (the admin API becomes open, as at startup without one).
  auto removed = plan_reload(config_of(with({"--admin-token", "old"})), config_of(kBase));
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->admin_token, std::optional<std::string>(""));
}

// A file under the test's own temporary directory, written whole.
class ReloadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("infera_reload_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  std::filesystem::path dir_;
};

TEST_F(ReloadFileTest, AnAdminTokenFileIsReadAgain) {
  const std::string token = write("token", "first\n");
  const Flags args = with({"--admin-token-file", token});
  const ServerConfig running = config_of(args);
  EXPECT_EQ(running.admin_token, "first");
  write("token", "second\n");
  auto plan = plan_reload(running, config_of(args));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->admin_token, std::optional<std::string>("second"));
  EXPECT_EQ(plan->applied, Flags{"--admin-token"});
  EXPECT_TRUE(plan->not_applied.empty());
}

TEST_F(ReloadFileTest, AConfigFileIsReadAgainAndSplitIntoLiveAndRestartSettings) {
  const std::string file = write("infera.yaml", "log-level: warn\nkv-overlap-weight: 1\n");
  const Flags args = with({"--config", file});
  const ServerConfig running = config_of(args);
  EXPECT_EQ(running.log_level, LogLevel::kWarn);
  write("infera.yaml", "log-level: debug\nkv-overlap-weight: 3\nport: 9000\n");
  auto plan = plan_reload(running, config_of(args));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->log_level, std::optional<LogLevel>(LogLevel::kDebug));
  EXPECT_EQ(plan->weights, (std::optional<OverlapWeights>(OverlapWeights{3.0, {}, {}})));
  EXPECT_EQ(plan->applied, (Flags{"--kv-overlap-weight", "--log-level"}));
  EXPECT_EQ(plan->not_applied, Flags{"--port"});
}

TEST(ReloadTest, StaticWorkersAreDiffedById) {
  const ServerConfig running =
      config_of({"--worker", "http://127.0.0.1:30000", "--worker", "http://127.0.0.1:30001",
             "--worker", "http://127.0.0.1:30002"});
  const ServerConfig next =
      config_of({"--worker", "http://127.0.0.1:30001,role=prefill", "--worker",
             "http://127.0.0.1:30002", "--worker", "http://127.0.0.1:30003"});
  auto plan = plan_reload(running, next);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->workers_added, Flags{"127.0.0.1:30003"});
  EXPECT_EQ(plan->workers_removed, Flags{"127.0.0.1:30000"});
  EXPECT_EQ(plan->workers_changed, Flags{"127.0.0.1:30001"});
  ASSERT_TRUE(plan->workers.has_value());
  ASSERT_EQ(plan->workers->size(), 3u);  // the new list, in its order
  EXPECT_EQ((*plan->workers)[0].id, "127.0.0.1:30001");
  EXPECT_EQ((*plan->workers)[0].role, discovery::Role::kPrefill);
  EXPECT_EQ(plan->applied, Flags{"--worker"});
  EXPECT_EQ(plan->running_after.workers, next.workers);
}

TEST(ReloadTest, ReorderedWorkersLeaveTheFleetAlone) {
  auto plan = plan_reload(config_of(kBase), config_of({"--worker", "http://127.0.0.1:30001", "--worker",
                                               "http://127.0.0.1:30000"}));
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->workers.has_value());
  EXPECT_TRUE(plan->workers_added.empty() && plan->workers_removed.empty());
}

TEST(ReloadTest, AWorkerThatDoesNotParseFailsTheWholeReload) {
  auto plan = plan_reload(config_of(kBase), config_of({"--worker", "not a url", "--log-level", "debug"}));
  EXPECT_FALSE(plan.ok());
}

TEST(ReloadTest, SwitchingDiscoveryBackendNeedsARestart) {
  const Flags etcd = {"--discovery-backend", "etcd", "--etcd-endpoint", "127.0.0.1:2379"};
  auto plan = plan_reload(config_of(etcd), config_of(kBase));
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->workers.has_value());
  EXPECT_EQ(plan->not_applied, (Flags{"--discovery-backend", "--etcd-endpoint", "--worker"}));
  // --worker beside etcd discovery cannot work: the reloaded config is refused as a start would be.
  bool help = false;
  std::string text;
  Flags more = infera::testing::with_dev_transports(etcd);
  more.insert(more.end(), {"--worker", "http://127.0.0.1:30000"});
  auto refused = config::parse_server_flags(more, &help, &text);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--discovery-backend static"), std::string::npos);
}

TEST(ReloadTest, EverythingElseIsListedAsNotAppliedAndKeptForTheNextReload) {
  const ServerConfig running = config_of(kBase);
  const ServerConfig next =
      config_of(with({"--port", "9000", "--io-threads", "4", "--kv-load-model", "prefill-aware",
                  "--router-policy", "round-robin", "--log-level", "warn"}));
  auto plan = plan_reload(running, next);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->applied, Flags{"--log-level"});
  EXPECT_EQ(plan->not_applied,
            (Flags{"--port", "--io-threads", "--router-policy", "--kv-load-model"}));
  // The running config keeps the old values, so the next reload names them again.
  EXPECT_EQ(plan->running_after.port, running.port);
  auto again = plan_reload(plan->running_after, next);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->applied.empty());
  EXPECT_EQ(again->not_applied, plan->not_applied);
}

TEST(ReloadTest, DrainDelayAndShutdownGraceAreTakenForTheNextShutdown) {
  auto plan = plan_reload(config_of(kBase),
                          config_of(with({"--drain-delay-s", "5", "--shutdown-grace-s", "7"})));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->applied, (Flags{"--shutdown-grace-s", "--drain-delay-s"}));
  EXPECT_EQ(plan->running_after.drain_delay_s, 5);
  EXPECT_EQ(plan->running_after.shutdown_grace_s, 7);
}

TEST(DifferingFlagsTest, NamesEachDifferenceByItsFlag) {
  EXPECT_EQ(differing_flags(config_of(kBase), config_of(with({"--kv-tier-credit", "gpu=1,cpu=0.5,disk=0",
                                                      "--max-queue", "3"}))),
            (Flags{"--kv-tier-credit", "--max-queue"}));
}

// A flag added to `infera server` must be added to the reload's comparison (reload.cc), as
// applied live or not: otherwise a reload that changes it could only say "other settings".
TEST(DifferingFlagsTest, ComparesEveryFlagOfTheServersHelp) {
  bool help = false;
  std::string text;
  ASSERT_TRUE(config::parse_server_flags(Flags{"--help"}, &help, &text).ok());
  const Flags known = compared_flags();
  std::istringstream lines(text);
  int flags = 0;
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("  --")) continue;
    const std::string flag = line.substr(2, line.find_first_of(" ,", 2) - 2);
    // --config names the file itself, which every config_of reads again.
    if (flag == "--help" || flag == "--config") continue;
    ++flags;
    EXPECT_TRUE(contains(known, flag))
        << flag << " is not compared on reload: add it to each_setting() in gateway/reload.cc";
  }
  EXPECT_GT(flags, 40);
}

}  // namespace
}  // namespace infera::gateway
