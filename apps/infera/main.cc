// infera: one binary, one subcommand per process kind (docs/contracts.md section 1).
// Thin by design: pick the subcommand, hand it the remaining arguments, return its exit code.
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/version.h"
#if INFERA_WITH_SIM
#include "infera/sim/commands.h"
#endif
#if INFERA_WITH_LOADGEN
#include "infera/loadgen/commands.h"
#endif
#if INFERA_WITH_GATEWAY
#include "infera/gateway/gateway.h"
#endif
#if INFERA_WITH_TOKENIZER
#include "infera/tokenizer/tokenize_command.h"
#endif
#if INFERA_WITH_MOCK && __has_include("infera/mock/commands.h")
#include "infera/mock/commands.h"
#define INFERA_ENGINE_COMMAND 1
#endif

namespace {

using Run = int (*)(std::span<const std::string> args);

struct Subcommand {
  const char* name;
  const char* summary;
  Run run;            // nullptr: not in this build
  const char* issue;  // where it is being built, until it exists
};

#if INFERA_WITH_SIM
constexpr Run kSim = infera::sim::run_sim_command;
#else
constexpr Run kSim = nullptr;
#endif
#if INFERA_WITH_LOADGEN
constexpr Run kBench = infera::loadgen::run_bench_command;
constexpr Run kDemo = infera::loadgen::run_demo_command;
#else
constexpr Run kBench = nullptr;
constexpr Run kDemo = nullptr;
#endif
#if INFERA_WITH_GATEWAY
constexpr Run kServer = infera::gateway::run_server_command;
#else
constexpr Run kServer = nullptr;
#endif
#if INFERA_WITH_TOKENIZER
constexpr Run kTokenize = infera::tokenizer::run_tokenize_command;
#else
constexpr Run kTokenize = nullptr;
#endif
#if INFERA_ENGINE_COMMAND
constexpr Run kEngine = infera::mock::run_engine_command;
#else
constexpr Run kEngine = nullptr;
#endif

constexpr Subcommand kSubcommands[] = {
    {"server", "the gateway: OpenAI-compatible API, KV-aware router, proxy, admin API, metrics",
     kServer, "#6"},
    {"engine", "engines: `engine mock` (simulated vLLM), `engine vllm|sglang` (launchers)",
     kEngine, "#5"},
    {"bench", "load generator against a running server: TTFT, ITL, throughput, hit ratio",
     kBench, "#7"},
    {"sim", "the same workloads in virtual time through the real router and engine model", kSim,
     "#7"},
    {"demo", "starts mock engines and a server, compares round-robin with kv-aware", kDemo,
     "#7"},
    {"tokenize", "tokenizes text or chat messages (JSON lines in, JSON lines out)", kTokenize,
     "#3"},
};

void print_help(std::FILE* out) {
  std::fprintf(out,
               "infera %s: a KV-aware gateway for LLM inference fleets\n\n"
               "usage: infera <command> [flags]\n       infera --help | --version\n\ncommands:\n",
               infera::kVersion);
  for (const Subcommand& s : kSubcommands) std::fprintf(out, "  %-9s %s\n", s.name, s.summary);
  std::fprintf(out, "\nRun `infera <command> --help` for the flags of one command.\n");
}

// Servers, engines and load generators hold a socket or two per open stream, thousands of
// them: raise the descriptor soft limit to the hard one (which only the administrator can raise).
void raise_fd_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_help(stderr);
    return 2;
  }
  const std::string_view cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    print_help(stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("infera %s\n", infera::kVersion);
    return 0;
  }
  for (const Subcommand& s : kSubcommands) {
    if (cmd != s.name) continue;
    if (s.run == nullptr) {
      std::fprintf(stderr, "infera %s: not available yet in this build (being built in issue %s)\n",
                   s.name, s.issue);
      return 2;
    }
    const std::vector<std::string> args(argv + 2, argv + argc);
    raise_fd_limit();
    return s.run(args);
  }
  std::fprintf(stderr, "infera: unknown command '%.*s' (see `infera --help`)\n",
               static_cast<int>(cmd.size()), cmd.data());
  return 2;
}
