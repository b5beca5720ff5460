// The request path of ARCHITECTURE section 3: parse, tokenize (render chat), hash, score, pick,
// register active blocks, forward and relay, release on end, error or disconnect; a worker
// that fails before the first byte is marked and the request goes to the next best worker.
// A split fleet (prefill and decode pools) serves a request in two calls, vLLM style: a prefill
// call that computes the prompt's KV blocks and returns their kv_transfer_params, then a decode
// call carrying them, relayed to the client like an aggregated answer.
#include <algorithm>
#include <optional>

#include <boost/json.hpp>

#include "infera/common/log.h"
#include "infera/gateway/context.h"
#include "infera/http/error.h"
#include "infera/http/net.h"
#include "infera/kv/block_hash.h"
#include "infera/proxy/forward.h"

namespace infera::gateway {
namespace {

std::string_view route_name(ApiKind kind) {
  return kind == ApiKind::kChatCompletions ? "/v1/chat/completions" : "/v1/completions";
}

// Headers that belong to one hop, never forwarded (RFC 9110 7.6.1), plus Host, which the
// client sets for the worker.
bool hop_by_hop(std::string_view name) {
  for (std::string_view h : {"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                             "te", "trailer", "upgrade", "content-length", "host",
                             "proxy-authorization", "proxy-authenticate"}) {
    if (http::iequals(name, h)) return true;
  }
  return false;
}

// The upstream request: the client's method, target and end-to-end headers, our request id,
// and `body` (the client's own, or a stage's rewrite of it).
http::Request upstream_request(const http::Request& client, const std::string& request_id,
                               const std::string& body) {
  http::Request up;
  up.method = client.method;
  up.target = client.target;
  up.body = body;
  for (const http::Header& h : client.headers) {
    if (!hop_by_hop(h.name) && !http::iequals(h.name, "x-request-id")) up.headers.push_back(h);
  }
  up.headers.push_back({"X-Request-Id", request_id});
  return up;
}

std::string make_request_id(std::string_view given) {
  if (!given.empty() && given.size() <= 128) {
    bool clean = true;
    for (const char c : given) clean = clean && c > 0x20 && c < 0x7f && c != '"';
    if (clean) return std::string(given);
  }
  thread_local Rng rng(static_cast<uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count()) ^
      reinterpret_cast<uintptr_t>(&rng));
  char buf[40];
  std::snprintf(buf, sizeof(buf), "infera-%016llx", static_cast<unsigned long long>(rng.next()));
  return buf;
}


// What both paths need about one request, computed once (coroutine parameters by value).
struct RoutedRequest {
  std::string route;
  std::string request_id;
  std::string model;
  uint32_t prompt_tokens = 0;
  std::vector<uint64_t> hashes;
  Nanos start{0};
  Nanos deadline{0};
};

enum class Pick { kOk, kQueueFull, kAtCapacity, kNone };

// Fills `out` with `stage`'s candidates (excluding `tried`). When every worker is at its
// in-flight cap and `may_queue` (a first attempt), waits in the bounded queue for a slot, up to
// the first-byte deadline; a full queue is kQueueFull, a wait that runs out kAtCapacity.
net::awaitable<Pick> wait_for_candidates(GatewayContext& g, std::shared_ptr<const FleetView> view,
                                         std::string model, routing::Stage stage,
                                         std::vector<kv::WorkerId> tried, bool may_queue,
                                         Nanos deadline, std::vector<kv::WorkerId>* out) {
  bool at_capacity = false;
  g.fleet->candidates(*view, model, stage, tried, *out, &at_capacity);
  if (out->empty() && at_capacity && may_queue) {
    if (g.queued.fetch_add(1) >= g.config.max_queue) {
      g.queued.fetch_sub(1);
      co_return Pick::kQueueFull;
    }
    const Nanos wait_until =
        std::min(deadline, g.clock.now() + from_seconds(g.config.upstream_first_byte_timeout_s));
    net::steady_timer timer(co_await net::this_coro::executor);
    while (out->empty() && at_capacity && g.clock.now() < wait_until) {
      timer.expires_after(std::chrono::milliseconds(5));
      auto [ec] = co_await timer.async_wait(use_nothrow);
      if (ec) break;  // cancelled: the client went away
      g.fleet->candidates(*view, model, stage, tried, *out, &at_capacity);
    }
    g.queued.fetch_sub(1);
  }
  if (!out->empty()) co_return Pick::kOk;
  co_return at_capacity ? Pick::kAtCapacity : Pick::kNone;
}

// A router ticket held until the request ends (released on every way out, cancellation too).
class HeldTicket {
 public:
  explicit HeldTicket(routing::Router& router) : router_(router) {}
  ~HeldTicket() { release(); }
  HeldTicket(const HeldTicket&) = delete;
  HeldTicket& operator=(const HeldTicket&) = delete;
  void hold(kv::LoadTicket ticket) {
    release();
    ticket_ = ticket;
  }
  void release() {
    if (ticket_) router_.release(ticket_);
    ticket_ = {};
  }

