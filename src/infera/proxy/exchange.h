// The spine of an upstream exchange: one attempt loop for every way a request reaches its
// workers. An attempt picks a worker (or a pair), calls it, classifies the outcome and either
// settles (the client has its answer, or left) or retries on another worker, which is allowed
// only while the client has seen no byte. Three strategies share the loop:
//   - aggregated: one call, relayed to the client;
//   - vLLM two-call (a split fleet whose prefill worker speaks vLLM's protocol): a prefill call
//     whose answer carries kv_transfer_params, then a decode call, relayed, carrying them;
//   - SGLang paired: one body with bootstrap_host/port/room sent to a prefill and a decode
//     worker at once; the decode answer is relayed, the prefill answer read to its end and
//     checked; a failure of either before the client saw a byte stops the other.
// The strategy of a split fleet is the protocol of the first prefill worker picked; retries
// stay with workers that speak it.
//
// What is not the spine's is its owner's (the gateway): which worker (routing, the in-flight cap
// and its queue), what a worker's failure means for its health, and every metric and log line.
// The spine reports each event to its Owner at the moment it happens, so the owner's accounting
// is the same for every strategy. Calls go through an Upstream and answers through a
// Downstream (forward.h), so the whole loop runs in tests without sockets (exchange_test.cc).
//
// Rules every strategy keeps (the fault table in docs/reliability.md relies on them):
//   - at most 1 + retries attempts; none starts after the request's deadline has passed;
//   - a worker that failed before the first byte is reported (Owner::retrying) and excluded from
//     the request's later attempts; after the first byte nothing is retried;
//   - a worker's route-time load (its Hold) is released when its call ends in failure, and by
//     the end of the request otherwise; its in-flight slot is released when its call ends;
//   - a prefill worker's 4xx is the client's answer, passed through;
//   - the client leaving cancels every call of the request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "infera/common/clock.h"
#include "infera/discovery/worker.h"
#include "infera/proxy/forward.h"
#include "infera/routing/router.h"

namespace infera::proxy {

// A worker as the spine sees it; the pointers belong to the owner's fleet view, which outlives
// the exchange.
struct Worker {
  kv::WorkerId slot = 0;
  const discovery::WorkerInfo* info = nullptr;
  const http::Endpoint* endpoint = nullptr;
};

// What the owner holds for a picked worker: its route-time load and its in-flight slot.
// Destroying it releases both.
class Hold {
 public:
  virtual ~Hold() = default;
  // The worker has computed the prompt (first body byte, or the prefill call's answer).
  virtual void prefill_done() = 0;
  // The call is over: its in-flight slot frees. The load stays until the Hold is destroyed.
  virtual void call_ended() = 0;
};

// One stage's pick. No worker: `answer` is the client's answer (a first attempt shed, or a
// routing error), or empty on a later attempt (the request ends with its last failure).
struct Picked {
  std::optional<Worker> worker;
  std::unique_ptr<Hold> hold;
  std::optional<http::Response> answer;
};

// What a call's end means for its worker's health.
enum class Health { kSuccess, kFailure, kUnjudged };

class Owner {
 public:
  virtual ~Owner() = default;
  // Picks `stage`'s worker for `attempt` (0: the first, which may queue for a slot) among those
  // not in `tried` and, with `protocol`, speaking it.
  virtual net::awaitable<Picked> pick(routing::Stage stage, uint32_t attempt,
                                      std::vector<kv::WorkerId> tried,
                                      std::optional<discovery::PdProtocol> protocol) = 0;
  // One call ended: `health` for the worker, `status` as counted (the worker's; 499 when it was
  // stopped or the client left; 502 when it failed without one).
  virtual void call_ended(routing::Stage stage, const Worker& worker, Health health,
                          int status) = 0;
  // `worker` failed before the client saw a byte (already reported by call_ended); the request
  // tries another.
  virtual void retrying(routing::Stage stage, const Worker& worker, const Status& error) = 0;
  // The request is over: the client has its answer from `worker` with `status` (499: it left).
  // `relayed`: the outcome of the relayed call, when the answer was relayed.
  virtual void ended(const Worker& worker, int status, const ForwardOutcome* relayed) = 0;
  // No attempt got an answer: the client's error answer for `error` (counted by the owner).
  virtual http::Response failed(const Status& error) = 0;
  // A fresh SGLang transfer session id: random, non-negative, 63 bits.
  virtual uint64_t bootstrap_room() = 0;
};

struct ExchangeSpec {
  bool split = false;  // the model's fleet has prefill and decode pools
  uint32_t retries = 0;
  Nanos deadline = Nanos::max();  // on `clock`
  const Clock* clock = nullptr;
  std::string request_id;  // sent upstream as X-Request-Id, and on passed-through answers
  // The trace context every call carries (TraceHeaders); empty: the client's, unchanged.
  std::string traceparent;
  std::string tracestate;
  // Fed the relayed answer's bytes (what the worker generated); null: not measured.
  TokenMeter* meter = nullptr;
};

// Serves `request` through `owner`'s workers (every argument outlives the call). Returns the
// client's answer when it is to be sent as a whole (an error, a passed-through 4xx); a default
// Response, never sent, when the answer was written to `out` already or the client left.
net::awaitable<http::Response> exchange(const http::Request& request, Downstream& out,
                                        Upstream& upstream, Owner& owner, const ExchangeSpec& spec);

}  // namespace infera::proxy
