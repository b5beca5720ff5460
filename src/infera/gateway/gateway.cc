#include "infera/gateway/gateway.h"

#include "infera/nats/url.h"
#include "infera/proxy/nats_upstream.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "infera/common/heap.h"
#include "infera/common/log.h"
#include "infera/discovery/etcd.h"
#include "infera/discovery/kube_source.h"
#include "infera/gateway/context.h"
#include "infera/http/net.h"
#include "infera/http/tls_files.h"

namespace infera::gateway {

GatewayMetrics::GatewayMetrics(metrics::Registry& r, double request_timeout_s)
    : registry(r),
      duration_buckets(metrics::duration_buckets_seconds(request_timeout_s)),
      tokenize(r.histogram("infera_routing_tokenize_seconds",
                           "Routing decision: chat rendering and tokenization.",
                           metrics::fast_latency_buckets_seconds())),
      hash(r.histogram("infera_routing_hash_seconds", "Routing decision: block hashing.",
                       metrics::fast_latency_buckets_seconds())),
      score(r.histogram("infera_routing_score_seconds",
                        "Routing decision: overlaps, load, cost and pick.",
                        metrics::fast_latency_buckets_seconds())),
      predicted_hit_ratio(r.histogram("infera_routing_predicted_hit_ratio",
                                      "Cached prompt blocks on the chosen worker / prompt blocks.",
                                      metrics::ratio_buckets())),
      retries(r.counter("infera_upstream_retries_total",
                        "Requests sent to another worker after one failed before the first byte.")),
      prompt_tokens(r.counter("infera_prompt_tokens_total", "Prompt tokens routed.")),
      predicted_hit_tokens(
          r.counter("infera_predicted_cached_tokens_total",
                    "Prompt tokens the router expected the chosen worker to have cached.")),
      predicted_on_route_tokens(r.counter(
          "infera_routing_predicted_on_route_tokens_total",
          "Prompt tokens credited on the chosen worker because an earlier request routed there is "
          "computing them (predicted on route, not yet confirmed by its KV events).")),
      lower_tier_hit_tokens(r.counter("infera_routing_lower_tier_hit_tokens_total",
                                      "Prompt tokens the chosen worker holds on a lower tier (CPU "
                                      "or disk), credited at a discount.")),
      overload_gated(r.counter("infera_routing_overload_gated_total",
                               "Routing decisions in which a candidate was past "
                               "--kv-overload-threshold (its cache earned it nothing).")) {}

void GatewayMetrics::count_request(std::string_view route, int status, std::string_view worker,
                                   std::string_view model) {
  registry
      .counter("infera_requests_total", "Requests by route, HTTP status, worker and model.",
               {{"route", std::string(route)},
                {"status", std::to_string(status)},
                {"worker", std::string(worker)},
                {"model", std::string(model)}})
      .inc();
}

void GatewayMetrics::observe_completed(std::string_view model, double ttft_s, double duration_s) {
  const metrics::Labels labels{{"model", std::string(model)}};
  registry
      .histogram("infera_ttft_seconds",
                 "Time from request arrival to the first response byte relayed (router-observed TTFT).",
                 metrics::latency_buckets_seconds(), labels)
      .observe(ttft_s);
  registry
      .histogram("infera_request_duration_seconds", "End-to-end request latency as the router sees it.",
                 duration_buckets, labels)
      .observe(duration_s);
}

void GatewayMetrics::count_affinity(std::string_view outcome) {
  registry
      .counter("infera_response_affinity_total",
               "Responses API requests continuing a stored response (previous_response_id), by "
               "outcome: pinned to the worker that answered it, unknown here, or unavailable.",
               {{"outcome", std::string(outcome)}})
      .inc();
}

void GatewayMetrics::count_generated(std::string_view model, uint64_t tokens) {
  registry
      .counter("infera_generation_tokens_total",
               "Tokens generated for relayed answers, by model: the usage's completion_tokens "
               "when the worker reports it, else the streamed output events.",
               {{"model", std::string(model)}})
      .inc(static_cast<double>(tokens));
}

metrics::Histogram& GatewayMetrics::inter_token_latency(std::string_view model) {
  return registry.histogram("infera_inter_token_latency_seconds",
                            "Gaps between a stream's output events as relayed to the client, by "
                            "model (events that arrive together share their gap).",
                            metrics::latency_buckets_seconds(), {{"model", std::string(model)}});
}

void GatewayMetrics::count_disagg(std::string_view stage, std::string_view worker, int status) {
  registry
      .counter("infera_disagg_requests_total",
               "Calls of disaggregated requests by stage (prefill, decode), worker and status "
               "(an HTTP status; 502 a failed call, 499 the client left).",
               {{"stage", std::string(stage)},
                {"worker", std::string(worker)},
                {"status", std::to_string(status)}})
      .inc();
}

GatewayContext::GatewayContext(const config::ServerConfig& c,
                               const routing::LoadModelOptions& model)
    : config(c),
      predicted(kv::PredictedBlocks::Options{from_seconds(model.predicted_ttl_s), 1024}, clock),
      index(kv::KvIndex::Options{c.block_size, 1024, &predicted}),
      load(kv::ActiveLoad::Options{from_seconds(c.active_block_ttl_s), 1024}, clock) {
  limits.max_json_depth = c.max_json_depth;
  limits.max_messages = c.max_messages;
  limits.max_prompt_tokens = c.max_prompt_tokens;
}

void add_metric_collectors(GatewayContext& g) {
  metrics::add_process_collector(g.registry);
  g.registry
      .gauge("infera_build_info", "1, labelled with the build's version and compiler.",
             {{"version", INFERA_VERSION}, {"compiler", "gcc " __VERSION__}})
      .set(1);
  g.registry.add_collector([&g](metrics::Registry& out) {
    out.gauge("infera_queue_waiting_requests",
              "Requests waiting for a worker below its in-flight cap.")
        .set(static_cast<double>(g.slots.waiting()));
    if (const std::optional<uint64_t> rss = resident_bytes()) {
      out.gauge("process_resident_memory_bytes", "Resident memory size in bytes.")
          .set(static_cast<double>(*rss));
    }
    const discovery::SourceHealth discovery = g.source->health();
    out.gauge("infera_discovery_connected",
              "1 while the discovery backend answers; 0: the last known workers stay in use.")
        .set(discovery.connected ? 1 : 0);
    out.counter("infera_discovery_invalid_records_total",
                "Worker records (etcd values, pods) skipped as malformed.")
        .inc(static_cast<double>(discovery.invalid_records));
    out.counter("infera_discovery_resyncs_total", "Full re-reads (re-lists) of the discovery backend.")
        .inc(static_cast<double>(discovery.resyncs));
    add_replica_metrics(g, out);
    if (g.kv_listener) {
      const auto unattributed = g.kv_listener->unattributed_errors();
      for (const events::MessageError e : {events::MessageError::kUnknownTopic, events::MessageError::kFrameCount}) {
        out.counter("infera_kv_events_unattributed_total",
                    "Messages on --kv-events-bind no worker could be charged with, by reason.",
                    {{"reason", std::string(events::message_error_name(e))}})
            .inc(static_cast<double>(unattributed[static_cast<size_t>(e)]));
      }
    }
    out.counter("infera_predicted_blocks_confirmed_total",
                "Predicted-on-route blocks that the worker's KV events confirmed.")
        .inc(static_cast<double>(g.predicted.confirmed_total()));
    out.counter("infera_predicted_blocks_expired_total",
                "Predicted-on-route blocks whose TTL passed unconfirmed.")
        .inc(static_cast<double>(g.predicted.expired_total()));
    const auto view = g.fleet->view();
    for (const FleetMember& m : view->members) {
      const metrics::Labels w{{"worker", m.info.id}};
      out.gauge("infera_worker_cached_blocks", "GPU blocks the router's mirror holds for the worker.", w)
          .set(static_cast<double>(g.index.block_count(m.slot)));
      out.gauge("infera_worker_active_blocks", "Distinct blocks of the worker's in-flight requests.", w)
          .set(g.load.active_blocks(m.slot));
      out.gauge("infera_worker_inflight_requests", "Requests in flight on the worker.", w)
          .set(m.rt->inflight.load());
      const kv::WorkerLoad load = g.load.load(m.slot);
      out.gauge("infera_worker_prefill_blocks",
                "Blocks the worker must still prefill: uncached blocks of its requests whose first "
                "token has not come back.",
                w)
          .set(load.prefill_blocks);
      out.gauge("infera_worker_decode_blocks",
                "Prompt blocks of the worker's requests past their first token (KV held).", w)
          .set(load.decode_blocks);
      out.gauge("infera_worker_predicted_blocks",
                "Blocks predicted on route for the worker, not yet confirmed or expired.", w)
          .set(g.predicted.size(m.slot));
      if (const std::optional<kv::EngineReading> r = g.engine_signals.last(m.slot)) {
        out.gauge("infera_worker_engine_waiting_requests",
                  "vllm:num_requests_waiting at the worker's last /metrics poll.", w)
            .set(r->waiting);
        out.gauge("infera_worker_engine_running_requests",
                  "vllm:num_requests_running at the worker's last /metrics poll.", w)
            .set(r->running);
        out.gauge("infera_worker_engine_kv_cache_usage",
                  "vllm:kv_cache_usage_perc (0..1) at the worker's last /metrics poll.", w)
            .set(r->kv_usage);
        out.gauge("infera_worker_engine_reading_age_seconds",
                  "Age of the worker's last /metrics reading.", w)
            .set(to_seconds(g.clock.now() - r->at));
      }
      out.gauge("infera_worker_healthy", "1 when the worker is routable, 0 in backoff or refused.", w)
          .set(g.fleet->health(m) == "healthy" ? 1 : 0);
      const std::optional<events::StreamStats> stats = g.fleet->event_stats(m);
      if (!stats) continue;
      const events::StreamStats& s = *stats;
      out.counter("infera_kv_events_applied_total", "KV events applied to the mirror.", w)
          .inc(static_cast<double>(s.applied.events_applied));
      out.counter("infera_kv_blocks_stored_total", "Blocks stored by applied KV events.", w)
          .inc(static_cast<double>(s.applied.blocks_stored));
      out.counter("infera_kv_blocks_removed_total", "Blocks removed by applied KV events.", w)
          .inc(static_cast<double>(s.applied.blocks_removed));
      for (size_t i = 1; i < kv::kNumApplyResults; ++i) {
        out.counter("infera_kv_events_rejected_total", "KV events rejected, by reason.",
                    {{"worker", m.info.id},
                     {"reason", std::string(kv::apply_result_name(static_cast<kv::ApplyResult>(i)))}})
            .inc(static_cast<double>(s.applied.rejected[i]));
      }
      out.counter("infera_kv_event_decode_errors_total", "KV event payloads that did not decode.", w)
          .inc(static_cast<double>(s.decode_errors_total()));
      out.counter("infera_kv_event_gaps_total", "Sequence gaps in the worker's event stream.", w)
          .inc(static_cast<double>(s.gaps));
      out.counter("infera_kv_event_replays_total", "Replay requests sent to repair gaps.", w)
          .inc(static_cast<double>(s.replays));
      out.counter("infera_kv_event_restarts_total", "Engine restarts seen (sequence went back).", w)
          .inc(static_cast<double>(s.restarts));
      out.gauge("infera_kv_mirror_stale", "1 while the worker's mirror is not trusted.", w)
          .set(s.state == events::SubscriberState::kStale ? 1 : 0);
    }
  });
}

struct Gateway::Impl {
  std::unique_ptr<GatewayContext> g;
  std::unique_ptr<http::Server> server;
  std::unique_ptr<http::Server> admin;
  std::atomic<bool> stopping{false};
  std::thread maintenance;
  std::mutex mu;
  std::condition_variable cv;
  bool shut = false;
  // The config the gateway runs with, as reloads left it (the startup config until the first);
  // the main thread's (reload()).
  std::optional<config::ServerConfig> running;
};

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() { shutdown(std::chrono::milliseconds(0)); }

uint16_t Gateway::port() const { return impl_->server->port(); }
uint16_t Gateway::admin_port() const { return impl_->admin ? impl_->admin->port() : 0; }

namespace {

// The worker source --discovery-backend names. Its configuration is read here, at startup, so
// that a bad kubeconfig or etcd endpoint ends the process with one clear line.
Result<std::unique_ptr<discovery::WorkerSource>> make_worker_source(
    const config::ServerConfig& config, http::EventLoop& loop, discovery::WorkerSet static_workers) {
  switch (config.discovery_backend) {
    case config::DiscoveryBackend::kStatic:
      return std::unique_ptr<discovery::WorkerSource>(
          std::make_unique<discovery::StaticWorkerSource>(std::move(static_workers)));
    case config::DiscoveryBackend::kEtcd: {
      INFERA_ASSIGN_OR_RETURN(http::Endpoint etcd, http::parse_endpoint(config.etcd_endpoint));
      discovery::EtcdSourceOptions eo;
      eo.prefix = config.etcd_prefix;
      return std::unique_ptr<discovery::WorkerSource>(
          std::make_unique<discovery::EtcdWorkerSource>(loop, etcd, eo));
    }
    case config::DiscoveryBackend::kKubernetes:
      break;
  }
  INFERA_ASSIGN_OR_RETURN(discovery::KubeConfig kube,
                          discovery::load_kube_config(config.kubeconfig, discovery::process_env()));
  discovery::KubeSourceOptions ko;
  ko.ns = !config.k8s_namespace.empty() ? config.k8s_namespace
                                        : (!kube.ns.empty() ? kube.ns : std::string("default"));
  if (!config.k8s_selector.empty()) ko.selectors.push_back({config.k8s_selector, std::nullopt});
  if (!config.k8s_prefill_selector.empty()) {
    ko.selectors.push_back({config.k8s_prefill_selector, discovery::Role::kPrefill});
    ko.selectors.push_back({config.k8s_decode_selector, discovery::Role::kDecode});
  }
  ko.inference_pool = config.k8s_inference_pool;
  INFERA_LOG(kInfo, "discovery").msg("Kubernetes API").kv("config", kube.source)
      .kv("namespace", ko.ns);
  discovery::KubeApiOptions ao;
  ao.read_timeout = ko.watch_timeout + std::chrono::seconds(30);  // the server ends each watch
  INFERA_ASSIGN_OR_RETURN(auto api, discovery::KubeApi::create(std::move(kube), ao));
  return std::unique_ptr<discovery::WorkerSource>(
      std::make_unique<discovery::KubeWorkerSource>(loop, std::move(api), std::move(ko)));
}

// The transports: HTTP and ZMQ need nothing here; either NATS transport needs the process's
// connection to the bus, made now so that an unreachable server fails startup with one line.
Status start_transports(const config::ServerConfig& c, GatewayContext& g) {
  const bool nats_requests = c.request_transport == config::RequestTransport::kNats;
  const bool nats_events = c.kv_event_transport == config::KvEventTransport::kNats;
  if (!nats_requests) g.transport = std::make_unique<proxy::HttpUpstream>(*g.upstream, g.clock);
  if (!nats_requests && !nats_events) return ok_status();
  INFERA_ASSIGN_OR_RETURN(std::vector<nats::ServerUrl> servers, nats::parse_server_urls(c.nats_server));
  nats::ClientOptions no;
  no.servers = std::move(servers);
  no.name = "infera-server";
  g.bus = std::make_unique<nats::Client>(no);
  if (nats_events) {
    events::NatsSourceConfig sc;
    sc.ns = c.nats_namespace;
    g.nats_events = std::make_unique<events::NatsEventSource>(g.index, *g.bus, sc);
  }
  events::NatsEventSource* source = g.nats_events.get();
  g.bus->set_state_callback([source](bool up) {
    if (source != nullptr) source->on_connection(up);
  });
  if (Status s = g.bus->connect(); !s.ok()) {
    return Status(s.code(), "cannot reach NATS for --request-transport/--kv-event-transport nats (" +
                                s.message() + "); start a NATS server, point --nats-server (or NATS_SERVER) "
                                "at one, or pass --request-transport http --kv-event-transport zmq");
  }
  if (source != nullptr) INFERA_RETURN_IF_ERROR(source->start());
  if (nats_requests) {
    proxy::NatsUpstreamOptions uo;
    uo.ns = c.nats_namespace;
    uo.first_byte_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.upstream_first_byte_timeout_s * 1000));
    uo.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.upstream_idle_timeout_s * 1000));
    g.transport = std::make_unique<proxy::NatsUpstream>(*g.bus, uo, g.clock);
  }
  INFERA_LOG(kInfo, "gateway").msg("NATS transports").kv("server", g.bus->server())
      .kv("namespace", c.nats_namespace)
      .kv("requests", config::name(c.request_transport))
      .kv("kv_events", config::name(c.kv_event_transport));
  return ok_status();
}

