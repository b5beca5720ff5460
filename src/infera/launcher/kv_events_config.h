// vLLM's --kv-events-config (docs/contracts.md section 2): KvEventsConfig with vLLM's exact keys
// and defaults, the configuration `--enable-kv-events` alone stands for, and the connector name of
// vLLM's --kv-transfer-config. One parser for the two sides that take these flags: the launchers
// (launcher.h), which pass the JSON on to a real engine, and `infera engine mock`
// (mock/mock_options.h), which publishes as vLLM would. Plain values and pure functions; any
// thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "infera/common/status.h"

namespace infera::launcher {

// vLLM's KVEventsConfig (vllm/config/kv_events.py), the keys of --kv-events-config.
struct KvEventsConfig {
  bool enable_kv_cache_events = false;
  std::string publisher = "zmq";  // "zmq" or "null"
  std::string endpoint = "tcp://*:5557";
  std::string replay_endpoint;  // empty: no replay socket (vLLM's None)
  uint32_t buffer_steps = 10000;
  uint32_t hwm = 100000;
  uint32_t max_queue_size = 100000;
  std::string topic;
};

// The configuration `--enable-kv-events` alone stands for (docs/contracts.md section 2): vLLM's
// documented serving example, with a replay socket and the topic "kv-events".
KvEventsConfig default_enabled_kv_events_config();

// Parses the JSON of --kv-events-config. Keys missing from the object keep vLLM's defaults
// (endpoint tcp://*:5557, no replay, topic ""); an unknown key or a wrong type is an error.
Result<KvEventsConfig> parse_kv_events_config(std::string_view json);

// The "kv_connector" of vLLM's --kv-transfer-config JSON ("" when absent); not an object, or a
// connector that is not a string, is an error. Other keys are the engine's business.
Result<std::string> parse_kv_transfer_connector(std::string_view json);

}  // namespace infera::launcher
