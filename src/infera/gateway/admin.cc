// The gateway's non-inference endpoints: /v1/models, /health, /livez, /readyz, /tokenize
// (public), and /metrics, /v1/admin/cache-view/<id>, /v1/admin/workers, /v1/admin/route-explain
// (admin, behind --admin-token when set).
#include <algorithm>
#include <cstring>

#include <boost/json.hpp>

#include "infera/gateway/context.h"
#include "infera/http/error.h"
#include "infera/http/net.h"

namespace infera::gateway {
namespace json = boost::json;
namespace {

http::Response json_response(int status, const json::value& v) {
  return http::Response::json(status, json::serialize(v));
}

// Constant-time comparison: the token check does not leak how much of a guess was right.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Worker ids are host:port; anything else is refused before it reaches a lookup or a log.
bool valid_worker_id(std::string_view id) {
  if (id.empty() || id.size() > 270) return false;
  for (const char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == ':' || c == '_' || c == '[' || c == ']';
    if (!ok) return false;
  }
  return true;
}

// A worker's in-flight load by phase (ActiveLoad), as /v1/admin/workers and route-explain show it.
void add_load(json::object& o, const kv::WorkerLoad& load) {
  o["active_blocks"] = load.active_blocks;
  o["active_requests"] = load.active_requests;
  o["prefill_blocks"] = load.prefill_blocks;
  o["prefill_requests"] = load.prefill_requests;
  o["decode_blocks"] = load.decode_blocks;
  o["decode_requests"] = load.decode_requests;
}

json::object worker_json(const GatewayContext& g, const FleetMember& m) {
  json::object o;
  o["worker_id"] = m.info.id;
  o["url"] = m.info.url;
  o["role"] = discovery::role_name(m.info.role);
  if (!m.info.engine.empty()) o["engine"] = m.info.engine;
  if (m.info.role != discovery::Role::kBoth) {
    o["pd_protocol"] = discovery::pd_protocol_name(discovery::pd_protocol(m.info));
  }
  if (m.info.bootstrap_port) o["bootstrap_port"] = m.info.bootstrap_port;
  json::array models;
  for (const std::string& model : m.models) models.push_back(json::string(model));
  std::string engine_metrics_error;
  {
    std::lock_guard lock(m.rt->mu);
    engine_metrics_error = m.rt->engine_metrics_error;
  }
  o["models"] = std::move(models);
  o["block_size"] = m.block_size ? json::value(m.block_size) : json::value(nullptr);
  o["cached_blocks"] = g.index.block_count(m.slot);
  add_load(o, g.load.load(m.slot));
  o["predicted_blocks"] = g.predicted.size(m.slot);
  o["inflight_requests"] = m.rt->inflight.load();
  o["requests"] = m.rt->requests.load();
  o["failures"] = m.rt->failures.load();
  o["state"] = g.fleet->health(m);
  if (m.refused()) o["refused_reason"] = m.refused_reason;
  // The engine's own account of its load, polled from its /metrics: the last reading however
  // old ("engine" already names the record's engine kind), and why polling fails, while it does.
  if (const std::optional<kv::EngineReading> r = g.engine_signals.last(m.slot)) {
    json::object e;
    e["waiting"] = r->waiting;
    e["running"] = r->running;
    e["kv_cache_usage"] = r->kv_usage;
    e["age_s"] = to_seconds(g.clock.now() - r->at);
    o["engine_load"] = std::move(e);
  } else {
    o["engine_load"] = nullptr;
  }
  if (!engine_metrics_error.empty()) o["engine_metrics_error"] = engine_metrics_error;
  json::object ev;
  if (const std::optional<events::StreamStats> stats = g.fleet->event_stats(m)) {
    const events::StreamStats& s = *stats;
    ev["state"] = events::subscriber_state_name(s.state);
    ev["endpoint"] = g.fleet->event_source(m);
    ev["batches"] = s.batches;
    ev["events_applied"] = s.applied.events_applied;
    ev["blocks_stored"] = s.applied.blocks_stored;
    ev["blocks_removed"] = s.applied.blocks_removed;
    ev["rejected"] = s.applied.rejected_total();
    ev["decode_errors"] = s.decode_errors_total();
    ev["gaps"] = s.gaps;
    ev["replays"] = s.replays;
    ev["replay_failures"] = s.replay_failures;
    ev["restarts"] = s.restarts;
    ev["stale_transitions"] = s.stale_transitions;
  } else {
    ev["state"] = "none";
  }
  o["kv_events"] = std::move(ev);
  return o;
}

// Workers a request could be routed to: every member not refused. One in backoff counts (the
// router tries it when all are), and so does one at its in-flight cap (requests queue for it).
size_t routable_workers(const FleetView& view) {
  size_t n = 0;
  for (const FleetMember& m : view.members) n += m.refused() ? 0u : 1u;
  return n;
}

net::awaitable<http::Response> route_explain(GatewayContext& g, http::Request& request) {
  // The same body as a completions or chat request; nothing is routed or registered.
  const bool chat = request.body.find("\"messages\"") != std::string::npos;
  const ApiKind kind = chat ? ApiKind::kChatCompletions : ApiKind::kCompletions;
  std::string param;
  auto parsed = parse_openai_request(kind, request.body, g.limits, &param);
  if (!parsed.ok()) {
    co_return http::error_response(parsed.status(),
                                   {.origin = http::ErrorOrigin::kRequestBody, .param = param});
  }
  Nanos tokenize_time{0};
  auto ids = prompt_tokens(g, *parsed, tokenize_time);
  if (!ids.ok()) {
    co_return http::error_response(ids.status(), {.origin = http::ErrorOrigin::kRequestBody});
  }
  const auto view = g.fleet->view();
  std::vector<uint64_t> hashes;
  prompt_hashes(g, *parsed, g.fleet->lookup(*view, parsed->model).adapter, *ids, hashes);
  json::array stages;
  // A split fleet (prefill and decode pools) shows both stages' tables, as a request is routed.
  const bool disaggregated = g.fleet->split(*view, parsed->model);
  std::vector<routing::Stage> wanted;
  if (disaggregated) {
    wanted = {routing::Stage::kPrefill, routing::Stage::kDecode};
  } else {
    wanted = {routing::Stage::kAggregated};
  }
  // The decode stage is scored among the workers that speak the prefill winner's protocol.
  std::optional<discovery::PdProtocol> protocol;
  for (const routing::Stage stage : wanted) {
    std::vector<kv::WorkerId> candidates;
    g.fleet->candidates(*view, parsed->model, stage, {}, candidates);
    if (protocol) keep_protocol(*view, *protocol, candidates);
    json::object s;
    s["stage"] = routing::stage_name(stage);
    auto d = g.router->score(hashes, static_cast<uint32_t>(ids->size()), candidates, stage);
    if (!d.ok()) {
      s["error"] = d.status().message();
      stages.push_back(std::move(s));
      continue;
    }
    s["policy"] = d->policy;
    s["overlap_weight"] = d->overlap_weight;
    const routing::LoadModelOptions& lm = g.router->options().load;
    s["load_model"] = routing::load_model_name(lm.model);
    if (lm.model == routing::LoadModel::kPrefillAware) {
      s["prefill_load_weight"] = lm.prefill_weight;
      s["decode_load_weight"] = lm.decode_weight;
    }
    s["tier_credit"] = routing::format_tier_credit(lm.tier_credit);
    s["predicted_ttl_s"] = lm.predicted_ttl_s;
    s["engine_reading_max_age_s"] = lm.engine_reading_max_age_s();
    s["overload_threshold"] = lm.overload_blocks;
    s["gated_workers"] = d->gated;
    s["request_blocks"] = d->request_blocks;
    const FleetMember* winner = view->by_slot(d->worker());
    s["winner"] = winner ? json::value(winner->info.id) : json::value(nullptr);
    if (stage == routing::Stage::kPrefill && winner != nullptr) {
      protocol = discovery::pd_protocol(winner->info);
    }
    json::array rows;
    for (const routing::Candidate& c : d->table) {
      const FleetMember* m = view->by_slot(c.worker);
      json::object row;
      row["worker_id"] = m ? m->info.id : std::string("?");
      row["cache_hits"] = c.cache_hits;
      row["request_blocks"] = d->request_blocks;
      add_load(row, c.load);
      row["cost"] = c.cost;
      // The load model's terms (routing/load_model.h): what the cost is made of.
      row["predicted_hits"] = c.predicted_hits;
      row["lower_tier_hits"] = c.lower_hits;
      row["disk_hits"] = c.disk_hits;
      row["credited_hits"] = c.credited_hits;
      row["overlap_cost"] = c.cost - c.load_terms.total;
      row["gated"] = c.gated;
      row["load_prefill"] = c.load_terms.prefill;
      row["load_decode"] = c.load_terms.decode;
      row["load_hidden"] = c.load_terms.hidden;
      row["engine_reading_used"] = c.engine_fresh;
      row["load"] = c.load_terms.total;
      rows.push_back(std::move(row));
    }
    s["workers"] = std::move(rows);
    stages.push_back(std::move(s));
  }
  json::object root;
  root["prompt_tokens"] = ids->size();
  // A prompt with media: its blocks from here on are keyed by the media too (prompt_hashes).
  if (parsed->media_digest != 0) root["media_from_token"] = parsed->media_from_token;
  root["block_size"] = g.config.block_size;
  root["disaggregated"] = disaggregated;
  if (protocol) root["protocol"] = discovery::pd_protocol_name(*protocol);
  root["stages"] = std::move(stages);
  co_return json_response(200, root);
}

// The bearer token of `r`'s Authorization header; empty when there is none.
std::string_view bearer_of(const http::Request& r) {
  const std::string_view auth = r.header("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() <= kBearer.size() || auth.substr(0, kBearer.size()) != kBearer) return {};
  return auth.substr(kBearer.size());
}

}  // namespace

std::optional<http::Response> check_admin(const GatewayContext& g, const http::Request& r) {
  const std::shared_ptr<const std::string> token = g.admin_token.load();  // a reload swaps it
  if (token->empty()) return std::nullopt;
  if (same_secret(bearer_of(r), *token)) return std::nullopt;
  return http::error_response(unauthenticated("a valid admin bearer token is required"),
                              {.code = "invalid_api_key"});
}

std::optional<http::Response> check_api_key(const GatewayContext& g, http::Request& r) {
  const std::shared_ptr<const std::vector<std::string>> keys = g.api_keys.load();  // reloadable
  if (keys->empty()) return std::nullopt;
  const std::string_view given = bearer_of(r);
  bool match = false;
  for (const std::string& key : *keys) match |= same_secret(given, key);  // every key compared
  if (!match) {
    return http::error_response(
        unauthenticated("a valid API key is required: 'Authorization: Bearer KEY'"),
        {.code = "invalid_api_key"});
  }
  if (g.config.strip_authorization) {
    std::erase_if(r.headers, [](const http::Header& h) { return http::iequals(h.name, "Authorization"); });
  }
  return std::nullopt;
}

void add_public_routes(GatewayContext& g, http::Routes& routes) {
  routes.add(http::Method::kGet, "/v1/models",
             [&g](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
               if (auto denied = check_api_key(g, r)) co_return std::move(*denied);
               json::array data;
               for (const std::string& m : g.fleet->models()) {
                 data.push_back(json::object{{"id", m}, {"object", "model"}, {"created", 0},
                                             {"owned_by", "infera"}});
               }
               co_return json_response(200, json::object{{"object", "list"}, {"data", data}});
             });
  // One model, as OpenAI's GET /v1/models/{model}; an OpenAI-shaped 404 for a model no worker
  // serves. Model ids may contain '/' (org/name): the whole rest of the path is the id.
  routes.add_prefix(http::Method::kGet, "/v1/models/",
                    [&g](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
                      if (auto denied = check_api_key(g, r)) co_return std::move(*denied);
                      const std::string id(r.path().substr(std::string_view("/v1/models/").size()));
                      for (const std::string& m : g.fleet->models()) {
                        if (m != id) continue;
                        co_return json_response(200, json::object{{"id", m}, {"object", "model"},
                                                                  {"created", 0}, {"owned_by", "infera"}});
                      }
                      co_return http::error_response(
                          not_found("the model '" + id.substr(0, 256) + "' does not exist"),
                          {.param = "model", .code = "model_not_found"});
                    });
  routes.add(http::Method::kGet, "/health",
             [&g](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
               const auto view = g.fleet->view();
               std::vector<kv::WorkerId> routable;
               g.fleet->candidates(*view, "", routing::Stage::kAggregated, {}, routable);
               size_t prefill = 0;
               for (const FleetMember& m : view->members) {
                 prefill += m.info.role == discovery::Role::kPrefill ? 1 : 0;
               }
               const bool ok = !routable.empty() || prefill > 0;
               co_return json_response(ok ? 200 : 503,
                                       json::object{{"status", ok ? "ok" : "no workers"},
                                                    {"workers", view->members.size()}});
             });
  // Probes (never behind the admin token). Liveness: the process serves HTTP, whatever its fleet.
  routes.add(http::Method::kGet, "/livez",
             [](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
               co_return json_response(200, json::object{{"status", "ok"}});
             });
  // Readiness: send traffic here. Not while draining (SIGTERM), nor without a routable worker.
  routes.add(http::Method::kGet, "/readyz",
             [&g](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
               const size_t routable = routable_workers(*g.fleet->view());
               const char* reason = g.draining.load()           ? "draining"
                                    : !g.replicas.warm.load()     ? "warming up"
                                    : routable == 0               ? "no routable worker"
                                                                  : nullptr;
               if (reason != nullptr) {
                 co_return json_response(
                     503, json::object{{"status", "not ready"}, {"reason", reason}});
               }
               co_return json_response(
                   200, json::object{{"status", "ready"}, {"routable_workers", routable}});
             });
  routes.add(http::Method::kPost, "/tokenize",
             [&g](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
               if (auto denied = check_api_key(g, r)) co_return std::move(*denied);
               if (!g.prompts) {
                 co_return http::error_response(
                     failed_precondition("this server has no tokenizer (--router-tokenizer-path)"));
               }
               const bool chat = r.body.find("\"messages\"") != std::string::npos;
               std::string param;
               auto parsed = parse_openai_request(
                   chat ? ApiKind::kChatCompletions : ApiKind::kCompletions, r.body, g.limits, &param);
               if (!parsed.ok()) {
                 co_return http::error_response(
                     parsed.status(), {.origin = http::ErrorOrigin::kRequestBody, .param = param});
               }
               Nanos t{0};
               auto ids = prompt_tokens(g, *parsed, t);
               if (!ids.ok()) co_return http::error_response(ids.status());
               json::array tokens;
               for (uint32_t id : *ids) tokens.push_back(id);
               co_return json_response(200, json::object{{"count", ids->size()}, {"tokens", tokens}});
             });
}

void add_admin_routes(GatewayContext& g, http::Routes& routes) {
  add_replica_routes(g, routes);
  routes.add(http::Method::kGet, "/metrics",
             [&g](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
               if (auto denied = check_admin(g, r)) co_return std::move(*denied);
               http::Response resp;
               resp.headers.push_back({"Content-Type", "text/plain; version=0.0.4; charset=utf-8"});
               resp.body = g.registry.render();
               co_return resp;
             });
  routes.add_prefix(
      http::Method::kGet, "/v1/admin/cache-view/",
      [&g](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
        if (auto denied = check_admin(g, r)) co_return std::move(*denied);
        const std::string_view id = r.path().substr(std::strlen("/v1/admin/cache-view/"));
        if (!valid_worker_id(id)) {
          co_return http::error_response(invalid_argument("a worker id is host:port"),
                                         {.param = "worker_id"});
        }
        const auto view = g.fleet->view();
        const FleetMember* m = view->find(id);
        if (m == nullptr) {
          co_return http::error_response(not_found("no worker '" + std::string(id) + "'"),
                                         {.param = "worker_id"});
        }
        // Exactly the documented shape: {"worker_id":"0.0.0.0:30000","block_count":47}
        co_return json_response(200, json::object{{"worker_id", m->info.id},
                                                  {"block_count", g.index.block_count(m->slot)}});
      });
  routes.add(http::Method::kGet, "/v1/admin/workers",
             [&g](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
               if (auto denied = check_admin(g, r)) co_return std::move(*denied);
               const auto view = g.fleet->view();
               json::array workers;
               for (const FleetMember& m : view->members) workers.push_back(worker_json(g, m));
               const discovery::SourceHealth h = g.source->health();
               json::object source{{"backend", g.source->describe()},
                                   {"connected", h.connected},
                                   {"invalid_records", h.invalid_records},
                                   {"resyncs", h.resyncs},
                                   {"records", h.records}};
               if (!h.last_error.empty()) source["last_error"] = h.last_error;
               co_return json_response(200, json::object{{"workers", workers},
                                                         {"discovery", std::move(source)}});
             });
  routes.add(http::Method::kPost, "/v1/admin/route-explain",
             [&g](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
               if (auto denied = check_admin(g, r)) co_return std::move(*denied);
               co_return co_await route_explain(g, r);
             });
}

}  // namespace infera::gateway