// --kv-events-bind: one SUB socket bound for engines that connect their PUB sockets to the
// router (vLLM connects for an endpoint without '*'); each message's topic says whose it is
// (Fleet::Options::kv_listener). A bind failure ends startup. The transport resolution has
// already refused it with NATS events.
Status start_kv_listener(const config::ServerConfig& c, GatewayContext& g) {
  if (c.kv_events_bind.empty()) return ok_status();
  events::ListenerConfig lc;
  lc.endpoint = c.kv_events_bind;
  g.kv_listener = std::make_unique<events::KvEventListener>(g.index, lc);
  if (Status s = g.kv_listener->start(); !s.ok()) {
    return Status(s.code(), "--kv-events-bind: " + s.message());
  }
  return ok_status();
}

// The gateway's upkeep, once a second until shutdown: the fleet's (Fleet::maintain), the
// replicas' heartbeat and silent peers, and handing freed heap back after a burst.
void run_maintenance(Gateway::Impl& i) {
  HeapTrimmer trimmer;
  std::unique_lock lock(i.mu);
  while (!i.cv.wait_for(lock, std::chrono::seconds(1), [&i] { return i.shut; })) {
    lock.unlock();
    flush_log_buffer();  // the access lines of the last second
    i.g->fleet->maintain();
    if (i.g->replicas.bus) i.g->replicas.bus->tick();
    // After a burst (thousands of connections' buffers at once) glibc keeps the freed heap:
    // hand it back once the burst is over (heap.h).
    uint64_t inflight = 0;
    for (const FleetMember& m : i.g->fleet->view()->members) inflight += m.rt->inflight.load();
    if (const auto trim = trimmer.maybe_trim(inflight)) {
      INFERA_LOG(kInfo, "gateway").msg("returned free heap memory to the system")
          .kv("rss_before_mb", static_cast<double>(trim->rss_before) / (1 << 20))
          .kv("rss_after_mb", static_cast<double>(trim->rss_after) / (1 << 20))
          .kv("took_ms", std::chrono::duration<double, std::milli>(trim->took).count());
    }
    lock.lock();
  }
}

