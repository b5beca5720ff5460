#include "infera/tokenizer/model_dir.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

namespace infera::tokenizer {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kTokenizerFile = "tokenizer.json";

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);  // follows the hub's symlinks into blobs/
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

std::string env(const char* name) {
  // Nothing in the process calls setenv or putenv, so no thread can change the environment.
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  return v == nullptr ? std::string() : std::string(v);
}

// The hub cache root, as huggingface_hub computes it.
fs::path hub_cache_root() {
  if (const std::string v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (const std::string v = env("HF_HOME"); !v.empty()) return fs::path(v) / "hub";
  if (const std::string v = env("XDG_CACHE_HOME"); !v.empty()) {
    return fs::path(v) / "huggingface" / "hub";
  }
  return fs::path(env("HOME")) / ".cache" / "huggingface" / "hub";
}

// "ORG/NAME" or "NAME": letters, digits, '-', '_', '.', at most one '/', no "..".
bool looks_like_hub_id(std::string_view id) {
  if (id.empty() || id.front() == '/' || id.back() == '/' || id.front() == '.') return false;
  if (id.find("..") != std::string_view::npos || id.find("--") != std::string_view::npos) return false;
  size_t slashes = 0;
  for (const char c : id) {
    if (c == '/') {
      ++slashes;
    } else if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return slashes <= 1;
}

std::string join(const std::vector<std::string>& looked) {
  std::string out;
  for (const std::string& s : looked) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

std::string read_ref(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Result<fs::path> resolve_model_dir(std::string_view path_or_id) {
  if (path_or_id.empty()) return invalid_argument("empty tokenizer path or Hugging Face id");
  std::vector<std::string> looked;
  const fs::path direct(path_or_id);
  if (is_dir(direct)) {
    if (is_file(direct / kTokenizerFile)) return direct;
    return not_found("no tokenizer.json in directory " + direct.string());
  }
  if (is_file(direct) && direct.filename() == kTokenizerFile) {
    return direct.has_parent_path() ? direct.parent_path() : fs::path(".");
  }
  looked.push_back(direct.string());
  if (!looks_like_hub_id(path_or_id)) {
    return not_found("tokenizer " + std::string(path_or_id) + " not found (not a directory and " +
                     "not a Hugging Face id); looked at " + join(looked));
  }
  std::string repo = "models--" + std::string(path_or_id);
  for (size_t pos = repo.find('/'); pos != std::string::npos; pos = repo.find('/', pos + 2)) {
    repo.replace(pos, 1, "--");
  }
  const fs::path repo_dir = hub_cache_root() / repo;
  const fs::path snapshots = repo_dir / "snapshots";
  // refs/main names the revision the hub client last resolved for "main".
  const fs::path ref = repo_dir / "refs" / "main";
  if (is_file(ref)) {
    const std::string rev = read_ref(ref);
    if (!rev.empty() && rev.find('/') == std::string::npos && rev != "." && rev != "..") {
      const fs::path dir = snapshots / rev;
      if (is_file(dir / kTokenizerFile)) return dir;
      looked.push_back((dir / kTokenizerFile).string() + " (from refs/main)");
    }
  }
  // Otherwise the most recently written snapshot that has the file (ties: greatest name).
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> candidates;
  if (is_dir(snapshots)) {
    for (fs::directory_iterator it(snapshots, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path file = it->path() / kTokenizerFile;
      if (!is_file(file)) continue;
      std::error_code tec;
      const fs::file_time_type t = fs::last_write_time(file, tec);
      candidates.emplace_back(tec ? fs::file_time_type::min() : t, it->path());
    }
  }
  if (!candidates.empty()) {
    std::sort(candidates.begin(), candidates.end());
    return candidates.back().second;
  }
  looked.push_back((snapshots / "*" / kTokenizerFile).string());
  return not_found("tokenizer for Hugging Face id " + std::string(path_or_id) +
                   " not found in the local cache (offline); looked at " + join(looked));
}

}  // namespace infera::tokenizer
