#include "infera/config/flags.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <type_traits>
#include <utility>

namespace infera::config {
namespace {

std::vector<std::string> split_names(std::string_view names) {
  std::vector<std::string> out;
  while (!names.empty()) {
    const size_t bar = names.find('|');
    out.emplace_back(names.substr(0, bar));
    if (bar == std::string_view::npos) break;
    names.remove_prefix(bar + 1);
  }
  return out;
}

// `what` names the value in errors: "flag --port", "environment variable INFERA_PORT".
template <typename Int>
Result<Int> parse_int(std::string_view what, std::string_view value) {
  Int out{};
  const auto r = std::from_chars(value.data(), value.data() + value.size(), out);
  if (r.ec != std::errc() || r.ptr != value.data() + value.size()) {
    return invalid_argument(std::string(what) + ": '" + std::string(value) +
                            "' is not a valid integer in range");
  }
  return out;
}

Result<double> parse_double(std::string_view what, std::string_view value) {
  Result<double> d = parse_number(value);
  if (!d.ok()) return invalid_argument(std::string(what) + ": " + d.status().message());
  return d;
}

constexpr std::string_view kConfigHelp =
    "YAML or JSON file of flag values, keys = flag names without -- (env INFERA_CONFIG); "
    "precedence: command line > INFERA_<FLAG> env > file > defaults";

}  // namespace

Result<double> parse_number(std::string_view text) {
  std::string copy(text);
  char* end = nullptr;
  const double d = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(d)) {
    return invalid_argument("'" + copy + "' is not a number");
  }
  return d;
}

Result<std::vector<KeyValue>> parse_key_values(std::string_view text) {
  std::vector<KeyValue> out;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return invalid_argument(item.empty() ? std::string("an empty item")
                                           : "'" + std::string(item) + "' is not key=value");
    }
    out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    if (comma == std::string_view::npos) return out;
    text.remove_prefix(comma + 1);
  }
}

Result<bool> parse_bool(std::string_view text) {
  if (text == "true" || text == "1" || text == "yes" || text == "True") return true;
  if (text == "false" || text == "0" || text == "no" || text == "False") return false;
  return invalid_argument("'" + std::string(text) + "' is not a boolean (true/false)");
}

Result<HostPort> parse_host_port(std::string_view text, bool allow_zero_port) {
  HostPort hp;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return invalid_argument("'" + std::string(text) + "' is not [host]:port");
    }
    hp.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return invalid_argument("'" + std::string(text) + "' is not host:port");
    }
    hp.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  uint32_t port = 0;
  const auto r = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (r.ec != std::errc() || r.ptr != port_text.data() + port_text.size() || port > 65535 ||
      (port == 0 && !allow_zero_port)) {
    return invalid_argument("'" + std::string(text) + "' has no valid port");
  }
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

void FlagSet::add(std::string_view names, Target target, std::string_view help,
                  std::string_view value_hint) {
  flags_.push_back(Flag{split_names(names), target, std::string(help), std::string(value_hint)});
}

FlagSet::Flag* FlagSet::find(std::string_view name) {
  for (Flag& f : flags_) {
    for (const std::string& n : f.names) {
      if (n == name) return &f;
    }
  }
  return nullptr;
}

bool FlagSet::was_set(std::string_view name) const {
  for (const Flag& f : flags_) {
    for (const std::string& n : f.names) {
      if (n == name) return f.set;
    }
  }
  return false;
}

void FlagSet::enable_config_sources(ConfigSources sources) {
  INFERA_CHECK(!sources_);  // one --config per set
  config_flag_ = flags_.size();
  flags_.push_back(
      Flag{{"--config"}, static_cast<std::string*>(nullptr), std::string(kConfigHelp), "FILE"});
  sources_ = std::move(sources);
}

Status FlagSet::assign(Flag& flag, std::string_view what, std::string_view value, Source source) {
  flag.set = true;
  const bool restart = flag.source != source;
  flag.source = source;
  return std::visit(
      [&](auto* target) -> Status {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, std::string> ||
                      std::is_same_v<T, std::optional<std::string>>) {
          *target = std::string(value);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          // A higher source's list replaces a lower one's; within one source, entries append.
          if (restart) target->clear();
          target->emplace_back(value);
        } else if constexpr (std::is_same_v<T, double>) {
          INFERA_ASSIGN_OR_RETURN(*target, parse_double(what, value));
        } else if constexpr (std::is_same_v<T, std::optional<double>>) {
          INFERA_ASSIGN_OR_RETURN(double d, parse_double(what, value));
          *target = d;
        } else if constexpr (std::is_same_v<T, bool>) {
          auto b = parse_bool(value);
          if (!b.ok()) return invalid_argument(std::string(what) + ": " + b.status().message());
          *target = *b;
        } else {
          INFERA_ASSIGN_OR_RETURN(*target, parse_int<T>(what, value));
        }
        return ok_status();
      },
      flag.target);
}

