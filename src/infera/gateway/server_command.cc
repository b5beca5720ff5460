// `infera server`: the process around the Gateway. The flags are parsed once, strictly, the
// gateway is built, and the main thread then waits on signals, blocked in every thread before
// any starts (common/signals.h), so each is handled here, outside a signal handler:
//   SIGHUP           reload: the same arguments parsed again, applied live where they can be.
//   SIGTERM, SIGINT  drain: /readyz fails at once, everything is still served for
//                    --drain-delay-s (a second SIGTERM or SIGINT ends that early; a SIGHUP then
//                    is ignored), then the listener closes, in-flight requests and streams get up
//                    to --shutdown-grace-s, and the process exits 0.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "infera/common/log.h"
#include "infera/common/signals.h"
#include "infera/gateway/gateway.h"

namespace infera::gateway {
namespace {

using Ms = std::chrono::milliseconds;

Ms from_seconds_ms(double seconds) { return Ms(static_cast<int64_t>(seconds * 1000)); }

// SIGHUP. The same arguments, parsed again: with --config FILE and INFERA_* variables this
// reads their contents now. A parse or plan that fails is logged and changes nothing.
void reload(Gateway& gateway, std::span<const std::string> args, config::ServerConfig& running) {
  bool help = false;
  std::string help_text;
  Result<config::ServerConfig> next = config::parse_server_flags(args, &help, &help_text);
  Status failed = next.status();
  if (next.ok()) {
    Result<ReloadPlan> plan = gateway.reload(*next);
    if (plan.ok()) {
      running = plan->running_after;
      return;
    }
    failed = plan.status();
  }
  INFERA_LOG(kError, "gateway")
      .msg("reload failed; the running config is kept")
      .kv("error", failed.message());
}

// SIGTERM or SIGINT (`sig`): the drain delay, then the graceful shutdown.
void drain_and_shut_down(Gateway& gateway, const TerminationSignals& signals,
                         const config::ServerConfig& running, int sig) {
  INFERA_LOG(kInfo, "gateway")
      .msg("shutting down")
      .kv("signal", termination_signal_name(sig))
      .kv("drain_delay_s", running.drain_delay_s)
      .kv("shutdown_grace_s", running.shutdown_grace_s);
  gateway.begin_drain();
  const auto end = std::chrono::steady_clock::now() + from_seconds_ms(running.drain_delay_s);
  for (;;) {
    const Ms left = std::chrono::ceil<Ms>(end - std::chrono::steady_clock::now());
    if (left <= Ms(0)) break;
    const int again = signals.wait_for(left);
    if (again == SIGHUP) {
      INFERA_LOG(kWarn, "gateway").msg("SIGHUP ignored while draining");
    } else if (again != 0) {
      INFERA_LOG(kInfo, "gateway")
          .msg("rest of the drain delay skipped")
          .kv("signal", termination_signal_name(again));
      break;
    }
  }
  INFERA_LOG(kInfo, "gateway").msg("listener closing; in-flight requests finish");
  gateway.shutdown(from_seconds_ms(running.shutdown_grace_s));
  INFERA_LOG(kInfo, "gateway").msg("stopped");
}

}  // namespace

int run_server_command(std::span<const std::string> args) {
  bool help = false;
  std::string help_text;
  auto config = config::parse_server_flags(args, &help, &help_text);
  if (!config.ok()) {
    std::fprintf(stderr, "infera server: %s\n", config.status().message().c_str());
    return 2;
  }
  if (help) {
    std::printf("%s", help_text.c_str());
    return 0;
  }
  set_log_level(config->log_level);
  set_log_format(config->log_format);
  // Signals are taken by this thread only (the waits below), blocked before any other thread
  // exists.
  const TerminationSignals signals = block_termination_and_hangup_signals();
  signal(SIGPIPE, SIG_IGN);

  auto gateway = Gateway::create(*config);
  if (!gateway.ok()) {
    std::fprintf(stderr, "infera server: %s\n", gateway.status().message().c_str());
    return 1;
  }
  // Both listeners speak HTTPS with --ssl-certfile.
  const char* scheme = config->ssl_certfile.empty() ? "http" : "https";
  std::printf("infera server: listening on %s://%s:%u\n", scheme, config->host.c_str(),
              static_cast<unsigned>((*gateway)->port()));
  if ((*gateway)->admin_port()) {
    std::printf("infera server: admin on %s://%s:%u\n", scheme, config->admin_host.c_str(),
                static_cast<unsigned>((*gateway)->admin_port()));
  }
  std::fflush(stdout);
  config::ServerConfig running = *config;
  int sig = 0;
  while ((sig = signals.wait()) == SIGHUP) reload(**gateway, args, running);
  drain_and_shut_down(**gateway, signals, running, sig);
  return 0;
}

}  // namespace infera::gateway
