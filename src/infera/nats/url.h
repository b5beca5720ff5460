// --nats-server values: one or more comma-separated URLs, `nats://[user:password@|token@]host:port`
// (`tls://` asks for TLS whatever the server says; the port defaults to 4222). IPv6 hosts in
// brackets. Credentials are kept apart so that logs print the URL without them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"

namespace infera::nats {

struct ServerUrl {
  std::string host;
  uint16_t port = 4222;
  bool tls = false;
  std::string user, password, token;
  std::string display() const;  // scheme://host:port, no credentials
};

// Errors name the piece that is wrong ("--nats-server 'x': ...").
Result<std::vector<ServerUrl>> parse_server_urls(std::string_view text);

inline constexpr std::string_view kDefaultServer = "nats://localhost:4222";

}  // namespace infera::nats
