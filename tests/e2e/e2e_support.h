// Helpers for the end-to-end tests of `infera server`: the real `infera` binary as a child
// process (ready once it prints its "listening on http://HOST:PORT" line; KV-event endpoints read
// off the engine's ready line), blocking loopback HTTP with a deadline on every wait, readers for
// JSON, SSE and Prometheus text, the server's admin view of its workers, and deterministic
// token-id prompts. Header-only; each object belongs to one test thread.
#pragma once

#include "tests/support/dev_transports.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/subprocess.h"
#include "infera/http/test_support.h"
#include "tests/support/etcd_process.h"

namespace infera::e2e {

namespace json = boost::json;
namespace fs = std::filesystem;
using Ms = std::chrono::milliseconds;
using infera::testing::eventually;

inline const std::string kBinary = std::string(INFERA_BINARY_DIR) + "/bin/infera";
inline const std::string kQwen3 = std::string(INFERA_MODELS_DIR) + "/qwen3";
inline constexpr std::string_view kModel = "m";
inline constexpr std::string_view kTopic = "kv-events";

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// Processes

// A command line to run as an InferaProcess: the argv, variables added to the environment, and
// the words before "http(s)://HOST:PORT" on the line that says it is up.
struct Command {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  std::string ready = "listening on";
};

// One child (`infera ...`, or any command that starts it, such as a Python shim or a launcher)
// with its output (stdout and stderr together) in a temporary file. Ready once it printed
// "listening on http://HOST:PORT" (or the command's own ready words); stopped with SIGTERM (then
// SIGKILL) when destroyed, and killed by the kernel if the test process dies (PR_SET_PDEATHSIG).
class InferaProcess {
 public:
  // `infera <args...>`.
  InferaProcess(const std::string& name, std::vector<std::string> args)
      : InferaProcess(name, with_binary(std::move(args))) {}
  InferaProcess(const std::string& name, Command command)
      : dir_(fs::temp_directory_path() /
             ("infera_gateway_e2e_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    SpawnOptions o;
    o.env = std::move(command.env);
    o.stdout_path = (dir_ / "log").string();
    o.stderr_path = "stdout";
    auto p = Subprocess::spawn(command.argv, o);
    if (!p.ok()) {
      ADD_FAILURE() << name << ": " << p.status().to_string();
      return;
    }
    process_ = std::move(*p);
    const std::regex ready(command.ready + R"( (https?)://([0-9.]+):(\d+))");
    static const std::regex kEvents(R"(kv events on (\S+), replay (\S+),)");
    std::smatch m;
    std::string out;
    eventually(
        [&] {
          out = read_text(dir_ / "log");
          return std::regex_search(out, m, ready) || !process_.running();
        },
        Ms(60'000));
    if (!std::regex_search(out, m, ready)) {
      ADD_FAILURE() << name << " did not start:\n" << log();
      return;
    }
    scheme_ = m[1].str();
    id_ = m[2].str() + ":" + m[3].str();
    port_ = static_cast<uint16_t>(std::stoi(m[3].str()));
    if (std::regex_search(out, m, kEvents)) {
      kv_endpoint_ = m[1].str();
      replay_endpoint_ = m[2].str();
    }
  }
  InferaProcess(const InferaProcess&) = delete;
  InferaProcess& operator=(const InferaProcess&) = delete;
  ~InferaProcess() {
    process_.stop(Ms(5000));
    fs::remove_all(dir_);
  }

  bool ready() const { return port_ != 0; }
  uint16_t port() const { return port_; }
  const std::string& id() const { return id_; }  // host:port, the server's worker id
  std::string url() const { return scheme_ + "://" + id_; }  // https with --ssl-certfile
  const std::string& kv_endpoint() const { return kv_endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  // The static-discovery flag value for this engine: URL,kv=...,replay=...,topic=...
  std::string worker_flag() const {
    return url() + ",kv=" + kv_endpoint_ + ",replay=" + replay_endpoint_ +
           ",topic=" + std::string(kTopic);
  }
  std::string log() const { return read_text(dir_ / "log"); }
  Subprocess& process() { return process_; }
  const fs::path& dir() const { return dir_; }

 private:
  static Command with_binary(std::vector<std::string> args) {
    args.insert(args.begin(), kBinary);
    return Command{std::move(args), {}};
  }

  fs::path dir_;
  Subprocess process_;
  std::string scheme_ = "http";
  std::string id_;
  uint16_t port_ = 0;
  std::string kv_endpoint_;
  std::string replay_endpoint_;
};

// `infera engine mock` serving model "m" with KV events. The PUB and replay sockets bind a
// wildcard port on loopback (a '*' endpoint binds, as in vLLM); the ready line names the ports.
// `kv_events_keys` adds keys to the --kv-events-config object (e.g. R"("buffer_steps":3)").
inline std::unique_ptr<InferaProcess> start_engine(const std::string& name,
                                                   std::vector<std::string> flags = {},
                                                   const std::string& kv_events_keys = {}) {
  std::vector<std::string> args = {
      "engine",
      "mock",
      "--host",
      "127.0.0.1",
      "--port",
      "0",
      "--model",
      std::string(kModel),
      "--shutdown-grace-s",
      "2",
      "--log-level",
      "warn",
      "--kv-events-config",
      R"({"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:*",)"
      R"("replay_endpoint":"tcp://127.0.0.1:*","topic":")" + std::string(kTopic) + "\"" +
          (kv_events_keys.empty() ? "" : "," + kv_events_keys) + "}"};
  args.insert(args.end(), flags.begin(), flags.end());
  args = infera::testing::with_dev_transports(std::move(args));
  return std::make_unique<InferaProcess>(name, std::move(args));
}

inline std::unique_ptr<InferaProcess> start_server(const std::string& name,
                                                   std::vector<std::string> flags) {
  std::vector<std::string> args = {"server", "--host",      "127.0.0.1",
                                   "--port", "0",           "--shutdown-grace-s",
                                   "2",      "--log-level", "warn"};
  args.insert(args.end(), flags.begin(), flags.end());
  args = infera::testing::with_dev_transports(std::move(args));
  return std::make_unique<InferaProcess>(name, std::move(args));
}

// ---------------------------------------------------------------------------------------------
// HTTP

struct Reply {
  int status = 0;
  bool complete = false;  // the whole response arrived (a stream: its final chunk too)
  std::string body;       // de-chunked
  std::map<std::string, std::string> headers;
  double first_data_ms = -1;  // from sending the request to the first "data: " of a stream
  std::string error;          // status 0: what failed (connect, send, or the answer's head)
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

inline std::string request_text(std::string_view method, std::string_view target,
                                std::string_view body) {
  std::string r = std::string(method) + " " + std::string(target) +
                  " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (method == "POST") {
    r +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  r += "\r\n";
  r += body;
  return r;
}

// One request on a fresh connection. For a stream, the time to its first SSE event is kept.
inline Reply http_call(uint16_t port, std::string_view method, std::string_view target,
                       std::string_view body = {}, Ms deadline = Ms(60'000)) {
  Reply out;
  http::testing::RawConn c(port);
  if (!c.ok()) {
    out.error = std::string("connect: ") + std::strerror(errno);
    return out;
  }
  if (!c.send_all(request_text(method, target, body))) {
    out.error = std::string("send: ") + std::strerror(errno);
    return out;
  }
  const auto sent = std::chrono::steady_clock::now();
  if (body.find("\"stream\":true") != std::string_view::npos && c.read_until("data: ", deadline)) {
    out.first_data_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count();
  }
  http::testing::RawResponse r = c.read_response(deadline);
  out.status = r.status;
  if (r.status == 0) out.error = "no answer head before the deadline or the connection's end";
  out.complete = r.complete;
  out.body = std::move(r.body);
  out.headers = std::move(r.headers);
  return out;
}

inline Reply post(uint16_t port, std::string_view target, std::string_view body,
                  Ms deadline = Ms(60'000)) {
  return http_call(port, "POST", target, body, deadline);
}
inline Reply get(uint16_t port, std::string_view target) {
  return http_call(port, "GET", target);
}

// ---------------------------------------------------------------------------------------------
// JSON, SSE, Prometheus text

inline json::value parse_json(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  return ec ? json::value() : v;
}

// The value at a '/'-separated path of object keys and array indexes, or null.
inline const json::value* find(const json::value& root, std::string_view path) {
  const json::value* v = &root;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view key = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (v->is_object()) {
      v = v->get_object().if_contains(key);
    } else if (v->is_array()) {
      const size_t i = std::strtoul(std::string(key).c_str(), nullptr, 10);
      v = i < v->get_array().size() ? &v->get_array()[i] : nullptr;
    } else {
      v = nullptr;
    }
    if (v == nullptr) return nullptr;
  }
  return v;
}

inline int64_t int_at(const json::value& root, std::string_view path, int64_t fallback = -1) {
  const json::value* v = find(root, path);
  if (v == nullptr) return fallback;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->get_uint64());
  return fallback;
}

inline std::string string_at(const json::value& root, std::string_view path) {
  const json::value* v = find(root, path);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

// The payloads of a response's SSE events ("data: X\n\n" -> X), in order.
inline std::vector<std::string> sse_data(std::string_view body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string_view::npos) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string_view::npos) break;
    out.emplace_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

// The usage object of a response: the JSON body's, or the last stream chunk that has one.
inline json::value usage_of(const Reply& r) {
  if (r.body.find("data: ") == std::string::npos) {
    const json::value body = parse_json(r.body);
    const json::value* u = find(body, "usage");
    return u ? *u : json::value();
  }
  json::value last;
  for (const std::string& d : sse_data(r.body)) {
    const json::value chunk = parse_json(d);
    if (const json::value* u = find(chunk, "usage"); u != nullptr && u->is_object()) last = *u;
  }
  return last;
}

// The sum of every sample of metric `name` (any labels) in Prometheus text.
inline double metric_sum(std::string_view text, std::string_view name) {
  double sum = 0;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(name) || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    sum += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return sum;
}

// ---------------------------------------------------------------------------------------------
// The server's admin view

struct WorkerRow {
  int64_t requests = 0;
  int64_t inflight = 0;
  int64_t active_requests = 0;
  int64_t active_blocks = 0;
  int64_t cached_blocks = 0;
  int64_t blocks_stored = 0;  // applied from the worker's KV events since it joined
  int64_t failures = 0;
  std::vector<std::string> models;
  std::string state;  // healthy, backoff, refused
  // The KV-event subscriber: live, stale or none; sequence gaps, replays, engine restarts
  // detected, transitions to stale.
  std::string events_state;
  int64_t gaps = 0;
  int64_t replays = 0;
  int64_t restarts = 0;
  int64_t stale_transitions = 0;
};
using WorkerTable = std::map<std::string, WorkerRow>;  // by worker id

// GET /v1/admin/workers; nullopt when the server did not answer 200.
inline std::optional<WorkerTable> workers(uint16_t server_port) {
  const Reply r = get(server_port, "/v1/admin/workers");
  if (r.status != 200) return std::nullopt;
  const json::value v = parse_json(r.body);
  const json::value* list = find(v, "workers");
  if (list == nullptr || !list->is_array()) return std::nullopt;
  WorkerTable out;
  for (const json::value& w : list->get_array()) {
    WorkerRow row;
    row.requests = int_at(w, "requests");
    row.inflight = int_at(w, "inflight_requests");
    row.active_requests = int_at(w, "active_requests");
    row.active_blocks = int_at(w, "active_blocks");
    row.cached_blocks = int_at(w, "cached_blocks");
    row.blocks_stored = int_at(w, "kv_events/blocks_stored", 0);
    row.failures = int_at(w, "failures");
    row.state = string_at(w, "state");
    row.events_state = string_at(w, "kv_events/state");
    row.gaps = int_at(w, "kv_events/gaps", 0);
    row.replays = int_at(w, "kv_events/replays", 0);
    row.restarts = int_at(w, "kv_events/restarts", 0);
    row.stale_transitions = int_at(w, "kv_events/stale_transitions", 0);
    if (const json::value* m = find(w, "models"); m && m->is_array()) {
      for (const json::value& name : m->get_array()) {
        if (name.is_string()) row.models.emplace_back(name.get_string());
      }
    }
    out[string_at(w, "worker_id")] = std::move(row);
  }
  return out;
}

// True once the server lists exactly `ids`, each knowing it serves model "m" (its /v1/models
// probe answered), none with a request in flight.
inline bool fleet_is(uint16_t server_port, const std::vector<std::string>& ids) {
  auto t = workers(server_port);
  if (!t || t->size() != ids.size()) return false;
  for (const std::string& id : ids) {
    auto it = t->find(id);
    if (it == t->end() || it->second.models != std::vector<std::string>{std::string(kModel)} ||
        it->second.inflight != 0 || it->second.active_requests != 0) {
      return false;
    }
  }
  return true;
}

inline int64_t block_count(uint16_t server_port, const std::string& worker_id) {
  const Reply r = get(server_port, "/v1/admin/cache-view/" + worker_id);
  return r.status == 200 ? int_at(parse_json(r.body), "block_count") : -1;
}

// ---------------------------------------------------------------------------------------------
// Prompts

// n token ids from a seeded generator, in [1000, 31000): valid for the mock's synthetic
// vocabulary (32000) and any real one.
inline std::vector<uint32_t> token_ids(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> ids(n);
  for (uint32_t& id : ids) id = static_cast<uint32_t>(1000 + rng() % 30000);
  return ids;
}

inline std::vector<uint32_t> concat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A /v1/completions body with a token-id prompt; streamed ones ask for usage in the last chunk.
inline std::string completion_body(const std::vector<uint32_t>& ids, int max_tokens,
                                   bool stream = false) {
  std::string s = R"({"model":")" + std::string(kModel) + R"(","prompt":[)";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  s += "],\"max_tokens\":" + std::to_string(max_tokens) + ",\"ignore_eos\":true";
  if (stream) s += R"(,"stream":true,"stream_options":{"include_usage":true})";
  s += "}";
  return s;
}

// Sends one non-streamed request (to /v1/completions, /v1/chat/completions) through the server
// and reports where it went: the worker whose request counter moved, read once the server has
// finished with the request (nothing in flight) and, when the prompt ends in at least one block
// no worker holds (`stores_blocks`), has applied the worker's KV events for it, so the next
// request is routed on a settled mirror.
struct Routed {
  int status = 0;
  std::string worker;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
};

inline Routed send_traced(uint16_t server, std::string_view target, std::string_view body,
                          bool stores_blocks = true) {
  Routed out;
  const std::optional<WorkerTable> before = workers(server);
  EXPECT_TRUE(before.has_value());
  if (!before) return out;
  int64_t stored_before = 0;
  for (const auto& [id, w] : *before) stored_before += w.blocks_stored;
  const Reply r = post(server, target, body);
  out.status = r.status;
  EXPECT_EQ(r.status, 200) << r.body;
  const json::value usage = usage_of(r);
  out.prompt_tokens = int_at(usage, "prompt_tokens");
  out.cached_tokens = int_at(usage, "prompt_tokens_details/cached_tokens");
  std::optional<WorkerTable> after;
  const bool settled = eventually([&] {
    after = workers(server);
    if (!after) return false;
    int64_t served = 0;
    int64_t stored = 0;
    for (const auto& [id, w] : *after) {
      if (w.inflight != 0 || w.active_requests != 0) return false;
      auto old = before->find(id);
      served += w.requests - (old == before->end() ? 0 : old->second.requests);
      stored += w.blocks_stored;
    }
    return served == 1 && (!stores_blocks || stored > stored_before);
  });
  if (!settled) {  // what the router's view still showed, to tell which condition held out
    std::string view;
    for (const auto& [id, w] : after.value_or(WorkerTable{})) {
      const auto old = before->find(id);
      view += " " + id + ": requests " + std::to_string(w.requests) + " (was " +
              std::to_string(old == before->end() ? 0 : old->second.requests) + "), inflight " +
              std::to_string(w.inflight) + ", active " + std::to_string(w.active_requests) +
              ", stored " + std::to_string(w.blocks_stored) + ", events " + w.events_state + ";";
    }
    ADD_FAILURE() << "the server did not settle after a request (blocks stored before: "
                  << stored_before << ");" << view;
  }
  if (!after) return out;
  for (const auto& [id, w] : *after) {
    auto old = before->find(id);
    if (w.requests > (old == before->end() ? 0 : old->second.requests)) out.worker = id;
  }
  return out;
}

// A completion of token ids with 2 output tokens.
inline Routed send_traced(uint16_t server, const std::vector<uint32_t>& ids) {
  return send_traced(server, "/v1/completions", completion_body(ids, 2));
}

}  // namespace infera::e2e
