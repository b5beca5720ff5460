#include "infera/discovery/worker.h"

#include <boost/json.hpp>

#include "infera/config/flags.h"

namespace infera::discovery {
namespace json = boost::json;

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kBoth: return "both";
    case Role::kPrefill: return "prefill";
    case Role::kDecode: return "decode";
  }
  return "both";
}

Result<Role> parse_role(std::string_view text) {
  if (text == "both" || text == "aggregated" || text.empty()) return Role::kBoth;
  if (text == "prefill") return Role::kPrefill;
  if (text == "decode") return Role::kDecode;
  return invalid_argument("unknown role '" + std::string(text) + "' (prefill, decode or both)");
}

std::string_view pd_protocol_name(PdProtocol protocol) {
  return protocol == PdProtocol::kSglang ? "sglang" : "vllm";
}

Result<PdProtocol> parse_pd_protocol(std::string_view text) {
  if (text == "vllm") return PdProtocol::kVllm;
  if (text == "sglang") return PdProtocol::kSglang;
  return invalid_argument("unknown disaggregation protocol '" + std::string(text) +
                          "' (vllm or sglang)");
}

PdProtocol pd_protocol(const WorkerInfo& w) {
  if (!w.pd_protocol.empty()) {
    return w.pd_protocol == "sglang" ? PdProtocol::kSglang : PdProtocol::kVllm;
  }
  return w.engine == "sglang" ? PdProtocol::kSglang : PdProtocol::kVllm;
}

Result<std::string> worker_id_from_url(std::string_view url) {
  std::string_view rest = url;
  if (rest.rfind("http://", 0) == 0) {
    rest.remove_prefix(7);
  } else if (rest.rfind("https://", 0) == 0) {
    rest.remove_prefix(8);  // TLS to the worker (http::Endpoint::tls); the id is host:port still
  } else {
    return invalid_argument("worker URL '" + std::string(url) +
                            "' must start with http:// or https://");
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) {
    return invalid_argument("worker URL '" + std::string(url) + "' must not have a path");
  }
  INFERA_ASSIGN_OR_RETURN(config::HostPort hp, config::parse_host_port(rest));
  for (const char c : hp.host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == ':' || c == '_';
    if (!ok) return invalid_argument("worker URL '" + std::string(url) + "' has a bad host");
  }
  return std::string(rest);
}

Result<WorkerInfo> parse_worker_flag(std::string_view spec) {
  WorkerInfo w;
  const size_t comma = spec.find(',');
  w.url = std::string(spec.substr(0, comma));
  while (!w.url.empty() && w.url.back() == '/') w.url.pop_back();
  std::vector<config::KeyValue> options;
  if (comma != std::string_view::npos) {
    auto parsed = config::parse_key_values(spec.substr(comma + 1));
    if (!parsed.ok()) {
      return invalid_argument("--worker '" + std::string(spec) + "': " + parsed.status().message() +
                              " after the URL");
    }
    options = std::move(*parsed);
  }
  for (const auto& [key, raw] : options) {
    const std::string value(raw);
    if (key == "kv") {
      w.kv_endpoint = value;
    } else if (key == "replay") {
      w.replay_endpoint = value;
    } else if (key == "topic") {
      w.topic = value;
    } else if (key == "role") {
      INFERA_ASSIGN_OR_RETURN(w.role, parse_role(value));
    } else if (key == "model") {
      w.model = value;
    } else if (key == "engine") {
      w.engine = value;
    } else if (key == "bootstrap_port") {
      INFERA_ASSIGN_OR_RETURN(config::HostPort hp, config::parse_host_port("x:" + value));
      w.bootstrap_port = hp.port;
    } else if (key == "pd_protocol") {
      INFERA_RETURN_IF_ERROR(parse_pd_protocol(value).status());
      w.pd_protocol = value;
    } else {
      return invalid_argument("--worker '" + std::string(spec) + "': unknown key '" +
                              std::string(key) +
                              "' (kv, replay, topic, role, model, engine, bootstrap_port, "
                              "pd_protocol)");
    }
  }
  INFERA_ASSIGN_OR_RETURN(w.id, worker_id_from_url(w.url));
  return w;
}

