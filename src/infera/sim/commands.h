// The sim module's subcommand: `infera sim`. Takes its arguments (after the subcommand name) and
// returns the process exit code; flags, errors and output are its own. Called from
// apps/infera/main.cc on the main thread.
#pragma once

#include <span>
#include <string>

namespace infera::sim {

int run_sim_command(std::span<const std::string> args);

}  // namespace infera::sim