 private:
  routing::Router& router_;
  kv::LoadTicket ticket_;
};

// One call in flight on a worker (its --max-inflight-per-worker count).
class InflightCall {
 public:
  explicit InflightCall(const FleetMember& m) : rt_(m.rt) {
    rt_->inflight.fetch_add(1, std::memory_order_relaxed);
    rt_->requests.fetch_add(1, std::memory_order_relaxed);
  }
  ~InflightCall() { end(); }
  InflightCall(const InflightCall&) = delete;
  InflightCall& operator=(const InflightCall&) = delete;
  void end() {
    if (rt_) rt_->inflight.fetch_sub(1, std::memory_order_relaxed);
    rt_.reset();
  }

 private:
  std::shared_ptr<WorkerRuntime> rt_;
};

// The prefill call's body (as vLLM's disaggregation proxy sends it): the client's request
// with one output token, no stream, and a request to keep the KV blocks for a remote decode.
std::string prefill_body(const std::string& client_body) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(client_body, ec);
  if (ec || !v.is_object()) return client_body;  // cannot happen: the request was validated
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

// The decode call's body: the client's body, byte for byte, plus `"kv_transfer_params":
// <params>` (replacing any the client sent).
std::string decode_body(const std::string& client_body, const std::string& params) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(client_body, ec);
  if (ec || !v.is_object()) return client_body;  // cannot happen: the request was validated
  boost::json::object& o = v.as_object();
  const size_t close = client_body.rfind('}');
  if (o.contains("kv_transfer_params") || close == std::string::npos) {
    o["kv_transfer_params"] = boost::json::parse(params, ec);
    return boost::json::serialize(v);
  }
  std::string out = client_body.substr(0, close);
  if (!o.empty()) out += ',';
  out += "\"kv_transfer_params\":";
  out += params;
  out += client_body.substr(close);
  return out;
}

// The prefill answer's kv_transfer_params, serialized; nullopt when absent, null or not an
// object (the decode worker then computes the prompt itself).
std::optional<std::string> transfer_params(const std::string& answer) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(answer, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const boost::json::value* p = v.get_object().if_contains("kv_transfer_params");
  if (p == nullptr || !p->is_object()) return std::nullopt;
  return boost::json::serialize(*p);
}

}  // namespace

Result<std::vector<uint32_t>> prompt_tokens(const GatewayContext& g, const OpenAiRequest& r,
                                            Nanos& tokenize_time) {
  if (!r.prompt_ids.empty()) return r.prompt_ids;
  if (!g.prompts) return std::vector<uint32_t>{};  // no tokenizer: route by load only
  const Nanos t0 = g.clock.now();
  Result<tokenizer::EncodedPrompt> encoded =
      r.kind == ApiKind::kChatCompletions
          ? g.prompts->encode_chat(r.messages, r.tools, r.add_generation_prompt,
                                   r.chat_template_kwargs)
          : g.prompts->encode_text(r.prompt_text.value_or(""), r.add_special_tokens);
  tokenize_time += g.clock.now() - t0;
  if (!encoded.ok()) return encoded.status();
  return std::move(encoded->ids);
}