// The workers' client: the upstream timeouts, and for https:// workers the CAs of
// --upstream-ca-file (a file that cannot be read or holds no certificate ends startup).
Result<http::ClientOptions> upstream_options(const config::ServerConfig& config) {
  http::ClientOptions co;
  co.connect_timeout = std::chrono::milliseconds(static_cast<int64_t>(config.upstream_connect_timeout_s * 1000));
  co.response_timeout = std::chrono::milliseconds(static_cast<int64_t>(config.upstream_first_byte_timeout_s * 1000));
  co.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(config.upstream_idle_timeout_s * 1000));
  co.max_idle_per_endpoint = 256;
  if (!config.upstream_ca_file.empty()) {
    INFERA_ASSIGN_OR_RETURN(co.tls_context, http::load_tls_client_context(config.upstream_ca_file));
  }
  return co;
}

// The main listener (the admin listener copies it): limits, timeouts, CORS, and TLS with
// --ssl-certfile/--ssl-keyfile (a file that cannot be read or is not PEM ends startup).
Result<http::ServerOptions> listener_options(const config::ServerConfig& config) {
  http::ServerOptions so;
  so.host = config.host;
  so.port = static_cast<uint16_t>(config.port);
  so.max_body_bytes = config.max_body_bytes;
  so.max_header_bytes = config.max_header_bytes;
  so.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(config.client_idle_timeout_s * 1000));
  so.body_timeout = so.idle_timeout;
  so.allowed_origins = config.allowed_origins;  // CORS for browsers; the admin listener has none
  if (!config.ssl_certfile.empty()) {
    INFERA_ASSIGN_OR_RETURN(so.tls,
                            http::load_tls_server_context(config.ssl_certfile, config.ssl_keyfile));
  }
  return so;
}

}  // namespace

