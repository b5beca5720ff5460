// RequestRelay: the worker side of `--request-transport nats` (docs/contracts.md section 11,
// docs/nats.md "Requests over NATS"). It serves NS.requests.<worker> (queue group "relay", so a
// second relay of the same worker never serves a request twice) by forwarding each request to
// the engine's own HTTP endpoint on this host and streaming the answer back on the request's
// reply inbox, frame by frame (request_wire.h), in order, with flow control (at most the
// router's window of data frames unacknowledged) and cancellation both ways (the router's
// Infera-Cancel closes the engine's connection; an engine failure is an error frame).
//
// Threading: every call runs on the NATS client's thread (Client::executor()), where the
// request and its acknowledgements arrive: no hop between threads per message (measured in
// docs/benchmarks.md, "Requests over NATS"). Nothing there blocks: the engine's HTTP exchange
// and the waits for credit are asynchronous, so a slow engine or a router that stopped reading
// never stalls the NATS connection. Every wait has a deadline: the engine's (http::ClientOptions), a
// body's parts (part_timeout) and the router's credit (credit_timeout, after which the engine
// call is cancelled). Malformed requests are answered with an error frame when they name a
// reply subject, and counted. start()/stop() from the owner's thread (never the client's);
// stats() from any. The nats::Client is the caller's and outlives the relay.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "infera/common/status.h"
#include "infera/http/client.h"

namespace infera::nats {

class Client;

struct RequestRelayOptions {
  std::string ns = "infera";
  std::string worker_id;   // host:port, as discovery names the worker
  http::Endpoint engine;   // the engine's HTTP endpoint, e.g. 127.0.0.1:8000
  size_t max_body_bytes = size_t{64} << 20;
  std::chrono::milliseconds part_timeout{10'000};    // from a body's first part to its last
  std::chrono::milliseconds credit_timeout{60'000};  // the router silent with the window full
  http::ClientOptions engine_client;
};

struct RequestRelayStats {
  uint64_t requests = 0;   // calls made to the engine
  uint64_t completed = 0;  // answers sent whole (any status)
  uint64_t cancelled = 0;  // stopped by the router (or its silence)
  uint64_t failed = 0;     // the engine failed, or the answer could not be sent
  uint64_t malformed = 0;  // requests that could not be read
  uint64_t bytes = 0;      // body bytes sent back
  uint64_t active = 0;     // calls in progress now
};

class RequestRelay {
 public:
  RequestRelay(Client& client, RequestRelayOptions options);
  ~RequestRelay();  // stop()
  RequestRelay(const RequestRelay&) = delete;
  RequestRelay& operator=(const RequestRelay&) = delete;

  // Starts the loop and subscribes the worker's request subject.
  Status start();
  // Unsubscribes, cancels the calls in progress (their engine connections close) and joins.
  void stop();
  RequestRelayStats stats() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace infera::nats
