#include "infera/mock/commands.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string_view>

#include "infera/common/log.h"
#include "infera/common/signals.h"
#include "infera/launcher/launcher.h"
#include "infera/mock/mock_server.h"

namespace infera::mock {

using launcher::EngineKind;
using launcher::run_launcher;

namespace {

constexpr const char* kUsage =
    "usage: infera engine <mock|vllm|sglang> [flags]\n\n"
    "  mock     a simulated vLLM engine (OpenAI API, prefix cache, KV events, discovery)\n"
    "  vllm     launcher for a real vLLM engine: `vllm serve` with prefix caching, KV events\n"
    "           and PYTHONHASHSEED=0; waits for /health, registers in etcd, forwards signals\n"
    "  sglang   launcher for a real SGLang engine (sglang.launch_server), the same way\n\n"
    "Run `infera engine <mock|vllm|sglang> --help` for their flags; the launchers pass\n"
    "unknown flags to the engine and print the command with --dry-run.\n";

int run_mock(std::span<const std::string> args) {
  bool help_requested = false;
  std::string help;
  Result<MockOptions> options = parse_mock_flags(args, &help_requested, &help);
  if (!options.ok()) {
    std::fprintf(stderr, "infera engine mock: %s\n", options.status().message().c_str());
    return 2;
  }
  if (help_requested) {
    std::fputs(help.c_str(), stdout);
    return 0;
  }
  set_log_level(options->log_level);

  // Every thread started from here on inherits the mask, so the signals reach the wait below and
  // shutdown runs on this thread, outside any handler.
  const TerminationSignals signals = block_termination_signals();
  std::signal(SIGPIPE, SIG_IGN);

  const auto grace = std::chrono::milliseconds(
      static_cast<int64_t>(options->shutdown_grace_s * 1000.0));
  Result<std::unique_ptr<MockEngine>> started = MockEngine::start(std::move(*options));
  if (!started.ok()) {
    std::fprintf(stderr, "infera engine mock: %s\n", started.status().message().c_str());
    return 1;
  }
  MockEngine& engine = **started;
  const discovery::WorkerInfo& w = engine.worker();
  if (!w.kv_endpoint.empty() || !w.replay_endpoint.empty()) {
    std::printf("infera engine mock: kv events on %s, replay %s, topic \"%s\"\n",
                w.kv_endpoint.empty() ? "(connecting)" : w.kv_endpoint.c_str(),
                w.replay_endpoint.empty() ? "(none)" : w.replay_endpoint.c_str(),
                w.topic.c_str());
  }
  // The ready line: tests and the demo wait for it and read the port from it.
  std::printf("infera engine mock: listening on %s\n", w.url.c_str());
  std::fflush(stdout);

  const int sig = signals.wait();
  INFERA_LOG(kInfo, "engine")
      .msg("shutting down")
      .kv("signal", termination_signal_name(sig))
      .kv("grace_ms", static_cast<int64_t>(grace.count()));
  engine.shutdown(grace);
  INFERA_LOG(kInfo, "engine").msg("stopped");
  return 0;
}

}  // namespace

int run_engine_command(std::span<const std::string> args) {
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string_view kind = args[0];
  if (kind == "--help" || kind == "-h" || kind == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (kind == "mock") return run_mock(args.subspan(1));
  if (kind == "vllm") return run_launcher(EngineKind::kVllm, args.subspan(1));
  if (kind == "sglang") return run_launcher(EngineKind::kSglang, args.subspan(1));
  std::fprintf(stderr, "infera engine: unknown engine '%s'\n\n%s", args[0].c_str(), kUsage);
  return 2;
}

}  // namespace infera::mock
