#include "infera/proxy/bodies.h"

#include <boost/json.hpp>

#include "infera/http/sse.h"

namespace infera::proxy {

std::string prefill_body(std::string_view client_body) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(client_body, ec);
  if (ec || !v.is_object()) return std::string(client_body);
  boost::json::object& o = v.as_object();
  o["max_tokens"] = 1;
  if (o.contains("max_completion_tokens")) o["max_completion_tokens"] = 1;
  o["stream"] = false;
  o.erase("stream_options");
  o.erase("min_tokens");  // not supported by a prefill instance
  o.erase("min_completion_tokens");
  boost::json::object params;
  params["do_remote_decode"] = true;
  params["do_remote_prefill"] = false;
  params["remote_engine_id"] = nullptr;
  params["remote_block_ids"] = nullptr;
  params["remote_host"] = nullptr;
  params["remote_port"] = nullptr;
  o["kv_transfer_params"] = std::move(params);
  return boost::json::serialize(v);
}

std::string with_fields(std::string_view client_body,
                        const std::vector<std::pair<std::string_view, std::string>>& fields) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(client_body, ec);
  if (ec || !v.is_object()) return std::string(client_body);
  boost::json::object& o = v.as_object();
  const size_t close = client_body.rfind('}');
  bool clash = close == std::string_view::npos;
  for (const auto& [name, value] : fields) clash = clash || o.contains(name);
  if (clash) {
    for (const auto& [name, value] : fields) o[name] = boost::json::parse(value, ec);
    return boost::json::serialize(v);
  }
  // Appending keeps the client's bytes (and so its numbers' spelling) as they came.
  std::string out(client_body.substr(0, close));
  bool first = o.empty();
  for (const auto& [name, value] : fields) {
    if (!first) out += ',';
    first = false;
    out += '"';
    out += name;
    out += "\":";
    out += value;
  }
  out += client_body.substr(close);
  return out;
}

std::string decode_body(std::string_view client_body, std::string_view params) {
  return with_fields(client_body, {{"kv_transfer_params", std::string(params)}});
}

std::string bootstrap_body(std::string_view client_body, std::string_view host, uint32_t port,
                           uint64_t room) {
  return with_fields(client_body,
                     {{"bootstrap_host", boost::json::serialize(boost::json::value(
                                             boost::json::string_view(host.data(), host.size())))},
                      {"bootstrap_port", port ? std::to_string(port) : std::string("null")},
                      {"bootstrap_room", std::to_string(room)}});
}

std::string_view bootstrap_host(std::string_view worker_id) {
  return worker_id.substr(0, worker_id.rfind(':'));
}

std::optional<std::string> transfer_params(std::string_view answer_body) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(answer_body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const boost::json::value* p = v.get_object().if_contains("kv_transfer_params");
  if (p == nullptr || !p->is_object()) return std::nullopt;
  return boost::json::serialize(*p);
}

Status check_prefill_answer(const http::Response& answer) {
  if (answer.status >= 300) {
    return unavailable("prefill worker answered HTTP " + std::to_string(answer.status));
  }
  if (answer.header("Content-Type").rfind(http::kSseContentType, 0) != 0) return ok_status();
  http::SseParser parser;
  parser.feed(answer.body);
  http::SseEvent ev;
  while (parser.next(ev)) {
    if (ev.data.starts_with("{\"error\"")) {
      return unavailable("prefill worker's stream ended with an error: " + std::string(ev.data));
    }
  }
  return parser.status();
}

}  // namespace infera::proxy