Status FlagSet::apply_config_sources(std::optional<std::string> config_path) {
  // The readers see every flag but --config itself (a file cannot name another file).
  std::vector<FlagShape> shapes;
  std::vector<Flag*> targets;
  for (size_t i = 0; i < flags_.size(); ++i) {
    if (i == config_flag_) continue;
    shapes.push_back(FlagShape{
        flags_[i].names, std::holds_alternative<std::vector<std::string>*>(flags_[i].target)});
    targets.push_back(&flags_[i]);
  }
  auto apply = [&](const std::vector<Setting>& settings, Source source) -> Status {
    for (const Setting& s : settings) {
      Flag& flag = *targets[s.flag];
      if (auto* list = std::get_if<std::vector<std::string>*>(&flag.target)) {
        // The whole list, even an empty one (`worker: []`), replaces what lower sources set.
        (*list)->clear();
        flag.set = true;
        flag.source = source;
      }
      for (const std::string& value : s.values) {
        INFERA_RETURN_IF_ERROR(assign(flag, s.origin, value, source));
      }
    }
    return ok_status();
  };
  // Without --config on the command line, INFERA_CONFIG names the file.
  if (!config_path) config_path = find_env(sources_->environment, env_name("--config"));
  if (config_path && !config_path->empty()) {
    INFERA_ASSIGN_OR_RETURN(std::vector<Setting> file, read_config_file(*config_path, shapes));
    INFERA_RETURN_IF_ERROR(apply(file, Source::kFile));
  }
  INFERA_ASSIGN_OR_RETURN(std::vector<Setting> env,
                          read_environment(sources_->environment, shapes));
  return apply(env, Source::kEnvironment);
}

Status FlagSet::parse(std::span<const std::string> args, std::vector<std::string>* unknown) {
  // The command line is read first (it may name the config file) and applied last (it wins).
  struct Given {
    Flag* flag;
    std::string name;
    std::string value;
  };
  std::vector<Given> given;
  std::optional<std::string> config_path;  // --config's value, when given
  Flag* const config_flag = sources_ ? &flags_[config_flag_] : nullptr;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      if (unknown) {
        unknown->push_back(arg);
        continue;
      }
      return invalid_argument("unexpected argument '" + arg + "'");
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    Flag* flag = find(name);
    if (!flag) {
      if (!unknown) return invalid_argument("unknown flag '" + name + "' (see --help)");
      unknown->push_back(arg);
      if (eq == std::string::npos && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
        unknown->push_back(args[++i]);
      }
      continue;
    }
    const bool is_bool = std::holds_alternative<bool*>(flag->target);
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (is_bool) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return invalid_argument("flag " + name + " needs a value");
    }
    if (flag == config_flag) {
      // An explicit `--config ''` reads no file, not even INFERA_CONFIG's.
      flag->set = true;
      config_path = std::move(value);
      continue;
    }
    given.push_back(Given{flag, name, std::move(value)});
  }
  if (sources_ && !help_requested_) {
    INFERA_RETURN_IF_ERROR(apply_config_sources(std::move(config_path)));
  }
  for (const Given& g : given) {
    INFERA_RETURN_IF_ERROR(assign(*g.flag, "flag " + g.name, g.value, Source::kCommandLine));
  }
  return ok_status();
}

std::string FlagSet::help() const {
  std::string out = usage_ + "\n\nflags:\n";
  for (const Flag& f : flags_) {
    std::string left = "  ";
    for (size_t i = 0; i < f.names.size(); ++i) left += (i ? ", " : "") + f.names[i];
    if (!std::holds_alternative<bool*>(f.target)) left += " " + f.value_hint;
    out += left;
    out += left.size() < 34 ? std::string(34 - left.size(), ' ')
                            : std::string("\n") + std::string(34, ' ');
    out += f.help + "\n";
  }
  out += "  --help                          this text\n";
  return out;
}

}  // namespace infera::config
