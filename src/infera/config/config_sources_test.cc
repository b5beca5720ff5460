#include "infera/config/config_sources.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "infera/config/flags.h"
#include "infera/config/server_config.h"

namespace infera::config {
namespace {

std::vector<std::string> args(std::initializer_list<const char*> a) {
  return std::vector<std::string>(a.begin(), a.end());
}

// A temporary directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("infera_config_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `name` and returns its path.
  std::string write(const std::string& name, std::string_view content) const {
    std::ofstream(path_ / name, std::ios::binary) << content;
    return (path_ / name).string();
  }

 private:
  std::filesystem::path path_;
};

using Strings = std::vector<std::string>;

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// A set shaped like a command's: each kind of target, an alias and a repeatable flag.
struct Values {
  std::string policy = "kv-aware";
  uint32_t block_size = 16;
  double weight = 1.0;
  bool enable = false;
  std::vector<std::string> workers;
  std::string token;
};

FlagSet flag_set(Values& v, ConfigSources sources) {
  FlagSet f("usage");
  f.add("--router-policy", &v.policy, "");
  f.add("--block-size|--page-size", &v.block_size, "");
  f.add("--kv-overlap-weight", &v.weight, "");
  f.add("--enable", &v.enable, "");
  f.add("--worker", &v.workers, "");
  f.add("--admin-token", &v.token, "");
  f.enable_config_sources(std::move(sources));
  return f;
}

ConfigSources env(std::initializer_list<const char*> entries) {
  return ConfigSources{std::vector<std::string>(entries.begin(), entries.end())};
}

// ---- the file ----

TEST(ConfigFileTest, KeysAreFlagNamesWithoutDashes) {
  TempDir dir;
  const std::string path = dir.write("c.yaml",
                                     "router-policy: round-robin\n"
                                     "block-size: 32\n"
                                     "kv-overlap-weight: 0.5\n"
                                     "enable: true\n"
                                     "worker: [http://a:1, http://b:2]\n");
  Values v;
  FlagSet f = flag_set(v, {});
  ASSERT_TRUE(f.parse(args({"--config", path.c_str()})).ok());
  EXPECT_EQ(v.policy, "round-robin");
  EXPECT_EQ(v.block_size, 32u);
  EXPECT_EQ(v.weight, 0.5);
  EXPECT_TRUE(v.enable);
  EXPECT_EQ(v.workers, (Strings{"http://a:1", "http://b:2"}));
}

TEST(ConfigFileTest, AnAliasIsAKeyToo) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "page-size: 64\n");
  Values v;
  FlagSet f = flag_set(v, {});
  ASSERT_TRUE(f.parse(Strings{"--config=" + path}).ok());
  EXPECT_EQ(v.block_size, 64u);
  EXPECT_TRUE(f.was_set("--block-size"));
}

TEST(ConfigFileTest, JsonParsesAsYaml) {
  TempDir dir;
  const std::string path = dir.write(
      "c.json",
      R"({"router-policy": "random", "worker": ["http://a:1,kv=tcp://a:5557", "http://b:2"],
                    "kv-overlap-weight": 0.25, "enable": false, "page-size": 8})");
  Values v;
  v.enable = true;
  FlagSet f = flag_set(v, {});
  ASSERT_TRUE(f.parse(args({"--config", path.c_str()})).ok());
  EXPECT_EQ(v.policy, "random");
  EXPECT_EQ(v.workers, (Strings{"http://a:1,kv=tcp://a:5557", "http://b:2"}));
  EXPECT_EQ(v.weight, 0.25);
  EXPECT_FALSE(v.enable);
  EXPECT_EQ(v.block_size, 8u);
}

