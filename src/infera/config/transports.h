// The discovery backend and the two transports of a process, resolved the one way
// docs/configuration.md ("Defaults and implied settings") states, for `infera server`,
// `infera engine mock` and the launchers alike (docs/contracts.md section 2):
//   - a flag given explicitly wins;
//   - otherwise a setting that only makes sense with one choice implies it: --worker implies
//     static discovery, a --worker spec with kv=/replay= implies http requests and zmq events,
//     --kv-events-bind implies zmq events,
//     --etcd-endpoint implies etcd, the --k8s-* flags and --kubeconfig imply k8s;
//   - otherwise the production defaults: k8s discovery, nats for both transports;
//   - a combination that cannot work is one error line naming the flags to pass. Never a silent
//     fallback.
// Pure (tests: transports_test.cc).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"
#include "infera/config/server_config.h"

namespace infera::config {

struct TransportInputs {
  std::optional<DiscoveryBackend> discovery;  // the flags as given, if they were
  std::optional<RequestTransport> request;
  std::optional<KvEventTransport> events;
  bool workers = false;      // --worker given
  bool worker_zmq = false;   // a --worker spec names kv= or replay= (ZMQ endpoints)
  bool events_bind = false;  // --kv-events-bind given (a ZMQ socket: implies zmq events)
  bool etcd = false;         // --etcd-endpoint given
  bool k8s = false;          // --k8s-* or --kubeconfig given
};

struct Transports {
  DiscoveryBackend discovery = DiscoveryBackend::kKubernetes;
  RequestTransport request = RequestTransport::kNats;
  KvEventTransport events = KvEventTransport::kNats;
};

Result<Transports> resolve_transports(const TransportInputs& in);

// An engine's (`infera engine mock`, the launchers): the three flags' words as given ("": not
// given) and whether --etcd-endpoint was. k8s discovery means no registration (the router finds
// the pod by its labels).
struct EngineTransportWords {
  std::string discovery, request, events;
  bool etcd = false;
};
Result<Transports> resolve_engine_transports(const EngineTransportWords& words);

// Whether a --worker spec names a ZMQ endpoint (kv= or replay=).
bool worker_spec_names_zmq(std::string_view spec);

// --nats-server's value: the flag when given (any source), else $NATS_SERVER, else the default;
// checked (nats::parse_server_urls's rules) so that a bad URL fails at startup.
Result<std::string> resolve_nats_server(bool flag_set, const std::string& flag,
                                        const std::vector<std::string>& environment);
// --namespace: letters, digits, '-', '_', dot-separated tokens.
Status check_namespace(std::string_view ns);

}  // namespace infera::config
