// Gateway: the composition root of `infera server`. It builds every module from a validated
// ServerConfig (tokenizer, KV index, active load, router, fleet + worker source + KV-event
// subscribers, upstream client, HTTP server, metrics), registers the routes of docs/contracts.md
// section 7, and owns every lifetime. The request path itself lives in inference.cc; the
// admin, metrics and discovery-facing endpoints in admin.cc.
// create/start/shutdown from the main thread; handlers run on the event loop's threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "infera/common/status.h"
#include "infera/config/server_config.h"

namespace infera::gateway {

class Gateway {
 public:
  // Strict startup: an unreadable tokenizer, an unknown policy, a bad --worker or a bind
  // failure is an error (the caller prints it and exits non-zero).
  static Result<std::unique_ptr<Gateway>> create(const config::ServerConfig& config);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  uint16_t port() const;
  uint16_t admin_port() const;  // 0: admin routes are on the main listener

  // Graceful shutdown: stop accepting, let in-flight requests and streams finish for up to
  // `grace`, stop discovery and the event subscribers. Idempotent.
  void shutdown(std::chrono::milliseconds grace);

  struct Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `infera server ...`: parse flags, build, serve until SIGTERM/SIGINT, shut down gracefully.
int run_server_command(std::span<const std::string> args);

}  // namespace infera::gateway