Result<std::unique_ptr<Gateway>> Gateway::create(const config::ServerConfig& config) {
  INFERA_ASSIGN_OR_RETURN(routing::LoadModelOptions load_model,
                          routing::resolve_load_options(config.load_model));
  load_model.engine_poll_interval_s = config.engine_metrics_interval_s;
  auto impl = std::make_unique<Impl>();
  impl->g = std::make_unique<GatewayContext>(config, load_model);
  GatewayContext& g = *impl->g;

  if (!config.tokenizer_path.empty()) {
    INFERA_ASSIGN_OR_RETURN(g.prompts, tokenizer::PromptEncoder::load(config.tokenizer_path));
  } else if (config.router_policy == "kv-aware") {
    INFERA_LOG(kWarn, "gateway").msg(
        "no --router-tokenizer-path: text and chat prompts are routed by load only; "
        "token-id prompts still use the cache");
  }
  routing::RouterOptions ro;
  ro.policy = config.router_policy;
  ro.overlap_weight = config.kv_overlap_weight;
  ro.prefill_overlap_weight = config.kv_prefill_overlap_weight;
  ro.decode_overlap_weight = config.kv_decode_overlap_weight;
  ro.temperature = config.router_temperature;
  ro.load = load_model;
  ro.seed = config.router_seed ? config.router_seed
                               : static_cast<uint64_t>(std::chrono::steady_clock::now()
                                                           .time_since_epoch()
                                                           .count());
  INFERA_ASSIGN_OR_RETURN(
      g.router, routing::Router::create(ro, g.index, g.load, &g.predicted, &g.engine_signals));

  // The worker set: static flags are parsed now, so a bad --worker fails startup.
  discovery::WorkerSet static_workers;
  if (config.discovery_backend == config::DiscoveryBackend::kStatic) {
    for (const std::string& spec : config.workers) {
      INFERA_ASSIGN_OR_RETURN(discovery::WorkerInfo w, discovery::parse_worker_flag(spec));
      static_workers.push_back(std::move(w));
    }
  }

  g.loop = std::make_unique<http::EventLoop>(static_cast<int>(config.io_threads));
  INFERA_ASSIGN_OR_RETURN(const http::ClientOptions co, upstream_options(config));
  g.upstream = std::make_unique<http::Client>(co);
  // Made (and its configuration read) now, started last; the metrics and admin routes read it.
  // Before the bus: a bad kubeconfig is reported as itself, not hidden behind NATS being away.
  INFERA_ASSIGN_OR_RETURN(g.source, make_worker_source(config, *g.loop, std::move(static_workers)));
  INFERA_RETURN_IF_ERROR(start_transports(config, g));
  INFERA_RETURN_IF_ERROR(start_kv_listener(config, g));
  Fleet::Options fo;
  fo.nats_events = g.nats_events.get();
  fo.kv_listener = g.kv_listener.get();
  fo.nats_namespace = config.nats_namespace;
  if (config.request_transport == config::RequestTransport::kNats) fo.control = g.transport.get();
  fo.block_size = config.block_size;
  fo.seed = [&g](const std::string& worker) { return g.replicas.take_seed(worker); };
  // A departed worker's series go with it: under pod churn they would otherwise grow forever.
  fo.on_leave = [&g](const std::string& worker) { g.registry.remove_labelled("worker", worker); };
  fo.max_workers = 1024;
  fo.max_inflight_per_worker = config.max_inflight_per_worker;
  fo.engine_metrics_interval =
      std::chrono::milliseconds(static_cast<int64_t>(config.engine_metrics_interval_s * 1000));
  g.fleet =
      std::make_unique<Fleet>(fo, g.index, g.load, g.engine_signals, *g.loop, *g.upstream, g.clock);
  g.replicas.router_id = make_router_id();
  if (!config.otlp_traces_endpoint.empty()) {
    trace::ExporterOptions eo;
    eo.endpoint = config.otlp_traces_endpoint;
    eo.resource = {.service_name = "infera", .service_version = INFERA_VERSION,
                   .instance_id = g.replicas.router_id};
    INFERA_ASSIGN_OR_RETURN(g.spans, trace::SpanExporter::start(std::move(eo), g.registry));
  }
  INFERA_RETURN_IF_ERROR(start_load_sharing(config, g));
  add_metric_collectors(g);

  INFERA_ASSIGN_OR_RETURN(const http::ServerOptions so, listener_options(config));
  http::Routes routes;
  add_inference_routes(g, routes);
  add_public_routes(g, routes);
  const bool separate_admin = !config.admin_host.empty();
  http::Routes admin_routes;
  add_admin_routes(g, separate_admin ? admin_routes : routes);
  INFERA_ASSIGN_OR_RETURN(impl->server, http::Server::start(*g.loop, so, std::move(routes)));
  if (separate_admin) {
    http::ServerOptions ao = so;
    ao.allowed_origins.clear();
    ao.host = config.admin_host;
    ao.port = static_cast<uint16_t>(config.admin_port);
    INFERA_ASSIGN_OR_RETURN(impl->admin, http::Server::start(*g.loop, ao, std::move(admin_routes)));
  }

  // Discovery last: workers arrive once everything they need exists, the sibling's copy of the
  // index included (the warm start; at once when there is no sibling to ask).
  INFERA_RETURN_IF_ERROR(start_membership(config, g, impl->server->port()));
  Impl* starting = impl.get();
  start_warm_start(g, [starting] {
    if (starting->stopping.load()) return;
    GatewayContext& gc = *starting->g;
    gc.source->start(
        [fleet = gc.fleet.get()](const discovery::WorkerSetPtr& set) { fleet->update(set); });
  });

  Impl* raw = impl.get();
  impl->maintenance = std::thread([raw] { run_maintenance(*raw); });
  INFERA_LOG(kInfo, "gateway")
      .msg("serving")
      .kv("host", config.host)
      .kv("port", impl->server->port())
      .kv("tls", !config.ssl_certfile.empty())
      .kv("policy", config.router_policy)
      .kv("discovery", g.source->describe())
      .kv("block_size", config.block_size)
      .kv("io_threads", config.io_threads)
      .kv("allocator", heap_allocator());
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

void Gateway::shutdown(std::chrono::milliseconds grace) {
  Impl& i = *impl_;
  if (i.stopping.exchange(true)) return;
  if (i.server) i.server->shutdown(grace);
  if (i.admin) i.admin->shutdown(std::chrono::milliseconds(0));
  {
    std::lock_guard lock(i.mu);
    i.shut = true;
  }
  i.cv.notify_all();
  if (i.maintenance.joinable()) i.maintenance.join();
  if (i.g->source) i.g->source->stop();
  if (i.g->replicas.bus) {
    i.g->router->set_load_listener(nullptr);
    i.g->replicas.bus->stop();
  }
  if (i.g->replicas.membership) i.g->replicas.membership->stop();
  i.server.reset();
  i.admin.reset();
  if (i.g->loop) i.g->loop->stop();
  // The last requests' spans: sent within a bounded wait, never holding the exit up for long.
  if (i.g->spans) i.g->spans->shutdown(std::chrono::seconds(2));
  flush_log_buffer();
  i.g->fleet.reset();  // stops the subscribers
}

void Gateway::begin_drain() {
  if (!impl_->g->draining.exchange(true)) {
    INFERA_LOG(kInfo, "gateway").msg("draining: /readyz answers 503; still serving");
  }
}

Result<ReloadPlan> Gateway::reload(const config::ServerConfig& next) {
  Impl& i = *impl_;
  if (!i.running) i.running = i.g->config;
  INFERA_ASSIGN_OR_RETURN(ReloadPlan plan, plan_reload(*i.running, next));
  apply_reload(*i.g, plan);
  i.running = plan.running_after;
  return plan;
}

}  // namespace infera::gateway