TEST(ConfigFileTest, BlockSequenceKeepsCommasInsideAWorkerSpec) {
  TempDir dir;
  const std::string path = dir.write("c.yaml",
                                     "worker:\n"
                                     "  - http://a:1,kv=tcp://a:5557,role=prefill\n"
                                     "  - http://b:2\n");
  Values v;
  FlagSet f = flag_set(v, {});
  ASSERT_TRUE(f.parse(args({"--config", path.c_str()})).ok());
  EXPECT_EQ(v.workers, (Strings{"http://a:1,kv=tcp://a:5557,role=prefill", "http://b:2"}));
}

TEST(ConfigFileTest, AScalarForARepeatableFlagIsAListOfOne) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "worker: http://a:1\n");
  Values v;
  FlagSet f = flag_set(v, {});
  ASSERT_TRUE(f.parse(args({"--config", path.c_str()})).ok());
  EXPECT_EQ(v.workers, (Strings{"http://a:1"}));
}

TEST(ConfigFileTest, UnknownKeyNamesTheFileTheKeyAndTheLine) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "router-policy: random\n\nrouter-polcy: x\n");
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "config file " + path)) << s.message();
  EXPECT_TRUE(contains(s.message(), "key 'router-polcy' (line 3)")) << s.message();
  EXPECT_TRUE(contains(s.message(), "not a flag of this command")) << s.message();
}

TEST(ConfigFileTest, KeysWithDashesAreUnknown) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "--router-policy: random\n");
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "without the leading --")) << s.message();
}

TEST(ConfigFileTest, AFileCannotNameAnotherFile) {
  TempDir dir;
  const std::string other = dir.write("other.yaml", "router-policy: random\n");
  const std::string path = dir.write("c.yaml", "config: " + other + "\n");
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "key 'config'")) << s.message();
  EXPECT_EQ(v.policy, "kv-aware");
}

TEST(ConfigFileTest, MapWhereAScalarBelongsIsAnError) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "router-policy:\n  name: random\n");
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "key 'router-policy' (line 1) is a map")) << s.message();
}

TEST(ConfigFileTest, SequenceForAOneValueFlagIsAnError) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "router-policy: [random, kv-aware]\n");
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(),
                       "key 'router-policy' (line 1) is a list, but "
                       "--router-policy takes one value"))
      << s.message();
}

TEST(ConfigFileTest, NestedListInARepeatableFlagIsAnError) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "worker:\n  - http://a:1\n  - [http://b:2]\n");
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "key 'worker' (line 1): an item (line 3) is a list"))
      << s.message();
}

TEST(ConfigFileTest, KeyWithoutAValueIsAnError) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "admin-token:\n");
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "key 'admin-token' (line 1) has no value")) << s.message();
}

TEST(ConfigFileTest, AQuotedNullIsAString) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "admin-token: \"null\"\n");
  Values v;
  FlagSet f = flag_set(v, {});
  ASSERT_TRUE(f.parse(args({"--config", path.c_str()})).ok());
  EXPECT_EQ(v.token, "null");
}

TEST(ConfigFileTest, ValueOfTheWrongTypeNamesTheKeyAndLine) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "router-policy: random\nblock-size: big\n");
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "config file " + path +
                                        ": key 'block-size' (line 2): 'big' "
                                        "is not a valid integer in range"))
      << s.message();
  const std::string bad_bool = dir.write("b.yaml", "enable: maybe\n");
  Values w;
  FlagSet g = flag_set(w, {});
  const Status b = g.parse(args({"--config", bad_bool.c_str()}));
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(contains(b.message(), "key 'enable' (line 1): 'maybe' is not a boolean"))
      << b.message();
}

TEST(ConfigFileTest, TwoKeysForOneFlagAreAnError) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "block-size: 16\npage-size: 32\n");
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(),
                       "key 'page-size' (line 2) sets the same flag as key "
                       "'block-size' (line 1)"))
      << s.message();
  const std::string twice = dir.write("t.yaml", "enable: true\nenable: false\n");
  Values w;
  FlagSet g = flag_set(w, {});
  EXPECT_FALSE(g.parse(args({"--config", twice.c_str()})).ok());
}

