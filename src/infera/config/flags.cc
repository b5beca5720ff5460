#include "infera/config/flags.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

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

template <typename Int>
Result<Int> parse_int(std::string_view name, std::string_view value) {
  Int out{};
  const auto r = std::from_chars(value.data(), value.data() + value.size(), out);
  if (r.ec != std::errc() || r.ptr != value.data() + value.size()) {
    return invalid_argument("flag " + std::string(name) + ": '" + std::string(value) +
                            "' is not a valid integer in range");
  }
  return out;
}

Result<double> parse_double(std::string_view name, std::string_view value) {
  Result<double> d = parse_number(value);
  if (!d.ok()) return invalid_argument("flag " + std::string(name) + ": " + d.status().message());
  return d;
}

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

Status FlagSet::assign(Flag& flag, std::string_view name, std::string_view value) {
  flag.set = true;
  return std::visit(
      [&](auto* target) -> Status {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, std::string> ||
                      std::is_same_v<T, std::optional<std::string>>) {
          *target = std::string(value);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          target->emplace_back(value);
        } else if constexpr (std::is_same_v<T, double>) {
          INFERA_ASSIGN_OR_RETURN(*target, parse_double(name, value));
        } else if constexpr (std::is_same_v<T, std::optional<double>>) {
          INFERA_ASSIGN_OR_RETURN(double d, parse_double(name, value));
          *target = d;
        } else if constexpr (std::is_same_v<T, bool>) {
          auto b = parse_bool(value);
          if (!b.ok()) return invalid_argument("flag " + std::string(name) + ": " + b.status().message());
          *target = *b;
        } else {
          INFERA_ASSIGN_OR_RETURN(*target, parse_int<T>(name, value));
        }
        return ok_status();
      },
      flag.target);
}

Status FlagSet::parse(std::span<const std::string> args, std::vector<std::string>* unknown) {
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
    if (eq != std::string::npos) {
      INFERA_RETURN_IF_ERROR(assign(*flag, name, std::string_view(arg).substr(eq + 1)));
    } else if (is_bool) {
      INFERA_RETURN_IF_ERROR(assign(*flag, name, "true"));
    } else if (i + 1 < args.size()) {
      INFERA_RETURN_IF_ERROR(assign(*flag, name, args[++i]));
    } else {
      return invalid_argument("flag " + name + " needs a value");
    }
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
    out += left.size() < 34 ? std::string(34 - left.size(), ' ') : std::string("\n") + std::string(34, ' ');
    out += f.help + "\n";
  }
  out += "  --help                          this text\n";
  return out;
}

}  // namespace infera::config
