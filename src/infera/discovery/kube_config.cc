#include "infera/discovery/kube_config.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "infera/common/base64.h"
#include "infera/config/config_sources.h"
#include "infera/config/flags.h"

namespace infera::discovery {
namespace {

constexpr size_t kMaxFileBytes = 4u << 20;  // kubeconfigs with embedded CAs are a few KiB

// A file of the kubeconfig or the service account, bounded; errors name what it is.
Result<std::string> read_file(const std::string& path, std::string_view what) {
  auto text = config::read_bounded_file(path, kMaxFileBytes);
  if (!text.ok()) return invalid_argument(std::string(what) + " " + std::string(text.status().message()));
  return text;
}

// "https://host:port[/]" (IPv6 in brackets) into the config; the port defaults by scheme.
Status parse_server_url(std::string_view url, KubeConfig& c) {
  const auto sep = url.find("://");
  if (sep == std::string_view::npos) return invalid_argument("server '" + std::string(url) + "' has no scheme");
  c.scheme = std::string(url.substr(0, sep));
  if (c.scheme != "https" && c.scheme != "http") {
    return invalid_argument("server '" + std::string(url) + "': scheme must be https or http");
  }
  std::string_view rest = url.substr(sep + 3);
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    if (rest.substr(slash).find_first_not_of('/') != std::string_view::npos) {
      return invalid_argument("server '" + std::string(url) + "': a path prefix is not supported");
    }
    rest = rest.substr(0, slash);
  }
  const bool bracketed = !rest.empty() && rest.front() == '[';
  const auto colon = rest.rfind(':');
  if (colon != std::string_view::npos && (!bracketed || colon > rest.find(']'))) {
    INFERA_ASSIGN_OR_RETURN(config::HostPort hp, config::parse_host_port(rest));
    c.host = hp.host;
    c.port = hp.port;
  } else {
    c.host = std::string(bracketed ? rest.substr(1, rest.size() - 2) : rest);
    c.port = c.scheme == "https" ? 443 : 80;
  }
  if (c.host.empty()) return invalid_argument("server '" + std::string(url) + "' has no host");
  return ok_status();
}

std::string scalar(const YAML::Node& map, const char* key) {
  if (!map.IsMap()) return {};
  const YAML::Node v = map[key];
  return v && v.IsScalar() ? v.Scalar() : std::string();
}

// `map[key]`, or an undefined node (yaml-cpp's own answer for a missing key is a node that
// throws when asked anything but whether it exists).
YAML::Node child(const YAML::Node& map, const char* key) {
  if (map.IsMap()) {
    if (const YAML::Node v = map[key]) return v;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

// A YAML node that is a map with an entry `name` (kubeconfig's named lists: clusters, users,
// contexts), or an undefined node.
YAML::Node named(const YAML::Node& list, const std::string& name) {
  if (!list.IsSequence()) return YAML::Node(YAML::NodeType::Undefined);
  for (const auto& item : list) {
    if (scalar(item, "name") == name) {
      return item;
    }
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

std::string resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || std::filesystem::path(p).is_absolute()) return p;
  return (std::filesystem::path(base_dir) / p).string();
}

// `<field>-data` (base64) or `<field>` (a path), as kubectl reads certificate-authority,
// client-certificate and client-key.
Result<std::string> pem_field(const YAML::Node& map, const std::string& field,
                              const std::string& base_dir) {
  if (const std::string data = scalar(map, (field + "-data").c_str()); !data.empty()) {
    auto decoded = base64_decode(data);
    if (!decoded.ok()) return invalid_argument(field + "-data is not base64");
    return decoded;
  }
  if (const std::string path = scalar(map, field.c_str()); !path.empty()) {
    return read_file(resolve(base_dir, path), field);
  }
  return std::string();
}

Result<KubeConfig> parse_kubeconfig(const YAML::Node& root, const std::string& path,
                                    std::string_view context_flag) {
  const std::string base_dir = std::filesystem::path(path).parent_path().string();
  std::string context_name(context_flag);
  if (context_name.empty()) context_name = scalar(root, "current-context");
  if (context_name.empty()) return invalid_argument("kubeconfig " + path + " has no current-context");
  const YAML::Node context = child(named(child(root, "contexts"), context_name), "context");
  if (!context || !context.IsMap()) {
    return invalid_argument("kubeconfig " + path + ": context '" + context_name + "' not found");
  }
  const std::string cluster_name = scalar(context, "cluster");
  const YAML::Node cluster = child(named(child(root, "clusters"), cluster_name), "cluster");
  if (!cluster || !cluster.IsMap()) {
    return invalid_argument("kubeconfig " + path + ": cluster '" + cluster_name + "' not found");
  }
  KubeConfig c;
  c.source = path;
  c.ns = scalar(context, "namespace");
  const std::string server = scalar(cluster, "server");
  if (server.empty()) return invalid_argument("kubeconfig " + path + ": cluster '" + cluster_name + "' has no server");
  INFERA_RETURN_IF_ERROR(parse_server_url(server, c));
  INFERA_ASSIGN_OR_RETURN(c.ca_pem, pem_field(cluster, "certificate-authority", base_dir));
  c.insecure_skip_verify = scalar(cluster, "insecure-skip-tls-verify") == "true";
  if (const std::string user_name = scalar(context, "user"); !user_name.empty()) {
    const YAML::Node user = child(named(child(root, "users"), user_name), "user");
    if (!user || !user.IsMap()) {
      return invalid_argument("kubeconfig " + path + ": user '" + user_name + "' not found");
    }
    if (child(user, "exec") || child(user, "auth-provider")) {
      return unimplemented("kubeconfig " + path + ": user '" + user_name +
                           "' uses an exec or auth-provider plugin; infera supports token, "
                           "tokenFile and client certificates");
    }
    c.token = scalar(user, "token");
    if (const std::string f = scalar(user, "tokenFile"); !f.empty()) c.token_file = resolve(base_dir, f);
    INFERA_ASSIGN_OR_RETURN(c.client_cert_pem, pem_field(user, "client-certificate", base_dir));
    INFERA_ASSIGN_OR_RETURN(c.client_key_pem, pem_field(user, "client-key", base_dir));
    if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
      return invalid_argument("kubeconfig " + path + ": user '" + user_name +
                              "' has a client certificate without its key (or the reverse)");
    }
  }
  return c;
}

}  // namespace

Result<std::string> KubeConfig::bearer_token() const {
  if (!token.empty()) return token;
  if (token_file.empty()) return std::string();
  return config::read_token_file(token_file);
}

EnvLookup process_env() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

Result<KubeConfig> load_in_cluster_config(const EnvLookup& env, std::string dir) {
  const auto host = env("KUBERNETES_SERVICE_HOST");
  const auto port = env("KUBERNETES_SERVICE_PORT");
  if (!host || host->empty() || !port || port->empty()) {
    return failed_precondition(
        "not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST/PORT unset): pass --kubeconfig "
        "PATH or set KUBECONFIG");
  }
  KubeConfig c;
  c.source = "in-cluster";
  const bool v6 = host->find(':') != std::string::npos;
  INFERA_RETURN_IF_ERROR(parse_server_url("https://" + (v6 ? "[" + *host + "]" : *host) + ":" + *port, c));
  c.token_file = dir + "/token";
  INFERA_ASSIGN_OR_RETURN(c.ca_pem, read_file(dir + "/ca.crt", "service-account CA"));
  INFERA_RETURN_IF_ERROR(c.bearer_token().status());  // readable now, re-read per connection
  if (auto ns = read_file(dir + "/namespace", "service-account namespace"); ns.ok()) {
    c.ns = std::move(*ns);
    while (!c.ns.empty() && std::isspace(static_cast<unsigned char>(c.ns.back()))) c.ns.pop_back();
  }
  return c;
}

Result<KubeConfig> load_kubeconfig(const std::string& path, std::string_view context) {
  INFERA_ASSIGN_OR_RETURN(const std::string text, read_file(path, "kubeconfig"));
  try {
    return parse_kubeconfig(YAML::Load(text), path, context);
  } catch (const YAML::Exception& e) {  // untrusted file: a parse error is a startup error
    return invalid_argument("kubeconfig " + path + " is not valid YAML: " + e.what());
  }
}

Result<KubeConfig> load_kube_config(const std::string& kubeconfig_flag, const EnvLookup& env) {
  if (!kubeconfig_flag.empty()) return load_kubeconfig(kubeconfig_flag);
  if (const auto k = env("KUBECONFIG"); k && !k->empty()) {
    return load_kubeconfig(k->substr(0, k->find(':')));
  }
  return load_in_cluster_config(env);
}

}  // namespace infera::discovery