TEST(ConfigFileTest, MissingFileNamesIt) {
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", "/nonexistent/infera.yaml"}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "config file /nonexistent/infera.yaml")) << s.message();
  EXPECT_TRUE(contains(s.message(), "No such file")) << s.message();
}

TEST(ConfigFileTest, ADirectoryIsUnreadable) {
  TempDir dir;
  const std::string path = std::filesystem::path(dir.write("x", "")).parent_path().string();
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "config file " + path)) << s.message();
}

TEST(ConfigFileTest, InvalidYamlNamesTheFileAndLine) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "router-policy: random\nworker: [http://a:1\n");
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "config file " + path + ": not valid YAML (line"))
      << s.message();
  EXPECT_EQ(v.policy, "kv-aware");  // nothing of a bad file is applied
}

TEST(ConfigFileTest, TopLevelMustBeAMap) {
  TempDir dir;
  for (const char* text : {"- router-policy\n", "just-a-word\n"}) {
    const std::string path = dir.write("c.yaml", text);
    Values v;
    FlagSet f = flag_set(v, {});
    const Status s = f.parse(args({"--config", path.c_str()}));
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_TRUE(contains(s.message(), "top level must be a map")) << s.message();
  }
}

TEST(ConfigFileTest, MoreThanOneDocumentIsAnError) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "enable: true\n---\nenable: false\n");
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "2 YAML documents")) << s.message();
}

TEST(ConfigFileTest, EmptyFileOrOnlyCommentsSetsNothing) {
  TempDir dir;
  for (const char* text : {"", "# nothing yet\n"}) {
    const std::string path = dir.write("c.yaml", text);
    Values v;
    FlagSet f = flag_set(v, {});
    ASSERT_TRUE(f.parse(args({"--config", path.c_str()})).ok()) << text;
    EXPECT_FALSE(f.was_set("--router-policy"));
    EXPECT_TRUE(f.was_set("--config"));
  }
}

TEST(ConfigFileTest, LargerThanTheBoundIsAnError) {
  TempDir dir;
  std::string text = "admin-token: ";
  text += std::string(kMaxConfigFileBytes, 'x');
  const std::string path = dir.write("c.yaml", text);
  Values v;
  FlagSet f = flag_set(v, {});
  const Status s = f.parse(args({"--config", path.c_str()}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "larger than 1048576 bytes")) << s.message();
  // Exactly at the bound is fine.
  const std::string at = dir.write("at.yaml", text.substr(0, kMaxConfigFileBytes));
  Values w;
  FlagSet g = flag_set(w, {});
  EXPECT_TRUE(g.parse(args({"--config", at.c_str()})).ok());
}

TEST(ConfigFileTest, InferaConfigVariableNamesTheFile) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "router-policy: random\n");
  const std::string entry = "INFERA_CONFIG=" + path;
  Values v;
  FlagSet f = flag_set(v, ConfigSources{{entry}});
  ASSERT_TRUE(f.parse(args({})).ok());
  EXPECT_EQ(v.policy, "random");
  // --config on the command line wins over INFERA_CONFIG; an empty one reads no file at all.
  const std::string other = dir.write("o.yaml", "router-policy: least-loaded\n");
  Values w;
  FlagSet g = flag_set(w, ConfigSources{{entry}});
  ASSERT_TRUE(g.parse(args({"--config", other.c_str()})).ok());
  EXPECT_EQ(w.policy, "least-loaded");
  Values n;
  FlagSet h = flag_set(n, ConfigSources{{entry}});
  ASSERT_TRUE(h.parse(args({"--config="})).ok());
  EXPECT_EQ(n.policy, "kv-aware");
}

// ---- the environment ----

