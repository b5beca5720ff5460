#include "infera/nats/url.h"

#include <charconv>

namespace infera::nats {
namespace {

Result<ServerUrl> parse_one(std::string_view text) {
  auto bad = [&](const char* why) {
    return invalid_argument("--nats-server '" + std::string(text.substr(0, 200)) + "': " + why);
  };
  ServerUrl u;
  std::string_view rest = text;
  if (rest.starts_with("nats://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("tls://")) {
    rest.remove_prefix(6);
    u.tls = true;
  } else {
    return bad("the scheme must be nats:// or tls://");
  }
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    if (rest.substr(slash) != "/") return bad("a NATS URL has no path");
    rest = rest.substr(0, slash);
  }
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    if (const size_t colon = cred.find(':'); colon != std::string_view::npos) {
      u.user = std::string(cred.substr(0, colon));
      u.password = std::string(cred.substr(colon + 1));
    } else {
      u.token = std::string(cred);
    }
    if (u.user.empty() && u.token.empty()) return bad("empty user or token before '@'");
  }
  std::string_view port_text;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("unclosed '[' in the host");
    u.host = std::string(rest.substr(1, close - 1));
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("junk after the host");
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = rest.rfind(':');
    u.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port_text = rest.substr(colon + 1);
  }
  if (u.host.empty()) return bad("no host");
  for (char c : u.host) {
    if (c == ' ' || c == '\t' || c == '@' || c == '/') return bad("a bad character in the host");
  }
  if (!port_text.empty() || rest.ends_with(':')) {
    unsigned port = 0;
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
      return bad("the port must be 1..65535");
    }
    u.port = static_cast<uint16_t>(port);
  }
  return u;
}

}  // namespace

std::string ServerUrl::display() const {
  const bool v6 = host.find(':') != std::string::npos;
  return std::string(tls ? "tls://" : "nats://") + (v6 ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

Result<std::vector<ServerUrl>> parse_server_urls(std::string_view text) {
  std::vector<ServerUrl> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = text.find(',', at);
    std::string_view one = text.substr(at, comma == std::string_view::npos ? text.npos : comma - at);
    while (!one.empty() && one.front() == ' ') one.remove_prefix(1);
    while (!one.empty() && one.back() == ' ') one.remove_suffix(1);
    if (one.empty()) return invalid_argument("--nats-server: an empty URL in the list");
    INFERA_ASSIGN_OR_RETURN(ServerUrl u, parse_one(one));
    out.push_back(std::move(u));
    if (out.size() > 32) return invalid_argument("--nats-server: at most 32 URLs");
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace infera::nats
