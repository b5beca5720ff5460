// How infera reaches the Kubernetes API (docs/contracts.md section 8): the in-cluster service
// account, or a kubeconfig file read as kubectl reads it (current context, its cluster's
// `server` and `certificate-authority(-data)`, its user's `token`/`tokenFile` or client
// certificate and key). Loaded at startup (strict: a bad file is a startup error); plain values
// afterwards, any thread. The bearer token is re-read from `token_file` on every connection, so
// a rotated service-account token is picked up without a restart.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "infera/common/status.h"

namespace infera::discovery {

struct KubeConfig {
  std::string scheme = "https";  // "https", or "http" for a plain test server
  std::string host;              // name or address of the API server
  uint16_t port = 443;
  std::string ca_pem;            // trusted CA(s), PEM; empty: the system's defaults
  std::string client_cert_pem;   // client certificate + key, PEM (kubeconfig users only)
  std::string client_key_pem;
  std::string token;             // a literal bearer token
  std::string token_file;        // a file holding the bearer token, re-read per connection
  std::string ns;                // the namespace of the context / the pod; may be empty
  bool insecure_skip_verify = false;  // kubeconfig `insecure-skip-tls-verify: true` only
  std::string source;            // "in-cluster" or the kubeconfig path, for logs

  // The bearer token to send now: `token`, else the file's current content (trimmed), else
  // empty (client certificates, or no auth).
  Result<std::string> bearer_token() const;
};

// Reads an environment variable; empty optional when unset. Injectable for tests.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;
EnvLookup process_env();

// The pod's own service account: KUBERNETES_SERVICE_HOST/PORT, `<dir>/token`, `<dir>/ca.crt`
// and `<dir>/namespace` (dir: /var/run/secrets/kubernetes.io/serviceaccount). An error says
// which piece is missing (not running in a pod: pass --kubeconfig).
Result<KubeConfig> load_in_cluster_config(
    const EnvLookup& env,
    std::string dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// A kubeconfig file (YAML or JSON). `context` empty: its current-context. Relative file paths
// in it resolve against the file's directory, as kubectl does.
Result<KubeConfig> load_kubeconfig(const std::string& path, std::string_view context = {});

// --kubeconfig PATH when given, else $KUBECONFIG (its first path), else in-cluster.
Result<KubeConfig> load_kube_config(const std::string& kubeconfig_flag, const EnvLookup& env);

}  // namespace infera::discovery