TEST(ConfigEnvironmentTest, NamesAreUpperCaseWithUnderscores) {
  EXPECT_EQ(env_name("--router-policy"), "INFERA_ROUTER_POLICY");
  EXPECT_EQ(env_name("--kv-overlap-weight"), "INFERA_KV_OVERLAP_WEIGHT");
  EXPECT_EQ(env_name("--admin-token-file"), "INFERA_ADMIN_TOKEN_FILE");
}

TEST(ConfigEnvironmentTest, KnownVariablesSetFlagsAndOthersAreIgnored) {
  Values v;
  FlagSet f = flag_set(
      v, env({"PATH=/usr/bin", "INFERA_ROUTER_POLICY=random", "INFERA_KV_OVERLAP_WEIGHT=2.5",
              "INFERA_ENABLE=true", "INFERA_ADMIN_TOKEN=abc=def", "INFERA_SOMETHING_ELSE=1",
              "INFERA_ROUTER_POLICYX=no", "ROUTER_POLICY=no"}));
  ASSERT_TRUE(f.parse(args({})).ok());
  EXPECT_EQ(v.policy, "random");
  EXPECT_EQ(v.weight, 2.5);
  EXPECT_TRUE(v.enable);
  EXPECT_EQ(v.token, "abc=def");
  EXPECT_TRUE(f.was_set("--admin-token"));
  EXPECT_FALSE(f.was_set("--block-size"));
}

TEST(ConfigEnvironmentTest, AnAliasHasItsOwnVariable) {
  Values v;
  FlagSet f = flag_set(v, env({"INFERA_PAGE_SIZE=128"}));
  ASSERT_TRUE(f.parse(args({})).ok());
  EXPECT_EQ(v.block_size, 128u);
}

TEST(ConfigEnvironmentTest, TwoAliasesSetIsAnErrorNamingBoth) {
  Values v;
  FlagSet f = flag_set(v, env({"INFERA_PAGE_SIZE=128", "INFERA_BLOCK_SIZE=16"}));
  const Status s = f.parse(args({}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "INFERA_BLOCK_SIZE")) << s.message();
  EXPECT_TRUE(contains(s.message(), "INFERA_PAGE_SIZE")) << s.message();
}

TEST(ConfigEnvironmentTest, RepeatableValueSplitsOnWhitespaceNeverCommas) {
  Values v;
  FlagSet f = flag_set(
      v,
      env({"INFERA_WORKER=http://a:1,kv=tcp://a:5557,role=prefill\n  http://b:2\thttp://c:3 \n"}));
  ASSERT_TRUE(f.parse(args({})).ok());
  EXPECT_EQ(v.workers,
            (Strings{"http://a:1,kv=tcp://a:5557,role=prefill", "http://b:2", "http://c:3"}));
}

TEST(ConfigEnvironmentTest, EmptyValueCountsAsNotSet) {
  Values v;
  FlagSet f = flag_set(v, env({"INFERA_BLOCK_SIZE=", "INFERA_WORKER= \n"}));
  ASSERT_TRUE(f.parse(args({})).ok());
  EXPECT_EQ(v.block_size, 16u);
  EXPECT_FALSE(f.was_set("--block-size"));
  EXPECT_FALSE(f.was_set("--worker"));
}

TEST(ConfigEnvironmentTest, BadValueNamesTheVariable) {
  Values v;
  FlagSet f = flag_set(v, env({"INFERA_BLOCK_SIZE=tcp://10.0.0.1:8000"}));
  const Status s = f.parse(args({}));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(),
                       "environment variable INFERA_BLOCK_SIZE: 'tcp://10.0.0.1:8000' "
                       "is not a valid integer in range"))
      << s.message();
}

TEST(ConfigEnvironmentTest, FirstEntryOfANameWins) {
  EXPECT_EQ(find_env(Strings{"INFERA_X=1", "INFERA_X=2"}, "INFERA_X"), "1");
  EXPECT_EQ(find_env(Strings{"INFERA_XY=1"}, "INFERA_X"), std::nullopt);
  EXPECT_EQ(find_env(Strings{"INFERA_X"}, "INFERA_X"), std::nullopt);
  EXPECT_EQ(find_env(Strings{"INFERA_X="}, "INFERA_X"), "");
}

