#include "infera/tokenizer/model_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace infera::tokenizer {
namespace {

namespace fs = std::filesystem;

// A fresh temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "infera-model-dir-XXXXXX").string();
    const char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Sets an environment variable for the scope of a test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

void touch(const fs::path& p, const std::string& content = "{}") {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << content;
}

// models--ORG--NAME/snapshots/<rev>/tokenizer.json inside `hub`, optionally with refs/main.
fs::path make_snapshot(const fs::path& hub, const std::string& repo, const std::string& rev) {
  const fs::path dir = hub / repo / "snapshots" / rev;
  touch(dir / "tokenizer.json");
  return dir;
}

TEST(ModelDirTest, ADirectoryWithTokenizerJsonIsUsedAsIs) {
  TempDir tmp;
  touch(tmp.path() / "tokenizer.json");
  const auto r = resolve_model_dir(tmp.path().string());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, tmp.path());
  const auto file = resolve_model_dir((tmp.path() / "tokenizer.json").string());
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*file, tmp.path());
}

TEST(ModelDirTest, ADirectoryWithoutTokenizerJsonIsAnErrorNamingIt) {
  TempDir tmp;
  const auto r = resolve_model_dir(tmp.path().string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(tmp.path().string()), std::string::npos);
}

TEST(ModelDirTest, HubIdResolvesToTheSnapshotNamedByRefsMain) {
  TempDir tmp;
  const ScopedEnv cache("HF_HUB_CACHE", tmp.path().string());
  make_snapshot(tmp.path(), "models--Qwen--Qwen3-0.6B", "aaaa");
  const fs::path main = make_snapshot(tmp.path(), "models--Qwen--Qwen3-0.6B", "bbbb");
  make_snapshot(tmp.path(), "models--Qwen--Qwen3-0.6B", "cccc");
  touch(tmp.path() / "models--Qwen--Qwen3-0.6B" / "refs" / "main", "bbbb\n");
  const auto r = resolve_model_dir("Qwen/Qwen3-0.6B");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, main);
}

TEST(ModelDirTest, WithoutRefsMainASnapshotHoldingTheFileIsUsed) {
  TempDir tmp;
  const ScopedEnv cache("HF_HUB_CACHE", tmp.path().string());
  fs::create_directories(tmp.path() / "models--org--name" / "snapshots" / "empty");
  const fs::path only = make_snapshot(tmp.path(), "models--org--name", "rev1");
  const auto r = resolve_model_dir("org/name");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, only);
}

TEST(ModelDirTest, HfHomeIsUsedWhenHubCacheIsUnset) {
  TempDir tmp;
  const ScopedEnv cache("HF_HUB_CACHE", std::nullopt);
  const ScopedEnv home("HF_HOME", tmp.path().string());
  const fs::path snap = make_snapshot(tmp.path() / "hub", "models--meta-llama--Llama-3.1-8B", "r");
  const auto r = resolve_model_dir("meta-llama/Llama-3.1-8B");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, snap);
}

TEST(ModelDirTest, HubCacheTakesPrecedenceOverHfHome) {
  TempDir a, b;
  const ScopedEnv cache("HF_HUB_CACHE", a.path().string());
  const ScopedEnv home("HF_HOME", b.path().string());
  const fs::path want = make_snapshot(a.path(), "models--x--y", "r");
  make_snapshot(b.path() / "hub", "models--x--y", "r");
  const auto r = resolve_model_dir("x/y");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, want);
}

TEST(ModelDirTest, UnknownIdIsAnErrorListingWhereItLooked) {
  TempDir tmp;
  const ScopedEnv cache("HF_HUB_CACHE", tmp.path().string());
  const auto r = resolve_model_dir("nobody/nothing");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("nobody/nothing"), std::string::npos) << m;
  EXPECT_NE(m.find((tmp.path() / "models--nobody--nothing" / "snapshots").string()),
            std::string::npos)
      << m;
}

TEST(ModelDirTest, PathsThatAreNotIdsAreNotLookedUpInTheCache) {
  const auto r = resolve_model_dir("/no/such/dir/at/all");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/no/such/dir/at/all"), std::string::npos);
  EXPECT_FALSE(resolve_model_dir("").ok());
  EXPECT_FALSE(resolve_model_dir("../escape/attempt").ok());
}

}  // namespace
}  // namespace infera::tokenizer
