// ZeroMQ endpoint conventions of vLLM's KV-event publisher (KV_EVENTS.md 1.3, 1.4): which side
// binds, and the per-data-parallel-rank endpoints. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "infera/common/status.h"

namespace infera::events {

// vLLM's _socket_setup heuristic: the PUB socket binds when the endpoint contains '*' or '::'
// or is ipc:// or inproc://, and connects otherwise ("bind stable, connect volatile": an engine
// given tcp://router-host:5557 connects to a SUB socket the router binds).
bool publisher_binds(std::string_view endpoint);

// vLLM's offset_endpoint_port: rank 0 keeps the endpoint; rank r adds r to a tcp:// port and
// appends "_dp<r>" to an inproc:// name. Other forms cannot carry a rank (an error).
Result<std::string> offset_endpoint_port(std::string_view endpoint, int64_t dp_rank);

// The endpoint a process on the same host connects to for a bind address: a wildcard host
// (tcp://*:P, tcp://0.0.0.0:P, tcp://[::]:P) becomes loopback; anything else is unchanged.
std::string local_connect_endpoint(std::string endpoint);

// The 8-byte big-endian sequence frame, and the end-of-replay marker (0xff x 8).
std::string sequence_frame(uint64_t seq);
inline constexpr uint64_t kReplayEndSeq = ~uint64_t{0};

}  // namespace infera::events
