// Gateway: the composition root of `infera server`. It builds every module from a validated
// ServerConfig (tokenizer, KV index, active load, router, fleet + worker source + KV-event
// subscribers, upstream client, HTTP server, metrics), registers the routes of docs/contracts.md
// section 7, and owns every lifetime. The request path itself lives in inference.cc; the
// admin, metrics and discovery-facing endpoints in admin.cc; reloads in reload.h; the
// process lifecycle of `infera server` (signals, drain, reload) in server_command.cc.
// create/begin_drain/reload/shutdown from the main thread; handlers run on the event loop's
// threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "infera/common/status.h"
#include "infera/config/server_config.h"
#include "infera/gateway/reload.h"

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

  // The drain's start (SIGTERM): /readyz answers 503 "draining" from now on, while every route
  // is still served, until shutdown(). Idempotent.
  void begin_drain();

  // Applies `next` (the flags parsed again, on SIGHUP) to the running gateway: what can change
  // without dropping a request changes now, every other difference is logged once as "not
  // applied live (restart needed)" (reload.h). An error (a --worker that does not parse) changes
  // nothing. Returns the plan applied.
  Result<ReloadPlan> reload(const config::ServerConfig& next);

  // Graceful shutdown: stop accepting, let in-flight requests and streams finish for up to
  // `grace`, stop discovery and the event subscribers. Idempotent.
  void shutdown(std::chrono::milliseconds grace);

  struct Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `infera server ...`: parse flags, build, serve; SIGHUP reloads (the same flags parsed again);
// SIGTERM/SIGINT drains for --drain-delay-s (a second one ends the delay), then shuts down
// gracefully within --shutdown-grace-s and returns 0 (server_command.cc).
int run_server_command(std::span<const std::string> args);

}  // namespace infera::gateway
