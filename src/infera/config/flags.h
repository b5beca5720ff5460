// FlagSet: a small, strict command-line parser for infera's subcommands. Flags are
// `--name value` or `--name=value`; booleans are `--name` (true) or `--name=true|false`;
// repeatable flags append. Aliases share one target ("--block-size|--page-size"). Unknown flags
// are an error (strict startup) unless the caller collects them (the engine launchers pass
// them through to the engine). Used at startup only, on one thread.
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

  // Parses `args` (without the program/subcommand names). With `unknown` set, unrecognised
  // arguments are appended there (with their values when given as --x=v or followed by a
  // non-flag token) instead of failing. `--help` sets help_requested().
  Status parse(std::span<const std::string> args, std::vector<std::string>* unknown = nullptr);
  bool help_requested() const { return help_requested_; }
  // Whether a flag (any alias) was given explicitly.
  bool was_set(std::string_view name) const;
  std::string help() const;

 private:
  struct Flag {
    std::vector<std::string> names;
    Target target;
    std::string help;
    std::string value_hint;
    bool set = false;
  };
  Flag* find(std::string_view name);
  static Status assign(Flag& flag, std::string_view name, std::string_view value);

  std::string usage_;
  std::vector<Flag> flags_;
  bool help_requested_ = false;
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