// ---- precedence ----

TEST(ConfigPrecedenceTest, CommandLineBeatsEnvironmentBeatsFileBeatsDefaults) {
  TempDir dir;
  const std::string path = dir.write("c.yaml",
                                     "router-policy: from-file\n"
                                     "block-size: 32\n"
                                     "kv-overlap-weight: 0.5\n");
  Values v;
  FlagSet f = flag_set(v, env({"INFERA_ROUTER_POLICY=from-env", "INFERA_BLOCK_SIZE=64"}));
  ASSERT_TRUE(f.parse(args({"--config", path.c_str(), "--router-policy", "from-flag"})).ok());
  EXPECT_EQ(v.policy, "from-flag");  // all three: the command line
  EXPECT_EQ(v.block_size, 64u);      // env and file: the environment
  EXPECT_EQ(v.weight, 0.5);          // the file alone
  EXPECT_FALSE(v.enable);            // nobody: the default
  EXPECT_FALSE(f.was_set("--enable"));
}

TEST(ConfigPrecedenceTest, TheHighestSourceOfAListReplacesItWhole) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "worker: [http://f:1, http://f:2]\n");
  {
    Values v;
    FlagSet f = flag_set(v, {});
    ASSERT_TRUE(f.parse(args({"--config", path.c_str()})).ok());
    EXPECT_EQ(v.workers, (Strings{"http://f:1", "http://f:2"}));
  }
  {
    Values v;
    FlagSet f = flag_set(v, env({"INFERA_WORKER=http://e:1"}));
    ASSERT_TRUE(f.parse(args({"--config", path.c_str()})).ok());
    EXPECT_EQ(v.workers, (Strings{"http://e:1"}));
  }
  {
    Values v;
    FlagSet f = flag_set(v, env({"INFERA_WORKER=http://e:1 http://e:2"}));
    ASSERT_TRUE(
        f.parse(args({"--worker", "http://c:1", "--config", path.c_str(), "--worker=http://c:2"}))
            .ok());
    EXPECT_EQ(v.workers, (Strings{"http://c:1", "http://c:2"}));
  }
}

TEST(ConfigPrecedenceTest, AnEmptyListInTheFileStillCountsAsSet) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "worker: []\n");
  Values v;
  v.workers = {"built-in"};
  FlagSet f = flag_set(v, {});
  ASSERT_TRUE(f.parse(args({"--config", path.c_str()})).ok());
  EXPECT_TRUE(v.workers.empty());
  EXPECT_TRUE(f.was_set("--worker"));
}

TEST(ConfigPrecedenceTest, HelpSkipsTheFileAndTheEnvironment) {
  Values v;
  FlagSet f = flag_set(v, env({"INFERA_BLOCK_SIZE=nope"}));
  ASSERT_TRUE(f.parse(args({"--config", "/nonexistent.yaml", "--help"})).ok());
  EXPECT_TRUE(f.help_requested());
  EXPECT_TRUE(contains(f.help(), "--config FILE")) << f.help();
  EXPECT_TRUE(contains(f.help(), "INFERA_CONFIG")) << f.help();
}

TEST(ConfigPrecedenceTest, WithoutEnablingThereIsNoConfigFlagAndNoEnvironment) {
  std::string policy = "kv-aware";
  FlagSet f("usage");
  f.add("--router-policy", &policy, "");
  EXPECT_FALSE(f.parse(args({"--config", "/x.yaml"})).ok());
  EXPECT_FALSE(contains(f.help(), "--config"));
}