namespace {

// The client's answer for a request that fails here (never reached a worker, or every attempt
// failed): the OpenAI error, the request id, the request counted.
http::Response fail_response(GatewayContext& g, const RoutedRequest& r, const Status& s,
                             http::ErrorContext ctx, std::string_view worker = {}) {
  http::Response resp = http::error_response(s, ctx);
  resp.headers.push_back({"X-Request-Id", r.request_id});
  g.metrics.count_request(r.route, resp.status, worker);
  return resp;
}

// No candidate for `stage` ("" for an aggregated request, else "prefill " / "decode ").
http::Response shed_response(GatewayContext& g, const RoutedRequest& r, const FleetView& view,
                             Pick pick, std::string_view stage) {
  const std::string who = "every " + std::string(stage) + "worker";
  if (pick == Pick::kQueueFull) {
    return fail_response(g, r,
                         resource_exhausted(who + " is at its in-flight limit and the queue is "
                                                  "full; retry later"),
                         {.origin = http::ErrorOrigin::kServer});
  }
  if (pick == Pick::kAtCapacity) {
    return fail_response(g, r, resource_exhausted(who + " is at its in-flight limit; retry later"),
                         {.origin = http::ErrorOrigin::kServer});
  }
  return fail_response(g, r,
                       unavailable(view.members.empty()
                                       ? std::string("no worker is registered")
                                       : "no " + std::string(stage) +
                                             "worker can serve this request now"),
                       {.origin = http::ErrorOrigin::kServer});
}

// The first routing decision of a request: how much of the prompt the chosen worker caches.
void record_prediction(GatewayContext& g, const RoutedRequest& r, const routing::Decision& d) {
  if (d.request_blocks == 0) return;
  g.metrics.predicted_hit_ratio.observe(static_cast<double>(d.chosen().cache_hits) /
                                        static_cast<double>(d.request_blocks));
  g.metrics.prompt_tokens.inc(static_cast<double>(r.prompt_tokens));
  g.metrics.predicted_hit_tokens.inc(static_cast<double>(d.chosen().cache_hits) *
                                     g.config.block_size);
}

// Routes among `stage`'s workers and relays one upstream exchange (`body`) to the client: an
// aggregated request, or the decode stage of a disaggregated one. A worker that fails before
// the first byte is marked and the next best is tried (up to --retries); after it, the client
// gets an OpenAI error event and the stream ends (proxy::forward). An empty `body` sends the
// client's own.
net::awaitable<http::Response> relay(GatewayContext& g, http::Request& request,
                                     http::ResponseWriter& out,
                                     std::shared_ptr<const FleetView> view, RoutedRequest r,
                                     routing::Stage stage, std::string body) {
  const bool decode = stage == routing::Stage::kDecode;
  const std::string_view label = decode ? "decode " : "";
  auto count = [&](const FleetMember& m, int status) {
    if (decode) g.metrics.count_disagg("decode", m.info.id, status);
    g.metrics.count_request(r.route, status, m.info.id);
  };
  std::vector<kv::WorkerId> tried;
  std::vector<kv::WorkerId> candidates;
  Status last_error = unavailable("no " + std::string(label) + "worker is available");
  for (uint32_t attempt = 0; attempt <= g.config.retries; ++attempt) {
    const Pick pick = co_await wait_for_candidates(g, view, r.model, stage, tried, attempt == 0,
                                                   r.deadline, &candidates);
    if (pick != Pick::kOk) {
      if (attempt > 0) break;
      co_return shed_response(g, r, *view, pick, label);
    }
    const Nanos t_score = g.clock.now();
    auto routed = g.router->route(r.hashes, r.prompt_tokens, candidates, stage);
    g.metrics.score.observe(to_seconds(g.clock.now() - t_score));
    if (!routed.ok()) co_return fail_response(g, r, routed.status(), {});
    HeldTicket ticket(*g.router);
    ticket.hold(routed->ticket);
    const routing::Decision& d = routed->decision;
    const FleetMember* member = view->by_slot(d.worker());
    if (member == nullptr) {  // cannot happen: candidates come from this view
      co_return fail_response(g, r, internal_error("routing chose an unknown worker"), {});
    }
    if (attempt == 0 && !decode) record_prediction(g, r, d);
    INFERA_LOG(kDebug, "gateway").msg("routed").kv("request_id", r.request_id)
        .kv("stage", routing::stage_name(stage)).kv("worker", member->info.id)
        .kv("hits", d.chosen().cache_hits).kv("blocks", d.request_blocks)
        .kv("active", d.chosen().active_blocks).kv("cost", d.chosen().cost)
        .kv("attempt", attempt);

    http::Request up = upstream_request(request, r.request_id, body.empty() ? request.body : body);
    proxy::ForwardOptions fo;
    fo.deadline = r.deadline;
    InflightCall call(*member);
    proxy::ForwardOutcome outcome =
        co_await proxy::forward(*g.upstream, member->endpoint, std::move(up), out, fo, g.clock);
    call.end();
    ticket.release();

    switch (outcome.result) {
      case proxy::ForwardResult::kCompleted:
        g.fleet->record_success(*member);
        g.metrics.ttft.observe(to_seconds(outcome.first_byte - r.start));
        g.metrics.duration.observe(to_seconds(g.clock.now() - r.start));
        count(*member, outcome.upstream_status);
        co_return http::Response{};
      case proxy::ForwardResult::kBrokenStream:
        g.fleet->record_failure(*member);
        INFERA_LOG(kWarn, "gateway").msg("worker failed mid-stream")
            .kv("request_id", r.request_id).kv("stage", routing::stage_name(stage))
            .kv("worker", member->info.id).kv("error", outcome.error.message());
        count(*member, 502);
        co_return http::Response{};
      case proxy::ForwardResult::kClientGone:
        count(*member, 499);
        co_return http::Response{};
      case proxy::ForwardResult::kRetryable:
        g.fleet->record_failure(*member);
        g.metrics.retries.inc();
        if (decode) g.metrics.count_disagg("decode", member->info.id, 502);
        INFERA_LOG(kWarn, "gateway").msg("worker failed before the first byte; trying another")
            .kv("request_id", r.request_id).kv("stage", routing::stage_name(stage))
            .kv("worker", member->info.id).kv("error", outcome.error.message());
        last_error = outcome.error;
        tried.push_back(member->slot);
        if (g.clock.now() > r.deadline) {
          last_error = deadline_exceeded("the request deadline passed while retrying");
          attempt = g.config.retries;  // stop
        }
        break;
    }
  }
  co_return fail_response(g, r, last_error, {.origin = http::ErrorOrigin::kUpstream});
}

// A request on a split fleet: prefill among the prefill workers (prefill weight), then decode
// among the decode workers (decode weight). Both workers carry the prompt's blocks as active
// load until the request ends. A prefill worker that fails before answering is replaced by
// another (up to --retries); the decode call behaves like an aggregated request.
net::awaitable<http::Response> serve_disaggregated(GatewayContext& g, http::Request& request,
                                                   http::ResponseWriter& out,
                                                   std::shared_ptr<const FleetView> view,
                                                   RoutedRequest r) {
  auto fail = [&](const Status& s, http::ErrorContext ctx) {
    return fail_response(g, r, s, ctx);
  };

  // Stage 1: prefill.
  const std::string prefill_request_body = prefill_body(request.body);
  HeldTicket prefill_ticket(*g.router);
  std::optional<std::string> params;
  bool prefilled = false;
  std::vector<kv::WorkerId> tried;
  std::vector<kv::WorkerId> candidates;
  Status last_error = unavailable("no prefill worker is available");
  for (uint32_t attempt = 0; attempt <= g.config.retries && !prefilled; ++attempt) {
    const Pick pick = co_await wait_for_candidates(g, view, r.model, routing::Stage::kPrefill,
                                                   tried, attempt == 0, r.deadline, &candidates);
    if (pick != Pick::kOk) {
      if (attempt > 0) break;
      co_return shed_response(g, r, *view, pick, "prefill ");
    }
    const Nanos t_score = g.clock.now();
    auto routed = g.router->route(r.hashes, r.prompt_tokens, candidates, routing::Stage::kPrefill);
    g.metrics.score.observe(to_seconds(g.clock.now() - t_score));
    if (!routed.ok()) co_return fail(routed.status(), {});
    prefill_ticket.hold(routed->ticket);
    const routing::Decision& d = routed->decision;
    const FleetMember* member = view->by_slot(d.worker());
    if (member == nullptr) co_return fail(internal_error("routing chose an unknown worker"), {});
    if (attempt == 0) record_prediction(g, r, d);
    INFERA_LOG(kDebug, "gateway").msg("routed prefill").kv("request_id", r.request_id)
        .kv("worker", member->info.id).kv("hits", d.chosen().cache_hits)
        .kv("blocks", d.request_blocks).kv("cost", d.chosen().cost).kv("attempt", attempt);

    http::Request up = upstream_request(request, r.request_id, prefill_request_body);
    InflightCall call(*member);
    auto answer = co_await g.upstream->request(member->endpoint, std::move(up));
    call.end();
    if (!answer.ok() && (out.client_gone() || answer.error().status.code() == StatusCode::kCancelled)) {
      g.metrics.count_disagg("prefill", member->info.id, 499);
      g.metrics.count_request(r.route, 499, member->info.id);
      co_return http::Response{};
    }
    if (!answer.ok() || answer->status >= 500) {
      last_error = answer.ok() ? unavailable("prefill worker answered HTTP " +
                                             std::to_string(answer->status))
                               : answer.error().status;
      g.fleet->record_failure(*member);
      g.metrics.retries.inc();
      g.metrics.count_disagg("prefill", member->info.id, answer.ok() ? answer->status : 502);
      INFERA_LOG(kWarn, "gateway").msg("prefill worker failed; trying another")
          .kv("request_id", r.request_id).kv("worker", member->info.id)
          .kv("error", last_error.message());
      prefill_ticket.release();
      tried.push_back(member->slot);
      if (g.clock.now() > r.deadline) {
        last_error = deadline_exceeded("the request deadline passed while retrying");
        break;
      }
      continue;
    }
    g.fleet->record_success(*member);
    g.metrics.count_disagg("prefill", member->info.id, answer->status);
    if (answer->status != 200) {
      // The worker refused the request itself (4xx): the client gets its answer.
      http::Response resp;
      resp.status = answer->status;
      const std::string_view type = answer->header("Content-Type");
      if (!type.empty()) resp.headers.push_back({"Content-Type", std::string(type)});
      resp.headers.push_back({"X-Request-Id", r.request_id});
      resp.body = std::move(answer->body);
      g.metrics.count_request(r.route, resp.status, member->info.id);
      co_return resp;
    }
    params = transfer_params(answer->body);
    if (!params) {
      INFERA_LOG(kDebug, "gateway")
          .msg("the prefill answer carries no kv_transfer_params; decode computes the prompt")
          .kv("request_id", r.request_id).kv("worker", member->info.id);
    }
    prefilled = true;
  }
  if (!prefilled) co_return fail(last_error, {.origin = http::ErrorOrigin::kUpstream});

  // Stage 2: decode, relayed to the client.
  std::string decode_request_body = params ? decode_body(request.body, *params) : request.body;
  co_return co_await relay(g, request, out, std::move(view), std::move(r), routing::Stage::kDecode,
                           std::move(decode_request_body));
}

}  // namespace

