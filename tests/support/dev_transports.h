// Tests that run `infera server` or `infera engine mock` without a NATS server choose the
// broker-free transports (HTTP requests, ZMQ events) explicitly, as a user of one machine would;
// the production defaults (NATS) are for the NATS tests, which start a nats-server.
#pragma once

#include <string>
#include <vector>

namespace infera::testing {

// Appends `--request-transport http --kv-event-transport zmq` unless `args` choose a transport.
inline std::vector<std::string> with_dev_transports(std::vector<std::string> args) {
  for (const std::string& a : args) {
    if (a == "--request-transport" || a == "--kv-event-transport") return args;
  }
  for (const char* a : {"--request-transport", "http", "--kv-event-transport", "zmq"}) args.emplace_back(a);
  return args;
}

}  // namespace infera::testing
