// infera: one binary, one subcommand per process kind (ARCHITECTURE section 1).
// Thin by design: pick the subcommand, hand it the remaining arguments, return its exit code.
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "infera/version.h"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  const char* issue;  // where it is being built, until it exists
};

constexpr Subcommand kSubcommands[] = {
    {"server", "the gateway: OpenAI-compatible API, KV-aware router, proxy, admin API, metrics",
     "#6"},
    {"engine", "engines: `engine mock` (simulated vLLM), `engine vllm|sglang` (launchers)", "#5"},
    {"bench", "load generator against a running server: TTFT, ITL, throughput, hit ratio", "#7"},
    {"sim", "the same workloads in virtual time through the real router and engine model", "#7"},
    {"demo", "starts mock engines and a server, compares round-robin with kv-aware", "#7"},
    {"tokenize", "tokenizes text or chat messages (JSON lines in, JSON lines out)", "#3"},
};

void print_help(std::FILE* out) {
  std::fprintf(out,
               "infera %s: a KV-aware gateway for LLM inference fleets\n\n"
               "usage: infera <command> [flags]\n       infera --help | --version\n\ncommands:\n",
               infera::kVersion);
  for (const Subcommand& s : kSubcommands) std::fprintf(out, "  %-9s %s\n", s.name, s.summary);
  std::fprintf(out, "\nRun `infera <command> --help` for the flags of one command.\n");
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
    if (cmd == s.name) {
      std::fprintf(stderr, "infera %s: not available yet in this build (being built in issue %s)\n",
                   s.name, s.issue);
      return 2;
    }
  }
  std::fprintf(stderr, "infera: unknown command '%.*s' (see `infera --help`)\n",
               static_cast<int>(cmd.size()), cmd.data());
  return 2;
}
