// MockEngine: `infera engine mock` as an object. It builds and owns, in order, the text codec
// (tokenizer or synthetic), the KV-event publisher (vLLM's ZMQ PUB + ROUTER replay), the event
// loop, the EngineRunner (the core on one strand, stepped by a timer in real time), the
// OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /v1/responses with its
// in-memory response store, /v1/embeddings, /v1/models, /health, /tokenize, /detokenize,
// /reset_prefix_cache, /metrics) and, with etcd discovery, the leased worker record.
// shutdown() takes them down in reverse: deregister, stop accepting and drain streams, stop the
// core, flush and stop the publisher, stop the loop.
// start/shutdown from one non-loop thread (main, or a test); accessors from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "infera/common/status.h"
#include "infera/discovery/worker.h"
#include "infera/http/server.h"
#include "infera/mock/engine_runner.h"
#include "infera/mock/mock_options.h"

namespace infera::mock {

class MockEngine {
 public:
  // Strict startup: an unreadable tokenizer, a publisher endpoint or listener that cannot bind,
  // or an etcd that does not take the record within 10 s is an error, and nothing keeps running.
  static Result<std::unique_ptr<MockEngine>> start(MockOptions options);
  ~MockEngine();  // shutdown(0) unless already shut down
  MockEngine(const MockEngine&) = delete;
  MockEngine& operator=(const MockEngine&) = delete;

  uint16_t port() const;
  // What this engine registers (or would register): url http://<advertise host>:<port>, role,
  // the KV-event endpoints with the wildcard host replaced by the advertise host, topic, block
  // size, model, engine "mock".
  const discovery::WorkerInfo& worker() const { return worker_; }
  const MockOptions& options() const { return options_; }
  RunnerSnapshot snapshot() const;
  http::ServerStats http_stats() const;

  // Graceful stop: deregister, stop accepting, let requests and streams in flight finish for up
  // to `drain` (then cut them; their requests are aborted), stop the engine. Idempotent.
  void shutdown(std::chrono::milliseconds drain);

  struct Parts;  // the owned components (mock_server.cc)

 private:
  explicit MockEngine(MockOptions options);

  MockOptions options_;
  discovery::WorkerInfo worker_;
  std::unique_ptr<Parts> parts_;
  bool shut_down_ = false;
};

}  // namespace infera::mock
