// The gateway's shared state, as its handlers see it (internal to the gateway module). Built
// once by Gateway::create in dependency order; read-only afterwards except for the
// thread-safe objects it holds. Any handler thread.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/clock.h"
#include "infera/common/metrics.h"
#include "infera/common/random.h"
#include "infera/config/server_config.h"
#include "infera/discovery/source.h"
#include "infera/events/nats_source.h"
#include "infera/gateway/fleet.h"
#include "infera/gateway/replicas.h"
#include "infera/gateway/response_affinity.h"
#include "infera/nats/client.h"
#include "infera/proxy/forward.h"
#include "infera/gateway/openai_request.h"
#include "infera/gateway/slot_queue.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/http/server.h"
#include "infera/kv/active_load.h"
#include "infera/kv/engine_signals.h"
#include "infera/kv/index.h"
#include "infera/kv/predicted_blocks.h"
#include "infera/routing/load_model.h"
#include "infera/routing/router.h"
#include "infera/tokenizer/prompt_encoder.h"
#include "infera/trace/exporter.h"

namespace infera::gateway {

// Handles of the gateway's own metrics (per-worker series are produced at scrape time).
struct GatewayMetrics {
  // `request_timeout_s`: the duration histogram's buckets reach it (a request may run that long).
  GatewayMetrics(metrics::Registry& r, double request_timeout_s);
  metrics::Registry& registry;
  std::vector<double> duration_buckets;
  metrics::Histogram& tokenize;
  metrics::Histogram& hash;
  metrics::Histogram& score;
  metrics::Histogram& predicted_hit_ratio;
  metrics::Counter& retries;
  metrics::Counter& prompt_tokens;
  metrics::Counter& predicted_hit_tokens;
  metrics::Counter& predicted_on_route_tokens;
  metrics::Counter& lower_tier_hit_tokens;
  metrics::Counter& overload_gated;
  // Requests by route, status, worker ("" when no worker was involved) and model (the request's
  // when the fleet serves it, else "": the label's values are bounded by the fleet's models).
  void count_request(std::string_view route, int status, std::string_view worker,
                     std::string_view model);
  // A completed request's TTFT and duration as the router saw them, by model (as above).
  void observe_completed(std::string_view model, double ttft_s, double duration_s);
  // Tokens a worker generated for a relayed answer (its usage, or its output events), by model.
  void count_generated(std::string_view model, uint64_t tokens);
  // The inter-token latency histogram of `model` (a registry lookup: once per request).
  metrics::Histogram& inter_token_latency(std::string_view model);
  // A request continuing a stored response (previous_response_id): `outcome` is "pinned" (sent
  // to the worker that answered it), "unknown" (not answered through this router, or
  // forgotten) or "unavailable" (that worker cannot take it now).
  void count_affinity(std::string_view outcome);
  // calls of disaggregated requests by stage ("prefill", "decode"), worker and status.
  void count_disagg(std::string_view stage, std::string_view worker, int status);
};

struct GatewayContext {
  // `load_model`: the config's load-model flags, resolved (routing::resolve_load_options); its
  // predicted-on-route TTL sizes `predicted`. The router keeps the options (router->options()).
  GatewayContext(const config::ServerConfig& c, const routing::LoadModelOptions& load_model);

