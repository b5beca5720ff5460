#include "infera/events/endpoint.h"

#include <charconv>

namespace infera::events {

bool publisher_binds(std::string_view endpoint) {
  return endpoint.find('*') != std::string_view::npos ||
         endpoint.find("::") != std::string_view::npos || endpoint.starts_with("ipc://") ||
         endpoint.starts_with("inproc://");
}

Result<std::string> offset_endpoint_port(std::string_view endpoint, int64_t dp_rank) {
  if (dp_rank == 0) return std::string(endpoint);
  if (dp_rank < 0) return invalid_argument("negative data-parallel rank");
  if (endpoint.starts_with("inproc://")) {
    return std::string(endpoint) + "_dp" + std::to_string(dp_rank);
  }
  if (endpoint.starts_with("tcp://")) {
    const size_t colon = endpoint.rfind(':');
    uint32_t port = 0;
    const std::string_view digits = endpoint.substr(colon + 1);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (colon > 5 && ec == std::errc() && end == digits.data() + digits.size() && port > 0 &&
        port + static_cast<uint64_t>(dp_rank) <= 65535) {
      return std::string(endpoint.substr(0, colon + 1)) +
             std::to_string(port + static_cast<uint64_t>(dp_rank));
    }
  }
  return invalid_argument("endpoint '" + std::string(endpoint) +
                          "' cannot be offset by a data-parallel rank (needs tcp://host:PORT or "
                          "inproc://name)");
}

std::string sequence_frame(uint64_t seq) {
  std::string s(8, '\0');
  for (size_t i = 0; i < 8; ++i) s[7 - i] = static_cast<char>(static_cast<uint8_t>(seq >> (8 * i)));
  return s;
}

std::string local_connect_endpoint(std::string endpoint) {
  for (std::string_view wild : {"//*:", "//0.0.0.0:", "//[::]:"}) {
    if (const size_t at = endpoint.find(wild); at != std::string::npos) {
      endpoint.replace(at, wild.size(), "//127.0.0.1:");
    }
  }
  return endpoint;
}

}  // namespace infera::events
