// The loadgen module's subcommands: `infera bench`, `infera demo`. Each takes its arguments
// (after the subcommand name) and returns the process exit code; flags, errors and output are
// theirs. Called from apps/infera/main.cc on the main thread.
#pragma once

#include <span>
#include <string>

namespace infera::loadgen {

int run_bench_command(std::span<const std::string> args);
int run_demo_command(std::span<const std::string> args);

}  // namespace infera::loadgen
