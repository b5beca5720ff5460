#include "infera/http/message.h"

#include <utility>

namespace infera::http {

std::string_view method_name(Method method) {
  switch (method) {
    case Method::kGet:
      return "GET";
    case Method::kHead:
      return "HEAD";
    case Method::kPost:
      return "POST";
    case Method::kPut:
      return "PUT";
    case Method::kDelete:
      return "DELETE";
    case Method::kPatch:
      return "PATCH";
    case Method::kOptions:
      return "OPTIONS";
    case Method::kOther:
      return "OTHER";
  }
  return "OTHER";
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    char y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view find_header(const Headers& headers, std::string_view name) {
  for (const Header& h : headers) {
    if (iequals(h.name, name)) return h.value;
  }
  return {};
}

std::string_view Request::path() const {
  const std::string_view t(target);
  return t.substr(0, t.find('?'));
}

std::string_view Request::query() const {
  const std::string_view t(target);
  const size_t q = t.find('?');
  return q == std::string_view::npos ? std::string_view() : t.substr(q + 1);
}

Response Response::json(int status, std::string body) {
  return Response{status, {{"Content-Type", "application/json"}}, std::move(body)};
}

Response Response::text(int status, std::string body) {
  return Response{status, {{"Content-Type", "text/plain; charset=utf-8"}}, std::move(body)};
}

}  // namespace infera::http