net::awaitable<http::Response> handle_inference(GatewayContext& g, ApiKind kind,
                                                http::Request& request,
                                                http::ResponseWriter& out) {
  const Nanos start = g.clock.now();
  const std::string route(route_name(kind));
  const std::string request_id = make_request_id(request.header("X-Request-Id"));
  auto fail = [&](const Status& s, http::ErrorContext ctx, std::string_view worker = {}) {
    http::Response r = http::error_response(s, ctx);
    r.headers.push_back({"X-Request-Id", request_id});
    g.metrics.count_request(route, r.status, worker);
    return r;
  };

  std::string param;
  Result<OpenAiRequest> parsed = parse_openai_request(kind, request.body, g.limits, &param);
  if (!parsed.ok()) {
    co_return fail(parsed.status(), {.origin = http::ErrorOrigin::kRequestBody, .param = param});
  }
  const auto view = g.fleet->view();
  if (!parsed->model.empty()) {
    const std::vector<std::string> models = g.fleet->models();
    if (!models.empty() &&
        std::find(models.begin(), models.end(), parsed->model) == models.end()) {
      co_return fail(not_found("the model '" + parsed->model + "' does not exist"),
                     {.param = "model", .code = "model_not_found"});
    }
  }

  Nanos tokenize_time{0};
  Result<std::vector<uint32_t>> ids = prompt_tokens(g, *parsed, tokenize_time);
  if (!ids.ok()) {
    co_return fail(ids.status(), {.origin = http::ErrorOrigin::kRequestBody,
                                  .param = kind == ApiKind::kChatCompletions ? "messages" : "prompt"});
  }
  if (ids->size() > g.config.max_prompt_tokens) {
    co_return fail(invalid_argument("the prompt has " + std::to_string(ids->size()) +
                                    " tokens, more than this server accepts (" +
                                    std::to_string(g.config.max_prompt_tokens) + ")"),
                   {.origin = http::ErrorOrigin::kRequestBody,
                    .param = kind == ApiKind::kChatCompletions ? "messages" : "prompt"});
  }
  const Nanos t_hash = g.clock.now();
  std::vector<uint64_t> hashes;
  kv::compute_seq_hashes(*ids, g.config.block_size, kv::kHashSeed, hashes);
  const Nanos hash_time = g.clock.now() - t_hash;
  g.metrics.tokenize.observe(to_seconds(tokenize_time));
  g.metrics.hash.observe(to_seconds(hash_time));

  RoutedRequest r;
  r.route = route;
  r.request_id = request_id;
  r.model = parsed->model;
  r.prompt_tokens = static_cast<uint32_t>(ids->size());
  r.hashes = std::move(hashes);
  r.start = start;
  r.deadline = start + from_seconds(g.config.request_timeout_s);
  if (g.fleet->split(*view, parsed->model)) {
    co_return co_await serve_disaggregated(g, request, out, view, std::move(r));
  }
  std::string client_body;  // empty: relay sends the client's own body
  co_return co_await relay(g, request, out, view, std::move(r), routing::Stage::kAggregated,
                           std::move(client_body));
}

}  // namespace infera::gateway
