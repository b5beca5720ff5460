#include "infera/launcher/kv_events_config.h"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <limits>

namespace infera::launcher {
namespace json = boost::json;

KvEventsConfig default_enabled_kv_events_config() {
  KvEventsConfig c;
  c.enable_kv_cache_events = true;
  c.publisher = "zmq";
  c.endpoint = "tcp://*:5557";
  c.replay_endpoint = "tcp://*:5558";
  c.topic = "kv-events";
  return c;
}

namespace {

Status key_error(std::string_view key, std::string_view what) {
  return invalid_argument("--kv-events-config: '" + std::string(key) + "' " + std::string(what));
}

Result<uint32_t> positive_u32(std::string_view key, const json::value& v) {
  int64_t n = 0;
  if (v.is_int64()) {
    n = v.get_int64();
  } else if (v.is_uint64() && v.get_uint64() <= uint64_t{std::numeric_limits<uint32_t>::max()}) {
    n = static_cast<int64_t>(v.get_uint64());
  } else {
    return key_error(key, "must be a positive integer");
  }
  if (n <= 0 || n > int64_t{std::numeric_limits<uint32_t>::max()}) {
    return key_error(key, "must be a positive integer");
  }
  return static_cast<uint32_t>(n);
}

}  // namespace

Result<std::string> parse_kv_transfer_connector(std::string_view text) {
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return invalid_argument("--kv-transfer-config must be a JSON object");
  const json::value* connector = v.get_object().if_contains("kv_connector");
  if (connector == nullptr) return std::string();
  if (!connector->is_string()) {
    return invalid_argument("--kv-transfer-config: \"kv_connector\" must be a string");
  }
  return std::string(connector->get_string());
}

Result<KvEventsConfig> parse_kv_events_config(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) {
    return invalid_argument("--kv-events-config must be a JSON object, e.g. "
                            "'{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\"}'");
  }
  KvEventsConfig c;  // vLLM's defaults for every key left out
  c.publisher.clear();
  for (const auto& [key, value] : v.get_object()) {
    if (key == "enable_kv_cache_events") {
      if (!value.is_bool()) return key_error(key, "must be true or false");
      c.enable_kv_cache_events = value.get_bool();
    } else if (key == "publisher") {
      if (value.is_null()) continue;
      if (!value.is_string()) return key_error(key, "must be a string");
      c.publisher = std::string(value.get_string());
      if (c.publisher != "zmq" && c.publisher != "null") {
        return key_error(key, "must be \"zmq\" or \"null\" (got \"" + c.publisher + "\")");
      }
    } else if (key == "endpoint") {
      if (!value.is_string() || value.get_string().empty()) {
        return key_error(key, "must be a non-empty string");
      }
      c.endpoint = std::string(value.get_string());
    } else if (key == "replay_endpoint") {
      if (value.is_null()) {
        c.replay_endpoint.clear();
        continue;
      }
      if (!value.is_string()) return key_error(key, "must be a string or null");
      c.replay_endpoint = std::string(value.get_string());
    } else if (key == "topic") {
      if (!value.is_string()) return key_error(key, "must be a string");
      c.topic = std::string(value.get_string());
    } else if (key == "buffer_steps") {
      INFERA_ASSIGN_OR_RETURN(c.buffer_steps, positive_u32(key, value));
    } else if (key == "hwm") {
      INFERA_ASSIGN_OR_RETURN(c.hwm, positive_u32(key, value));
    } else if (key == "max_queue_size") {
      INFERA_ASSIGN_OR_RETURN(c.max_queue_size, positive_u32(key, value));
    } else {
      return invalid_argument(
          "--kv-events-config: unknown key '" + std::string(key) +
          "' (known: enable_kv_cache_events, publisher, endpoint, replay_endpoint, buffer_steps, "
          "hwm, max_queue_size, topic)");
    }
  }
  // vLLM __post_init__: an unset publisher is "zmq" when events are enabled, else "null".
  if (c.publisher.empty()) c.publisher = c.enable_kv_cache_events ? "zmq" : "null";
  return c;
}

}  // namespace infera::launcher
