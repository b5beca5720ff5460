// The subjects of docs/contracts.md section 11, in one place: everything under the namespace NS
// (`--namespace`, default `infera`), a worker named by its id as one subject token.
#pragma once

#include <string>
#include <string_view>

#include "infera/nats/protocol.h"

namespace infera::nats {

inline constexpr std::string_view kDefaultNamespace = "infera";

// NS.kv-events.<worker>: the worker's KV-event batches (events/nats_envelope.h).
inline std::string kv_events_subject(std::string_view ns, std::string_view worker_id) {
  return std::string(ns) + ".kv-events." + subject_token(worker_id);
}
// NS.kv-events.*: every worker's batches (the router's one subscription).
inline std::string kv_events_wildcard(std::string_view ns) { return std::string(ns) + ".kv-events.*"; }
// NS.kv-replay.<worker>: replay requests answered by the worker's relay.
inline std::string kv_replay_subject(std::string_view ns, std::string_view worker_id) {
  return std::string(ns) + ".kv-replay." + subject_token(worker_id);
}
// NS.requests.<worker>: inference requests (nats/request_wire.h).
inline std::string requests_subject(std::string_view ns, std::string_view worker_id) {
  return std::string(ns) + ".requests." + subject_token(worker_id);
}
// NS.router.load: the load changes router replicas share (replica/load_op.h).
inline std::string router_load_subject(std::string_view ns) { return std::string(ns) + ".router.load"; }
// The last token of a subject (the worker's token of the subjects above).
inline std::string_view last_token(std::string_view subject) {
  const size_t dot = subject.rfind('.');
  return dot == std::string_view::npos ? subject : subject.substr(dot + 1);
}

}  // namespace infera::nats