// The launchers collect unknown arguments for the engine: those still pass through, while the
// file and the environment reach only infera's own flags.
TEST(ConfigPrecedenceTest, PassThroughKeepsUnknownArgumentsButNotUnknownKeys) {
  TempDir dir;
  const std::string good = dir.write("c.yaml", "router-policy: random\n");
  Values v;
  FlagSet f = flag_set(v, env({"INFERA_GPU_MEMORY_UTILIZATION=0.5"}));
  Strings rest;
  ASSERT_TRUE(f.parse(args({"--gpu-memory-utilization", "0.9", "--config", good.c_str(),
                            "--enforce-eager"}),
                      &rest)
                  .ok());
  EXPECT_EQ(v.policy, "random");
  EXPECT_EQ(rest, (Strings{"--gpu-memory-utilization", "0.9", "--enforce-eager"}));

  const std::string bad = dir.write("b.yaml", "gpu-memory-utilization: 0.9\n");
  Values w;
  FlagSet g = flag_set(w, {});
  Strings rest2;
  const Status s = g.parse(args({"--config", bad.c_str()}), &rest2);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "key 'gpu-memory-utilization'")) << s.message();
  EXPECT_TRUE(rest2.empty());
}

// ---- token files ----

TEST(TokenFileTest, TrailingWhitespaceIsTrimmed) {
  TempDir dir;
  EXPECT_EQ(*read_token_file(dir.write("t", "s3cr3t\n")), "s3cr3t");
  EXPECT_EQ(*read_token_file(dir.write("t", "s3cr3t \r\n\n")), "s3cr3t");
  EXPECT_EQ(*read_token_file(dir.write("t", "s3cr3t")), "s3cr3t");
}

TEST(TokenFileTest, EmptyInnerWhitespaceMissingOrOversizedIsAnError) {
  TempDir dir;
  for (const char* text : {"", "\n", "  \n"}) {
    const Result<std::string> t = read_token_file(dir.write("t", text));
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(contains(t.status().message(), "is empty")) << t.status().message();
  }
  EXPECT_FALSE(read_token_file(dir.write("t", "two\nlines\n")).ok());
  EXPECT_FALSE(read_token_file(dir.write("t", " leading")).ok());
  const Result<std::string> missing = read_token_file("/nonexistent/token");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.status().message(), "/nonexistent/token"));
  const Result<std::string> big =
      read_token_file(dir.write("t", std::string(kMaxTokenFileBytes + 1, 'x')));
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(contains(big.status().message(), "larger than")) << big.status().message();
}

// ---- infera server ----

Result<ServerConfig> parse_server(const Strings& a, ConfigSources sources = {}) {
  bool help = false;
  std::string text;
  return parse_server_flags(a, &help, &text, sources);
}

TEST(ServerConfigSourcesTest, TheDocumentedExampleFileParses) {
  TempDir dir;
  // The example of docs/config-sources.md.
  const std::string path = dir.write("infera.yaml",
                                     "port: 8080\n"
                                     "router-policy: kv-aware\n"
                                     "router-tokenizer-path: Qwen/Qwen3-0.6B\n"
                                     "kv-overlap-weight: 0.5\n"
                                     "block-size: 16\n"
                                     "worker:\n"
                                     "  - http://10.0.0.11:8000,kv=tcp://10.0.0.11:5557\n"
                                     "  - http://10.0.0.12:8000,kv=tcp://10.0.0.12:5557\n"
                                     "max-queue: 1024\n"
                                     "log-level: warn\n");
  auto c = parse_server({"--config", path}, env({"INFERA_PORT=9090"}));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->port, 9090u);
  EXPECT_EQ(c->router_policy, "kv-aware");
  EXPECT_EQ(c->tokenizer_path, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(c->kv_overlap_weight, 0.5);
  EXPECT_EQ(c->workers.size(), 2u);
  EXPECT_EQ(c->max_queue, 1024u);
  EXPECT_EQ(c->log_level, LogLevel::kWarn);
}

