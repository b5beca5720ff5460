#include "infera/config/config_sources.h"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it nowhere

namespace infera::config {
namespace {

std::string errno_text(int error) {
  return std::generic_category().message(error);
}

// The index of the flag one of whose names is `name`, if any.
std::optional<size_t> find_flag(std::span<const FlagShape> flags, std::string_view name) {
  for (size_t i = 0; i < flags.size(); ++i) {
    for (const std::string& n : flags[i].names) {
      if (n == name) return i;
    }
  }
  return std::nullopt;
}

// yaml-cpp counts lines from 0; people (and editors) from 1.
std::string line_of(const YAML::Mark& mark) {
  return mark.is_null() ? std::string() : " (line " + std::to_string(mark.line + 1) + ")";
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// One scalar value of a key: a string, number or boolean as written. Null, a map or a sequence
// is an error.
Result<std::string> scalar_value(const YAML::Node& node, const std::string& origin) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsNull()) return invalid_argument(origin + " has no value");
  return invalid_argument(origin + (node.IsMap() ? " is a map" : " is a list") +
                          " where one value belongs");
}

// The settings of a parsed document, which must be a map of flag names (or empty).
Result<std::vector<Setting>> settings_of(const YAML::Node& root, const std::string& file,
                                         std::span<const FlagShape> flags) {
  std::vector<Setting> out;
  if (root.IsNull()) return out;
  if (!root.IsMap()) {
    return invalid_argument(file + ": the top level must be a map of flag names to values" +
                            line_of(root.Mark()));
  }
  // The origin of each flag's setting so far: two keys for one flag (an alias, or a key twice,
  // which yaml-cpp accepts) are an error rather than a silent pick.
  std::vector<std::string> seen(flags.size());
  for (const auto& entry : root) {
    const YAML::Node& key = entry.first;
    if (!key.IsScalar()) {
      return invalid_argument(file + ": a key that is not a flag name" + line_of(key.Mark()));
    }
    const std::string& name = key.Scalar();
    const std::string origin = file + ": key '" + name + "'" + line_of(key.Mark());
    const std::optional<size_t> index = find_flag(flags, "--" + name);
    if (!index) {
      return invalid_argument(origin +
                              " is not a flag of this command (keys are flag names "
                              "without the leading --; see --help)");
    }
    if (!seen[*index].empty()) {
      return invalid_argument(origin + " sets the same flag as " + seen[*index]);
    }
    seen[*index] = "key '" + name + "'" + line_of(key.Mark());
    Setting s{*index, {}, origin};
    const YAML::Node& value = entry.second;
    if (value.IsSequence()) {
      if (!flags[*index].repeatable) {
        return invalid_argument(origin + " is a list, but --" + name + " takes one value");
      }
      for (const auto& item : value) {
        INFERA_ASSIGN_OR_RETURN(std::string v,
                                scalar_value(item, origin + ": an item" + line_of(item.Mark())));
        s.values.push_back(std::move(v));
      }
    } else {
      INFERA_ASSIGN_OR_RETURN(std::string v, scalar_value(value, origin));
      s.values.push_back(std::move(v));
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

ConfigSources process_config_sources() {
  ConfigSources sources;
  // Nothing in the process calls setenv or putenv, so no thread changes environ while we read.
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) sources.environment.emplace_back(*e);
  return sources;
}

std::string env_name(std::string_view flag_name) {
  while (!flag_name.empty() && flag_name.front() == '-') flag_name.remove_prefix(1);
  std::string out = "INFERA_";
  for (char c : flag_name) {
    if (c == '-') {
      out += '_';
    } else if (c >= 'a' && c <= 'z') {
      out += static_cast<char>(c - 'a' + 'A');
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> find_env(std::span<const std::string> environment,
                                    std::string_view name) {
  for (const std::string& entry : environment) {
    if (entry.size() > name.size() && entry[name.size()] == '=' &&
        std::string_view(entry).substr(0, name.size()) == name) {
      return entry.substr(name.size() + 1);
    }
  }
  return std::nullopt;
}

Result<std::string> read_bounded_file(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return invalid_argument(path + ": cannot open: " + errno_text(errno));
  std::string out;
  char buffer[16384];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return invalid_argument(path + ": cannot read: " + errno_text(error));
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      return invalid_argument(path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Result<std::vector<Setting>> read_config_file(const std::string& path,
                                              std::span<const FlagShape> flags) {
  const std::string file = "config file " + path;
  Result<std::string> text = read_bounded_file(path, kMaxConfigFileBytes);
  if (!text.ok()) return invalid_argument("config file " + text.status().message());
  // yaml-cpp reports bad syntax (and its own limits, such as nesting depth) by throwing; the
  // file is untrusted input, so every exception ends here as a status.
  try {
    const std::vector<YAML::Node> documents = YAML::LoadAll(*text);
    if (documents.size() > 1) {
      return invalid_argument(file + ": holds " + std::to_string(documents.size()) +
                              " YAML documents; give one");
    }
    if (documents.empty()) return std::vector<Setting>{};
    return settings_of(documents.front(), file, flags);
  } catch (const YAML::Exception& e) {
    return invalid_argument(file + ": not valid YAML" + line_of(e.mark) + ": " + e.msg);
  }
}

namespace {
// Kubernetes injects `<SERVICE>_PORT=tcp://10.0.0.1:8000` into every pod of a namespace for each
// Service (unless enableServiceLinks is false): a Service named `infera` (or `infera-admin`)
// would otherwise set --port (or --admin-port) to a URL and stop every infera pod at startup.
// No port flag takes a URL, so such a value is that link, not configuration.
bool is_service_link(std::string_view flag_name, std::string_view value) {
  const bool port_flag = flag_name.size() >= 4 && flag_name.substr(flag_name.size() - 4) == "port";
  return port_flag && (value.starts_with("tcp://") || value.starts_with("udp://") ||
                       value.starts_with("sctp://"));
}
}  // namespace

Result<std::vector<Setting>> read_environment(std::span<const std::string> environment,
                                              std::span<const FlagShape> flags) {
  std::vector<Setting> out;
  for (size_t i = 0; i < flags.size(); ++i) {
    std::optional<Setting> found;
    for (const std::string& name : flags[i].names) {
      const std::string var = env_name(name);
      std::optional<std::string> value = find_env(environment, var);
      if (!value || is_service_link(name, *value)) continue;
      Setting s{i, {}, "environment variable " + var};
      if (flags[i].repeatable) {
        size_t start = 0;
        while (start < value->size()) {
          while (start < value->size() && is_space((*value)[start])) ++start;
          size_t end = start;
          while (end < value->size() && !is_space((*value)[end])) ++end;
          if (end > start) s.values.push_back(value->substr(start, end - start));
          start = end;
        }
      } else if (!value->empty()) {
        s.values.push_back(std::move(*value));
      }
      if (s.values.empty()) continue;  // empty counts as not set
      if (found) {
        return invalid_argument(found->origin + " and " + var +
                                " both set one flag; give one of them");
      }
      found = std::move(s);
    }
    if (found) out.push_back(std::move(*found));
  }
  return out;
}

namespace {

// A secret as a header carries it: no whitespace and no control bytes.
bool plain_secret(std::string_view secret) {
  return std::none_of(secret.begin(), secret.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte <= 0x20 || byte == 0x7f;
  });
}

}  // namespace

Result<std::string> read_token_file(const std::string& path) {
  Result<std::string> text = read_bounded_file(path, kMaxTokenFileBytes);
  if (!text.ok()) return invalid_argument("token file " + text.status().message());
  std::string token = std::move(*text);
  while (!token.empty() && is_space(token.back())) token.pop_back();
  if (token.empty()) return invalid_argument("token file " + path + " is empty");
  if (!plain_secret(token)) {
    return invalid_argument("token file " + path +
                            " has whitespace or control characters inside the token");
  }
  return token;
}

Result<std::vector<std::string>> read_key_file(const std::string& path) {
  Result<std::string> text = read_bounded_file(path, kMaxTokenFileBytes);
  if (!text.ok()) return invalid_argument("key file " + text.status().message());
  std::vector<std::string> keys;
  size_t line_no = 0;
  std::string_view rest = *text;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    ++line_no;
    while (!line.empty() && is_space(line.front())) line.remove_prefix(1);
    while (!line.empty() && is_space(line.back())) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    if (!plain_secret(line)) {
      return invalid_argument("key file " + path + " line " + std::to_string(line_no) +
                              ": whitespace or control characters inside a key");
    }
    keys.emplace_back(line);
  }
  if (keys.empty()) return invalid_argument("key file " + path + " holds no key");
  return keys;
}

}  // namespace infera::config
