// The configuration sources beneath the command line, for every infera command: a `--config FILE`
// (YAML, or JSON, which YAML parses) whose top-level keys are flag names without the dashes, and
// INFERA_<FLAG> environment variables. FlagSet::enable_config_sources applies them; precedence is
// command line > environment > file > built-in defaults, and for a repeatable flag the highest
// source that sets it replaces the lower ones' whole list. This header holds the readers, which
// turn a source into settings without assigning anything. Startup (and reload) only, one thread.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"

namespace infera::config {

// What parse() reads besides the arguments. `environment` holds "NAME=VALUE" entries, the form of
// environ; only INFERA_<FLAG> names of the command's own flags (and INFERA_CONFIG) are read, any
// other variable is ignored, since the environment is shared with everything else.
struct ConfigSources {
  std::vector<std::string> environment;
};
// This process's environment (a copy of environ, taken now).
ConfigSources process_config_sources();

// Largest --config file read (bytes); a bigger one is a startup error.
inline constexpr size_t kMaxConfigFileBytes = size_t{1} << 20;
// Largest token file read (bytes), e.g. --admin-token-file.
inline constexpr size_t kMaxTokenFileBytes = size_t{64} << 10;

// What a reader needs to know of one flag.
struct FlagShape {
  std::vector<std::string> names;  // "--block-size", "--page-size": every alias
  bool repeatable = false;         // a list (--worker): takes a sequence, env splits on whitespace
};

// What one source says about one flag, before it is parsed into the flag's type.
struct Setting {
  size_t flag = 0;                  // index into the shapes given to the reader
  std::vector<std::string> values;  // one for a scalar flag; the whole list for a repeatable one
  // Names the source for error messages: "config file /etc/infera.yaml: key 'port' (line 3)",
  // "environment variable INFERA_PORT".
  std::string origin;
};

// "--router-policy" -> "INFERA_ROUTER_POLICY": upper case, dashes to underscores.
std::string env_name(std::string_view flag_name);
// The value of `name` in "NAME=VALUE" entries (the first entry wins, as getenv does).
std::optional<std::string> find_env(std::span<const std::string> environment,
                                    std::string_view name);

// Reads a --config file into settings, in file order. An unknown key (aliases are keys too), a
// map or sequence where a scalar belongs, a sequence for a non-repeatable flag, a key with no
// value, two keys for one flag, or anything but a map at the top is an error naming the file, the
// key and its line; so is a missing, unreadable, oversized or invalid file. An empty file sets
// nothing.
Result<std::vector<Setting>> read_config_file(const std::string& path,
                                              std::span<const FlagShape> flags);

// Reads the INFERA_<FLAG> variables of `flags` (every alias has its own name). A repeatable
// flag's value is split on whitespace (spaces, tabs, newlines; never commas, which worker specs
// contain). An empty value (or only whitespace) counts as not set. Two aliases of one flag both
// set is an error naming both.
Result<std::vector<Setting>> read_environment(std::span<const std::string> environment,
                                              std::span<const FlagShape> flags);

// The whole file at `path` if it holds at most `max_bytes`; otherwise an error naming the path.
Result<std::string> read_bounded_file(const std::string& path, size_t max_bytes);
// A secret from a file (kMaxTokenFileBytes at most) with trailing whitespace (the newline an
// editor or `echo` leaves) removed. Empty, or whitespace or control bytes inside, is an error.
Result<std::string> read_token_file(const std::string& path);
// An API-key file: one key per line (at most kMaxTokenFileBytes); blank lines and lines starting
// with '#' are skipped, surrounding whitespace trimmed. An error names the file and line for a
// key with whitespace or control characters inside, and when the file holds no key.
Result<std::vector<std::string>> read_key_file(const std::string& path);

}  // namespace infera::config
