// `infera engine ...`: the engine subcommands of the one binary. `engine mock` runs the
// simulated vLLM (MockEngine) until SIGTERM/SIGINT; `engine vllm` and `engine sglang` run the
// launchers of the real engines (launcher.h). Called once by main() on the main thread.
#pragma once

#include <span>
#include <string>

namespace infera::mock {

// args: everything after `engine`, e.g. {"mock", "--port", "0"}. Returns the process exit code:
// 0 after a graceful stop, 1 when startup failed, 2 for bad usage.
int run_engine_command(std::span<const std::string> args);

}  // namespace infera::mock