TEST(ServerConfigSourcesTest, ChoiceWordsAndValidationApplyToEverySource) {
  auto bad_level = parse_server({"--worker", "http://a:1"}, env({"INFERA_LOG_LEVEL=loud"}));
  ASSERT_FALSE(bad_level.ok());
  auto no_workers = parse_server({"--discovery-backend", "static"}, env({"INFERA_WORKER= "}));
  ASSERT_FALSE(no_workers.ok());
  EXPECT_TRUE(contains(no_workers.status().message(), "needs at least one --worker"));
  auto from_env = parse_server({}, env({"INFERA_WORKER=http://a:1 http://b:2"}));
  ASSERT_TRUE(from_env.ok()) << from_env.status().to_string();
  EXPECT_EQ(from_env->workers, (Strings{"http://a:1", "http://b:2"}));
}

TEST(ServerConfigSourcesTest, AdminTokenFileFillsTheTokenAndKeepsThePath) {
  TempDir dir;
  const std::string token = dir.write("token", "hunter2\n");
  auto c = parse_server({"--worker", "http://a:1", "--admin-token-file", token});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->admin_token, "hunter2");
  EXPECT_EQ(c->admin_token_file, token);
  // From the environment too.
  auto e =
      parse_server({"--worker", "http://a:1"}, ConfigSources{{"INFERA_ADMIN_TOKEN_FILE=" + token}});
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->admin_token, "hunter2");
}

TEST(ServerConfigSourcesTest, ApiKeysComeFromTheFlagAndTheFileTogether) {
  TempDir dir;
  const std::string keys = dir.write("keys", "# team a\nsk-a1\n\n  sk-a2  \n# team b\nsk-b\n");
  auto c = parse_server({"--worker", "http://a:1", "--api-key", "sk-flag", "--api-key-file", keys});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->api_keys, (Strings{"sk-flag", "sk-a1", "sk-a2", "sk-b"}));
  EXPECT_EQ(c->api_key_file, keys);
  auto none = parse_server({"--worker", "http://a:1", "--api-key-file", dir.write("none", "# nothing\n\n")});
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(contains(none.status().message(), "holds no key")) << none.status().message();
  auto inner = parse_server({"--worker", "http://a:1", "--api-key-file", dir.write("bad", "ok\nsk a\n")});
  ASSERT_FALSE(inner.ok());
  EXPECT_TRUE(contains(inner.status().message(), "line 2")) << inner.status().message();
  EXPECT_FALSE(parse_server({"--worker", "http://a:1", "--api-key", ""}).ok());
}

