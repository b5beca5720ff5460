// HTTP messages as plain values: what a handler receives (Request), what it returns or what the
// client reads back (Response). Socket-free and Boost-free, so any module can include it.
// Header names compare case-insensitively; values are kept as sent. Plain value types: any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infera::http {

enum class Method : uint8_t { kGet, kHead, kPost, kPut, kDelete, kPatch, kOptions, kOther };

std::string_view method_name(Method method);  // "GET", ...; "OTHER" for kOther

struct Header {
  std::string name;
  std::string value;
};
using Headers = std::vector<Header>;

// The value of the first header called `name` (ASCII case-insensitive), or "" when absent.
std::string_view find_header(const Headers& headers, std::string_view name);
bool iequals(std::string_view a, std::string_view b);  // ASCII case-insensitive

struct Request {
  Method method = Method::kGet;
  std::string target = "/";  // as sent: the path plus an optional "?query"
  Headers headers;
  std::string body;

  std::string_view path() const;   // target up to '?'
  std::string_view query() const;  // after '?', or ""
  std::string_view header(std::string_view name) const { return find_header(headers, name); }
};

struct Response {
  int status = 200;
  // Content-Length, Transfer-Encoding and Connection are owned by the transport and ignored here.
  Headers headers;
  std::string body;

  std::string_view header(std::string_view name) const { return find_header(headers, name); }

  static Response json(int status, std::string body);  // application/json
  static Response text(int status, std::string body);  // text/plain; charset=utf-8
};

}  // namespace infera::http