std::string worker_record_json(const WorkerInfo& w) {
  json::object o;
  o["url"] = w.url;
  o["role"] = role_name(w.role);
  if (!w.kv_endpoint.empty()) o["kv_events_endpoint"] = w.kv_endpoint;
  if (!w.replay_endpoint.empty()) o["replay_endpoint"] = w.replay_endpoint;
  if (!w.topic.empty()) o["topic"] = w.topic;
  if (w.block_size) o["block_size"] = w.block_size;
  if (!w.model.empty()) o["model"] = w.model;
  if (!w.engine.empty()) o["engine"] = w.engine;
  if (w.bootstrap_port) o["bootstrap_port"] = w.bootstrap_port;
  if (!w.pd_protocol.empty()) o["pd_protocol"] = w.pd_protocol;
  if (w.dp_size > 1) o["dp_size"] = w.dp_size;
  return json::serialize(o);
}

Result<WorkerInfo> parse_worker_record(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return invalid_argument("worker record is not a JSON object");
  const json::object& o = v.get_object();
  WorkerInfo w;
  auto str = [&](const char* key, std::string& out) -> Status {
    const json::value* x = o.if_contains(key);
    if (!x || x->is_null()) return ok_status();
    if (!x->is_string()) return invalid_argument(std::string("worker record: '") + key + "' must be a string");
    out = std::string(x->get_string());
    return ok_status();
  };
  auto num = [&](const char* key, uint32_t& out) -> Status {
    const json::value* x = o.if_contains(key);
    if (!x || x->is_null()) return ok_status();
    if (x->is_uint64() && x->get_uint64() <= UINT32_MAX) {
      out = static_cast<uint32_t>(x->get_uint64());
    } else if (x->is_int64() && x->get_int64() >= 0 && x->get_int64() <= UINT32_MAX) {
      out = static_cast<uint32_t>(x->get_int64());
    } else {
      return invalid_argument(std::string("worker record: '") + key + "' must be a small integer");
    }
    return ok_status();
  };
  INFERA_RETURN_IF_ERROR(str("url", w.url));
  while (!w.url.empty() && w.url.back() == '/') w.url.pop_back();
  std::string role;
  INFERA_RETURN_IF_ERROR(str("role", role));
  INFERA_ASSIGN_OR_RETURN(w.role, parse_role(role));
  INFERA_RETURN_IF_ERROR(str("kv_events_endpoint", w.kv_endpoint));
  INFERA_RETURN_IF_ERROR(str("replay_endpoint", w.replay_endpoint));
  INFERA_RETURN_IF_ERROR(str("topic", w.topic));
  INFERA_RETURN_IF_ERROR(num("block_size", w.block_size));
  INFERA_RETURN_IF_ERROR(str("model", w.model));
  INFERA_RETURN_IF_ERROR(str("engine", w.engine));
  INFERA_RETURN_IF_ERROR(num("bootstrap_port", w.bootstrap_port));
  INFERA_RETURN_IF_ERROR(str("pd_protocol", w.pd_protocol));
  // An unknown protocol (a newer writer) is not an error: the worker is still routable.
  if (!w.pd_protocol.empty() && !parse_pd_protocol(w.pd_protocol).ok()) w.pd_protocol.clear();
  INFERA_RETURN_IF_ERROR(num("dp_size", w.dp_size));
  if (w.dp_size == 0) w.dp_size = 1;
  INFERA_ASSIGN_OR_RETURN(w.id, worker_id_from_url(w.url));
  return w;
}

std::string worker_key(std::string_view prefix, const WorkerInfo& worker) {
  std::string key(prefix);
  if (!key.empty() && key.back() != '/') key += '/';
  key += role_name(worker.role);
  key += '/';
  key += worker.id;
  return key;
}

}  // namespace infera::discovery