TEST(ServerConfigSourcesTest, AllowedOriginsAreSplitAndChecked) {
  auto c = parse_server({"--worker", "http://a:1", "--allowed-origins",
                         "https://app.example,http://localhost:3000", "--allowed-origins", "*"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->allowed_origins, (Strings{"https://app.example", "http://localhost:3000", "*"}));
  for (const char* bad : {"app.example", "https://app.example/path", "ftp://x"}) {
    auto r = parse_server({"--worker", "http://a:1", "--allowed-origins", bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(contains(r.status().message(), "--allowed-origins")) << r.status().message();
  }
}

TEST(ServerConfigSourcesTest, TlsCertificateAndKeyGoTogether) {
  auto both = parse_server({"--worker", "https://a:1", "--ssl-certfile", "/tls/crt",
                            "--ssl-keyfile", "/tls/key", "--upstream-ca-file", "/tls/ca"});
  ASSERT_TRUE(both.ok()) << both.status().to_string();
  EXPECT_EQ(both->ssl_certfile, "/tls/crt");
  EXPECT_EQ(both->ssl_keyfile, "/tls/key");
  EXPECT_EQ(both->upstream_ca_file, "/tls/ca");
  for (const char* alone : {"--ssl-certfile", "--ssl-keyfile"}) {
    auto r = parse_server({"--worker", "http://a:1", alone, "/tls/x"});
    ASSERT_FALSE(r.ok()) << alone;
    EXPECT_TRUE(contains(r.status().message(), "--ssl-certfile and --ssl-keyfile go together"))
        << r.status().message();
  }
  // From the environment, as every flag.
  auto e = parse_server({"--worker", "http://a:1"},
                        env({"INFERA_SSL_CERTFILE=/tls/crt", "INFERA_SSL_KEYFILE=/tls/key"}));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->ssl_keyfile, "/tls/key");
}

// A Service named `infera` gives every pod INFERA_PORT=tcp://...: that is not --port.
TEST(ServerConfigSourcesTest, KubernetesServiceLinksAreNotPortSettings) {
  auto linked = parse_server({"--worker", "http://a:1"},
                             env({"INFERA_PORT=tcp://10.0.0.1:8000", "INFERA_ADMIN_PORT=tcp://10.0.0.2:9000",
                                  "INFERA_PORT_8000_TCP=tcp://10.0.0.1:8000"}));
  ASSERT_TRUE(linked.ok()) << linked.status().message();
  EXPECT_EQ(linked->port, 8000u);
  EXPECT_EQ(linked->admin_port, -1);
  auto real = parse_server({"--worker", "http://a:1"}, env({"INFERA_PORT=9001"}));
  ASSERT_TRUE(real.ok()) << real.status().message();
  EXPECT_EQ(real->port, 9001u);
}

TEST(ServerConfigSourcesTest, AdminTokenFileRules) {
  TempDir dir;
  const std::string token = dir.write("token", "hunter2\n");
  const std::string empty = dir.write("empty", "\n");
  auto both =
      parse_server({"--worker", "http://a:1", "--admin-token", "x", "--admin-token-file", token});
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(contains(both.status().message(), "not both")) << both.status().message();
  // Both, from different sources, is still both.
  auto mixed = parse_server({"--worker", "http://a:1", "--admin-token-file", token},
                            env({"INFERA_ADMIN_TOKEN=x"}));
  EXPECT_FALSE(mixed.ok());
  auto blank = parse_server({"--worker", "http://a:1", "--admin-token-file", empty});
  ASSERT_FALSE(blank.ok());
  EXPECT_TRUE(
      contains(blank.status().message(), "--admin-token-file: token file " + empty + " is empty"))
      << blank.status().message();
  auto missing = parse_server({"--worker", "http://a:1", "--admin-token-file", "/nonexistent/t"});
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.status().message(), "/nonexistent/t"));
}

// What a SIGHUP reload relies on: the same arguments, parsed again, read the files anew.
TEST(ServerConfigSourcesTest, ParsingAgainRereadsTheConfigAndTokenFiles) {
  TempDir dir;
  const std::string path = dir.write("c.yaml", "worker: [http://a:1]\nmax-queue: 10\n");
  const std::string token = dir.write("token", "first\n");
  const Strings a = {"--config", path, "--admin-token-file", token};
  auto before = parse_server(a);
  ASSERT_TRUE(before.ok()) << before.status().to_string();
  dir.write("c.yaml", "worker: [http://a:1, http://b:2]\nmax-queue: 20\n");
  dir.write("token", "second\n");
  auto after = parse_server(a);
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_EQ(before->max_queue, 10u);
  EXPECT_EQ(after->max_queue, 20u);
  EXPECT_EQ(after->workers.size(), 2u);
  EXPECT_EQ(before->admin_token, "first");
  EXPECT_EQ(after->admin_token, "second");
}

TEST(ServerConfigSourcesTest, HelpListsConfigAndAdminTokenFile) {
  bool help = false;
  std::string text;
  auto c = parse_server_flags(Strings{"--help"}, &help, &text, ConfigSources{});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(help);
  EXPECT_TRUE(contains(text, "--config FILE")) << text;
  EXPECT_TRUE(contains(text, "--admin-token-file PATH")) << text;
  EXPECT_TRUE(contains(text, "INFERA_ADMIN_TOKEN_FILE")) << text;
}

}  // namespace
}  // namespace infera::config
