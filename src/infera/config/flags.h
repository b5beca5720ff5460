// FlagSet: a small, strict command-line parser for infera's subcommands. Flags are
// `--name value` or `--name=value`; booleans are `--name` (true) or `--name=true|false`;
// repeatable flags append. Aliases share one target ("--block-size|--page-size"). Unknown flags
// are an error (strict startup) unless the caller collects them (the engine launchers pass
// them through to the engine). With enable_config_sources, a --config file and INFERA_<FLAG>
// variables fill the same flags beneath the command line (config_sources.h). Used at startup
// (and reload) only, on one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "infera/common/status.h"
#include "infera/config/config_sources.h"

namespace infera::config {

class FlagSet {
 public:
  explicit FlagSet(std::string usage) : usage_(std::move(usage)) {}

  using Target = std::variant<std::string*, std::optional<std::string>*, double*,
                              std::optional<double>*, uint32_t*, uint64_t*, int64_t*, bool*,
                              std::vector<std::string>*>;
  // `names`: "--name" or "--name|--alias". `value_hint` shows in help ("N", "URL").
  void add(std::string_view names, Target target, std::string_view help,
           std::string_view value_hint = "VALUE");

  // Adds `--config FILE` (or INFERA_CONFIG) and the INFERA_<FLAG> environment in `sources` to
  // parse(), which then applies the file, the environment and the command line in that order:
  // command line > environment > file > defaults, and for a repeatable flag the highest source
  // that sets it replaces the lower ones' whole list. Only this set's own flags can be set that
  // way: an unknown key in the file is an error even when parse() collects unknown arguments,
  // and unknown INFERA_* variables are ignored. Every command calls this once, before parse().
  void enable_config_sources(ConfigSources sources);

  // Parses `args` (without the program/subcommand names). With `unknown` set, unrecognised
  // arguments are appended there (with their values when given as --x=v or followed by a
  // non-flag token) instead of failing. `--help` sets help_requested() and skips the config
  // file and the environment (help always works).
  Status parse(std::span<const std::string> args, std::vector<std::string>* unknown = nullptr);
  bool help_requested() const { return help_requested_; }
  // Whether a flag (any alias) was set by any source: command line, environment or file.
  bool was_set(std::string_view name) const;
  std::string help() const;

 private:
  // Where a flag's value came from, lowest first. A repeatable flag's list restarts when a
  // higher source first sets it.
  enum class Source { kDefault, kFile, kEnvironment, kCommandLine };
  struct Flag {
    std::vector<std::string> names;
    Target target;
    std::string help;
    std::string value_hint;
    bool set = false;
    Source source = Source::kDefault;
  };
  Flag* find(std::string_view name);
  // `what` names the value in errors: "flag --port", "environment variable INFERA_PORT".
  static Status assign(Flag& flag, std::string_view what, std::string_view value, Source source);
  // The file's and the environment's settings, applied beneath the command line. `config_path`:
  // --config's value when given (empty: no file), else INFERA_CONFIG's.
  Status apply_config_sources(std::optional<std::string> config_path);

  std::string usage_;
  std::vector<Flag> flags_;
  bool help_requested_ = false;
  std::optional<ConfigSources> sources_;  // set by enable_config_sources
  size_t config_flag_ = 0;                // index of --config in flags_ when sources_ is set
};

// Parses "true/false/1/0/yes/no".
Result<bool> parse_bool(std::string_view text);
// Parses "host:port" (IPv6 in brackets) into its parts; port must be 1..65535 (or 0 when
// allow_zero_port).
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
Result<HostPort> parse_host_port(std::string_view text, bool allow_zero_port = false);

// Parses "key=value,key=value" (the form of --worker's options and --kv-tier-credit) into its
// pairs, views into `text`, in order. An empty item or one without '=' is an error naming it.
using KeyValue = std::pair<std::string_view, std::string_view>;
Result<std::vector<KeyValue>> parse_key_values(std::string_view text);
// A finite number written whole ("0.75", "1e3"), or an error naming it.
Result<double> parse_number(std::string_view text);

}  // namespace infera::config
