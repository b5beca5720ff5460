// Picking the lowest cost fairly: exact ties break uniformly at random (never always the first
// worker); with a temperature > 0 the winner is sampled from a softmax over costs normalised to
// [0, 1] (as NVIDIA Dynamo's router does: p_i ~ exp(-(c_i - min) / ((max - min) * T))).
// Pure functions of their inputs and the Rng; any thread with its own Rng.
#pragma once

#include <cstddef>
#include <span>

#include "infera/common/random.h"

namespace infera::routing {

// `costs` is not empty. Returns the chosen position.
size_t pick_lowest(std::span<const double> costs, double temperature, Rng& rng);

}  // namespace infera::routing