  // The startup config. What a reload (SIGHUP) changes live is not read from here: the admin
  // token below, the router's weights, the fleet, the log level.
  config::ServerConfig config;
  // The bearer token of the admin API and /metrics ("": none), swapped whole by a reload.
  std::atomic<std::shared_ptr<const std::string>> admin_token{
      std::make_shared<const std::string>(config.admin_token)};
  // The inference API keys (--api-key, --api-key-file); a reload swaps them. Empty: open.
  std::atomic<std::shared_ptr<const std::vector<std::string>>> api_keys{
      std::make_shared<const std::vector<std::string>>(config.api_keys)};
  // Set once when SIGTERM starts the drain: /readyz answers 503 from then on.
  std::atomic<bool> draining{false};
  RequestLimits limits;
  SteadyClock clock;
  // What each engine reports of its own load (its /metrics, polled by the fleet).
  kv::EngineSignals engine_signals{1024, clock};
  metrics::Registry registry;
  GatewayMetrics metrics{registry, config.request_timeout_s};
  std::unique_ptr<tokenizer::PromptEncoder> prompts;  // null: no tokenizer (ids only)
  kv::PredictedBlocks predicted;                      // before the index, which confirms into it
  kv::KvIndex index;
  kv::ActiveLoad load;
  std::unique_ptr<routing::Router> router;
  // NATS transports (docs/nats.md): the process's one connection, then (below) the KV-event
  // source and the request upstream it carries; null when both transports are http/zmq. The
  // connection is declared before the loop so that it outlives it: coroutines still suspended
  // in the loop when it is destroyed (an engine poll over NATS) close their calls on it.
  std::unique_ptr<nats::Client> bus;
  std::unique_ptr<http::EventLoop> loop;
  std::unique_ptr<http::Client> upstream;
  // Before the fleet, which uses it and the request upstream.
  std::unique_ptr<events::NatsEventSource> nats_events;
  // --kv-events-bind: the SUB socket engines that connect their PUB sockets send to; null
  // without the flag. Before the fleet, which registers workers with it.
  std::unique_ptr<events::KvEventListener> kv_listener;
  // How requests reach workers: a NatsUpstream over `bus`, or an HttpUpstream over `upstream`.
  std::unique_ptr<proxy::Upstream> transport;
  std::unique_ptr<Fleet> fleet;
  std::unique_ptr<discovery::WorkerSource> source;
  // Requests waiting for a worker below its --max-inflight-per-worker cap (bounded by
  // --max-queue; beyond it, 429 with Retry-After), woken as in-flight calls end.
  SlotQueue slots;
  // Router replicas: this one's id, the load shared with its siblings, the warm start.
  ReplicaState replicas;
  // --otlp-traces-endpoint: where each sampled request's router span goes; null without it.
  std::unique_ptr<trace::SpanExporter> spans;
  // Which worker answered each /v1/responses call, for the calls that continue one.
  ResponseAffinity responses;
};

// The admin API's token check: a 401 response when --admin-token is set and the request does
// not carry it, else none.
std::optional<http::Response> check_admin(const GatewayContext& g, const http::Request& r);
// The OpenAI routes' API key: none when it passes (or no key is set), else the 401 to answer.
// With --strip-authorization the client's Authorization header is then removed from `r`, so it
// is not forwarded to a worker.
std::optional<http::Response> check_api_key(const GatewayContext& g, http::Request& r);

// Route handlers: the inference routes (inference.cc), /v1/models, /health, /livez, /readyz
// and /tokenize (add_public_routes), the admin API and /metrics (admin.cc).
net::awaitable<http::Response> handle_inference(GatewayContext& g, ApiKind kind,
                                                http::Request& request, http::ResponseWriter& out);
void add_inference_routes(GatewayContext& g, http::Routes& routes);
void add_admin_routes(GatewayContext& g, http::Routes& routes);
void add_public_routes(GatewayContext& g, http::Routes& routes);
// Registers the scrape-time collectors (per-worker gauges and event counters).
void add_metric_collectors(GatewayContext& g);

// Tokenizes a parsed request's prompt (ids as given, moved out of `r`; text or chat through the
// encoder, setting `r.media_from_token`); the time spent is added to `tokenize_time`.
Result<std::vector<uint32_t>> prompt_tokens(const GatewayContext& g, OpenAiRequest& r,
                                            Nanos& tokenize_time);

// The prompt's block hashes as the KV index keys them (docs/contracts.md section 4): for a
// model the fleet serves as a LoRA adapter (`adapter`, from Fleet::lookup), seeded with the
// adapter's name, as the router hashes the blocks of KV events that name it (vLLM's `lora_name`);
// a prompt with media mixes them into the seed of its blocks from `r.media_from_token` on
// (kv::media_seed): only requests with the same media share those blocks' hashes.
void prompt_hashes(const GatewayContext& g, const OpenAiRequest& r, bool adapter,
                   std::span<const uint32_t> ids, std::vector<uint64_t>& out);

}  // namespace infera::gateway
