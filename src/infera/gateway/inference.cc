// The request path of ARCHITECTURE section 3: parse, tokenize (render chat), hash, score, pick,
// register active blocks, forward and relay, release on end, error or disconnect; a worker
// that fails before the first byte is marked and the request goes to the next best worker.
// A split fleet (prefill and decode pools) serves a request with the protocol of its engines
// (shared/wire/KV_EVENTS.md section 4): vLLM style, a prefill call that computes the prompt's KV
// blocks and returns their kv_transfer_params, then a decode call carrying them, relayed to the
// client like an aggregated answer; SGLang style, one body with bootstrap_host/port/room sent to
// the prefill and the decode worker at once, the decode answer relayed, the prefill answer read
// to its end and checked.
#include <algorithm>
#include <optional>

#include <boost/json.hpp>

#include "infera/common/log.h"
#include "infera/gateway/context.h"
#include "infera/http/error.h"
#include "infera/http/net.h"
#include "infera/http/sse.h"
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

// Request ids and bootstrap rooms: unique per request, not a security token.
uint64_t random_u64() {
  thread_local Rng rng(static_cast<uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count()) ^
      reinterpret_cast<uintptr_t>(&rng));
  return rng.next();
}

std::string make_request_id(std::string_view given) {
  if (!given.empty() && given.size() <= 128) {
    bool clean = true;
    for (const char c : given) clean = clean && c > 0x20 && c < 0x7f && c != '"';
    if (clean) return std::string(given);
  }
  char buf[40];
  std::snprintf(buf, sizeof(buf), "infera-%016llx", static_cast<unsigned long long>(random_u64()));
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

// Fills `out` with `stage`'s candidates (excluding `tried`; with `protocol`, only workers that
// speak it). When every worker is at its in-flight cap and `may_queue` (a first attempt), waits
// in the bounded queue for a slot, up to --max-queue-wait-s (and the request's deadline): a
// full queue is kQueueFull, a wait that runs out kAtCapacity. Both are shed with 429 and
// Retry-After: under overload a late answer is worth less than a prompt refusal to retry.
net::awaitable<Pick> wait_for_candidates(GatewayContext& g, std::shared_ptr<const FleetView> view,
                                         std::string model, routing::Stage stage,
                                         std::vector<kv::WorkerId> tried,
                                         std::optional<discovery::PdProtocol> protocol,
                                         bool may_queue, Nanos deadline,
                                         std::vector<kv::WorkerId>* out) {
  bool at_capacity = false;
  auto fill = [&] {
    g.fleet->candidates(*view, model, stage, tried, *out, &at_capacity);
    if (protocol) keep_protocol(*view, *protocol, *out);
  };
  fill();
  if (out->empty() && at_capacity && may_queue) {
    // Registered before the re-check: a slot freed in between still wakes this request.
    // Woken only by a slot freed on a worker this request could use.
    const bool split_fleet = stage == routing::Stage::kAggregated && g.fleet->split(*view, model);
    SlotQueue::Fits fits = [model, stage, tried, protocol, split_fleet](const FleetMember& m) {
      return could_serve(m, model, stage, split_fleet, tried) &&
             (!protocol || discovery::pd_protocol(m.info) == *protocol);
    };
    std::optional<SlotQueue::Ticket> ticket =
        co_await g.slots.enter(g.config.max_queue, std::move(fits));
    if (!ticket) co_return Pick::kQueueFull;
    const Nanos wait_until = std::min(
        deadline, g.clock.now() + from_seconds(std::min(g.config.max_queue_wait_s,
                                                        g.config.upstream_first_byte_timeout_s)));
    fill();
    while (out->empty() && at_capacity) {
      const Nanos now = g.clock.now();
      if (now >= wait_until) break;
      const SlotQueue::Wake woke = co_await ticket->wait(std::chrono::nanoseconds(wait_until - now));
      if (woke != SlotQueue::Wake::kWoken) break;  // timed out, or the client went away
      fill();
    }
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
  // The request's first token came back from this stage's worker (ActiveLoad::prefill_done).
  void prefill_done() {
    if (ticket_) router_.prefill_done(ticket_);
  }

 private:
  routing::Router& router_;
  kv::LoadTicket ticket_;
};

// One call in flight on a worker (its --max-inflight-per-worker count).
class InflightCall {
 public:
  // `m` must outlive the call (it belongs to the request's fleet view).
  InflightCall(GatewayContext& g, const FleetMember& m) : member_(&m), rt_(m.rt), slots_(&g.slots) {
    rt_->inflight.fetch_add(1, std::memory_order_relaxed);
    rt_->requests.fetch_add(1, std::memory_order_relaxed);
  }
  ~InflightCall() { end(); }
  InflightCall(const InflightCall&) = delete;
  InflightCall& operator=(const InflightCall&) = delete;
  void end() {
    if (!rt_) return;
    rt_->inflight.fetch_sub(1, std::memory_order_relaxed);
    rt_.reset();
    slots_->notify_one(member_);  // a request queued for this worker's cap may go now
  }

 private:
  const FleetMember* member_;
  std::shared_ptr<WorkerRuntime> rt_;
  SlotQueue* slots_;
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

// A stage's body: the client's body, byte for byte, plus `fields` (name, JSON text) before its
// closing brace. A client body that already has one of the names is re-serialized with the
// fields replacing its own.
std::string with_fields(const std::string& client_body,
                        const std::vector<std::pair<std::string_view, std::string>>& fields) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(client_body, ec);
  if (ec || !v.is_object()) return client_body;  // cannot happen: the request was validated
  boost::json::object& o = v.as_object();
  const size_t close = client_body.rfind('}');
  bool clash = close == std::string::npos;
  for (const auto& [name, value] : fields) clash = clash || o.contains(name);
  if (clash) {
    for (const auto& [name, value] : fields) o[name] = boost::json::parse(value, ec);
    return boost::json::serialize(v);
  }
  std::string out = client_body.substr(0, close);
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

// The decode call's body (vLLM): the client's, plus "kv_transfer_params": <params>.
std::string decode_body(const std::string& client_body, const std::string& params) {
  return with_fields(client_body, {{"kv_transfer_params", params}});
}

// SGLang's body for both workers: the client's, plus the prefill worker's bootstrap server
// (its host as in its URL, IPv6 bracketed; its bootstrap port, or null when it registered none)
// and the transfer session's room.
std::string bootstrap_body(const std::string& client_body, const discovery::WorkerInfo& prefill,
                           uint64_t room) {
  const std::string host = prefill.id.substr(0, prefill.id.rfind(':'));
  return with_fields(client_body,
                     {{"bootstrap_host", boost::json::serialize(boost::json::value(host))},
                      {"bootstrap_port", prefill.bootstrap_port
                                             ? std::to_string(prefill.bootstrap_port)
                                             : std::string("null")},
                      {"bootstrap_room", std::to_string(room)}});
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

void prompt_hashes(const GatewayContext& g, std::string_view model, bool adapter,
                   std::span<const uint32_t> ids, std::vector<uint64_t>& out) {
  const uint64_t seed = adapter ? kv::lora_seed(model) : kv::kHashSeed;
  kv::compute_seq_hashes(ids, g.config.block_size, seed, out);
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
  g.metrics.predicted_on_route_tokens.inc(static_cast<double>(d.chosen().predicted_hits) *
                                          g.config.block_size);
  g.metrics.lower_tier_hit_tokens.inc(static_cast<double>(d.chosen().lower_hits) *
                                      g.config.block_size);
  if (d.gated > 0) g.metrics.overload_gated.inc();
}

std::string_view stage_label(routing::Stage stage) {
  switch (stage) {
    case routing::Stage::kPrefill: return "prefill ";
    case routing::Stage::kDecode: return "decode ";
    case routing::Stage::kAggregated: break;
  }
  return "";
}

// One stage's routing decision in one attempt: the worker (its blocks held as active load by
// `ticket`), or none. With none, `answer` is the client's answer on a first attempt (shed, or
// an error); on a later attempt it is empty and the caller answers with the last failure.
struct StagePick {
  const FleetMember* member = nullptr;
  std::optional<http::Response> answer;
};

net::awaitable<StagePick> pick_worker(GatewayContext& g, std::shared_ptr<const FleetView> view,
                                      const RoutedRequest* r, routing::Stage stage,
                                      std::vector<kv::WorkerId> tried, uint32_t attempt,
                                      std::optional<discovery::PdProtocol> protocol,
                                      HeldTicket* ticket) {
  StagePick out;
  std::vector<kv::WorkerId> candidates;
  const Pick pick = co_await wait_for_candidates(g, view, r->model, stage, std::move(tried),
                                                 protocol, attempt == 0, r->deadline, &candidates);
  if (pick != Pick::kOk) {
    if (attempt == 0) out.answer = shed_response(g, *r, *view, pick, stage_label(stage));
    co_return out;
  }
  const Nanos t_score = g.clock.now();
  auto routed = g.router->route(r->hashes, r->prompt_tokens, candidates, stage);
  g.metrics.score.observe(to_seconds(g.clock.now() - t_score));
  if (!routed.ok()) {
    out.answer = fail_response(g, *r, routed.status(), {});
    co_return out;
  }
  ticket->hold(routed->ticket);
  const routing::Decision& d = routed->decision;
  const FleetMember* member = view->by_slot(d.worker());
  if (member == nullptr) {  // cannot happen: candidates come from this view
    out.answer = fail_response(g, *r, internal_error("routing chose an unknown worker"), {});
    co_return out;
  }
  if (attempt == 0 && stage != routing::Stage::kDecode) record_prediction(g, *r, d);
  INFERA_LOG(kDebug, "gateway").msg("routed").kv("request_id", r->request_id)
      .kv("stage", routing::stage_name(stage)).kv("worker", member->info.id)
      .kv("hits", d.chosen().cache_hits).kv("blocks", d.request_blocks)
      .kv("active", d.chosen().active_blocks).kv("cost", d.chosen().cost)
      .kv("attempt", attempt);
  out.member = member;
  co_return out;
}

// A worker that failed before the client saw a byte: marked, counted, excluded from the
// request's next attempt.
void note_retry(GatewayContext& g, const RoutedRequest& r, routing::Stage stage,
                const FleetMember& m, int status, const Status& error,
                std::vector<kv::WorkerId>& tried) {
  g.fleet->record_failure(m);
  g.metrics.retries.inc();
  if (stage != routing::Stage::kAggregated) {
    g.metrics.count_disagg(routing::stage_name(stage), m.info.id, status);
  }
  INFERA_LOG(kWarn, "gateway").msg("worker failed before the first byte; trying another")
      .kv("request_id", r.request_id).kv("stage", routing::stage_name(stage))
      .kv("worker", m.info.id).kv("error", error.message());
  tried.push_back(m.slot);
}

// The end of a relayed exchange (the client's answer is written, or it left): the worker's
// health, the request's timings and counters. kRetryable is the caller's.
void settle(GatewayContext& g, const RoutedRequest& r, routing::Stage stage, const FleetMember& m,
            const proxy::ForwardOutcome& outcome) {
  const bool disagg = stage != routing::Stage::kAggregated;
  int status = outcome.upstream_status;
  switch (outcome.result) {
    case proxy::ForwardResult::kCompleted:
      g.fleet->record_success(m);
      g.metrics.ttft.observe(to_seconds(outcome.first_byte - r.start));
      g.metrics.duration.observe(to_seconds(g.clock.now() - r.start));
      break;
    case proxy::ForwardResult::kBrokenStream:
      g.fleet->record_failure(m);
      INFERA_LOG(kWarn, "gateway").msg("worker failed mid-stream")
          .kv("request_id", r.request_id).kv("stage", routing::stage_name(stage))
          .kv("worker", m.info.id).kv("error", outcome.error.message());
      status = 502;
      break;
    case proxy::ForwardResult::kClientGone:
    case proxy::ForwardResult::kRetryable:
      status = 499;
      break;
  }
  if (disagg) g.metrics.count_disagg(routing::stage_name(stage), m.info.id, status);
  g.metrics.count_request(r.route, status, m.info.id);
}

// Routes among `stage`'s workers (with `protocol`, those that speak it) and relays one upstream
// exchange (`body`) to the client: an aggregated request, or the decode stage of a vLLM-style
// disaggregated one. A worker that fails before the first byte is marked and the next best is
// tried (up to --retries); after it, the client gets an OpenAI error event and the stream ends
// (proxy::forward). An empty `body` sends the client's own.
net::awaitable<http::Response> relay(GatewayContext& g, http::Request& request,
                                     http::ResponseWriter& out,
                                     std::shared_ptr<const FleetView> view, RoutedRequest r,
                                     routing::Stage stage,
                                     std::optional<discovery::PdProtocol> protocol,
                                     std::string body) {
  std::vector<kv::WorkerId> tried;
  Status last_error = unavailable("no " + std::string(stage_label(stage)) + "worker is available");
  for (uint32_t attempt = 0; attempt <= g.config.retries; ++attempt) {
    HeldTicket ticket(*g.router);
    StagePick pick = co_await pick_worker(g, view, &r, stage, tried, attempt, protocol, &ticket);
    if (pick.answer) co_return std::move(*pick.answer);
    if (pick.member == nullptr) break;
    const FleetMember& member = *pick.member;

    http::Request up = upstream_request(request, r.request_id, body.empty() ? request.body : body);
    proxy::ForwardOptions fo;
    fo.deadline = r.deadline;
    fo.on_first_byte = [&ticket] { ticket.prefill_done(); };
    InflightCall call(g, member);
    proxy::ForwardOutcome outcome =
        co_await proxy::forward(*g.upstream, member.endpoint, std::move(up), out, fo, g.clock);
    call.end();
    ticket.release();
    if (outcome.result != proxy::ForwardResult::kRetryable) {
      settle(g, r, stage, member, outcome);
      co_return http::Response{};
    }
    note_retry(g, r, stage, member, 502, outcome.error, tried);
    last_error = outcome.error;
    if (g.clock.now() > r.deadline) {
      last_error = deadline_exceeded("the request deadline passed while retrying");
      break;
    }
  }
  co_return fail_response(g, r, last_error, {.origin = http::ErrorOrigin::kUpstream});
}

// A prefill answer that reached the client as it is: the worker refused the request (4xx).
http::Response passed_through(GatewayContext& g, const RoutedRequest& r, const FleetMember& m,
                              http::Response answer) {
  http::Response resp;
  resp.status = answer.status;
  const std::string_view type = answer.header("Content-Type");
  if (!type.empty()) resp.headers.push_back({"Content-Type", std::string(type)});
  resp.headers.push_back({"X-Request-Id", r.request_id});
  resp.body = std::move(answer.body);
  g.metrics.count_request(r.route, resp.status, m.info.id);
  return resp;
}

// vLLM style: prefill among the prefill workers (prefill weight), then decode among the decode
// workers (decode weight) with the prefill answer's kv_transfer_params. Both workers carry the
// prompt's blocks as active load until the request ends. A prefill worker that fails before
// answering is replaced by another (up to --retries); the decode call behaves like an
// aggregated request. `first` is the attempt-0 prefill choice, its blocks held by `ticket`.
net::awaitable<http::Response> serve_vllm(GatewayContext& g, http::Request& request,
                                          http::ResponseWriter& out,
                                          std::shared_ptr<const FleetView> view, RoutedRequest r,
                                          const FleetMember* first, HeldTicket* ticket) {
  constexpr auto kVllm = discovery::PdProtocol::kVllm;
  const std::string prefill_request_body = prefill_body(request.body);
  std::optional<std::string> params;
  bool prefilled = false;
  std::vector<kv::WorkerId> tried;
  Status last_error = unavailable("no prefill worker is available");
  for (uint32_t attempt = 0; attempt <= g.config.retries && !prefilled; ++attempt) {
    const FleetMember* member = first;
    if (attempt > 0) {
      StagePick pick = co_await pick_worker(g, view, &r, routing::Stage::kPrefill, tried, attempt,
                                            kVllm, ticket);
      if (pick.answer) co_return std::move(*pick.answer);
      if (pick.member == nullptr) break;
      member = pick.member;
    }

    http::Request up = upstream_request(request, r.request_id, prefill_request_body);
    InflightCall call(g, *member);
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
      note_retry(g, r, routing::Stage::kPrefill, *member, answer.ok() ? answer->status : 502,
                 last_error, tried);
      ticket->release();
      if (g.clock.now() > r.deadline) {
        last_error = deadline_exceeded("the request deadline passed while retrying");
        break;
      }
      continue;
    }
    g.fleet->record_success(*member);
    ticket->prefill_done();  // the prefill call's answer: its worker computed the prompt
    g.metrics.count_disagg("prefill", member->info.id, answer->status);
    if (answer->status != 200) co_return passed_through(g, r, *member, std::move(answer.value()));
    params = transfer_params(answer->body);
    if (!params) {
      INFERA_LOG(kDebug, "gateway")
          .msg("the prefill answer carries no kv_transfer_params; decode computes the prompt")
          .kv("request_id", r.request_id).kv("worker", member->info.id);
    }
    prefilled = true;
  }
  if (!prefilled) co_return fail_response(g, r, last_error, {.origin = http::ErrorOrigin::kUpstream});

  // Stage 2: decode, relayed to the client.
  std::string decode_request_body = params ? decode_body(request.body, *params) : request.body;
  co_return co_await relay(g, request, out, std::move(view), std::move(r), routing::Stage::kDecode,
                           kVllm, std::move(decode_request_body));
}

// SGLang style: the two calls of one attempt run at once on the connection's strand. Each can
// stop the other: a prefill failure before the client saw a byte stops the decode call (the
// decode worker would wait for KV blocks that never come), a decode failure stops the prefill
// call (its worker would hold the blocks for a room nobody joins).
struct PairCalls {
  explicit PairCalls(const net::any_io_executor& ex) : prefill_stop(ex), decode_stop(ex) {}
  net::steady_timer prefill_stop;  // cancelled when the decode call failed
  net::steady_timer decode_stop;   // cancelled when the prefill call failed first
  bool prefill_stopped = false;
  bool decode_stopped = false;
};

// Returns once `stopped` is set (its timer cancelled), or when cancelled itself.
net::awaitable<void> until_stopped(net::steady_timer* timer, const bool* stopped) {
  if (*stopped) co_return;
  timer->expires_at(net::steady_timer::time_point::max());
  (void)co_await timer->async_wait(use_nothrow);
}

// The prefill call's result, read to its end and checked.
struct PrefillCheck {
  int status = 0;       // the worker's HTTP status; 0: no answer
  Status error;         // ok: a 2xx answer without an error event
  bool stopped = false;  // stopped because the decode call failed, or the client left
  std::optional<http::Response> answer;  // a 4xx answer, for the client
};

// A prefill answer is good when it is 2xx and, streamed, carries no OpenAI error event.
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

// One whole upstream exchange, as a default-constructible value (awaitable operators need one).
struct Fetched {
  std::optional<http::Response> answer;
  Status error;
};
net::awaitable<Fetched> fetch(http::Client* client, http::Endpoint to, http::Request up) {
  Fetched f;
  auto answer = co_await client->request(to, std::move(up));
  if (answer.ok()) {
    f.answer = std::move(answer.value());
  } else {
    f.error = answer.error().status;
  }
  co_return f;
}

net::awaitable<PrefillCheck> sglang_prefill(GatewayContext& g, http::Endpoint to,
                                            http::Request up, const http::ResponseWriter* out,
                                            PairCalls* pair) {
  co_await net::this_coro::throw_if_cancelled(false);
  PrefillCheck c;
  auto call = fetch(g.upstream.get(), std::move(to), std::move(up));
  auto stop = until_stopped(&pair->prefill_stop, &pair->prefill_stopped);
  auto first = co_await (std::move(call) || std::move(stop));
  if (first.index() == 1 || std::get<0>(first).error.code() == StatusCode::kCancelled) {
    c.stopped = true;
    c.error = cancelled("the prefill call was stopped");
    co_return c;
  }
  Fetched& f = std::get<0>(first);
  if (!f.answer) {
    c.error = f.error;
  } else {
    c.status = f.answer->status;
    c.error = check_prefill_answer(*f.answer);
    if (f.answer->status >= 400 && f.answer->status < 500) c.answer = std::move(f.answer);
  }
  if (!c.error.ok() && !out->started()) {
    pair->decode_stopped = true;
    pair->decode_stop.cancel();
  }
  co_return c;
}

net::awaitable<proxy::ForwardOutcome> sglang_decode(GatewayContext& g, http::Endpoint to,
                                                    http::Request up, http::ResponseWriter* out,
                                                    proxy::ForwardOptions fo, PairCalls* pair) {
  co_await net::this_coro::throw_if_cancelled(false);
  auto call = proxy::forward(*g.upstream, to, std::move(up), *out, fo, g.clock);
  auto stop = until_stopped(&pair->decode_stop, &pair->decode_stopped);
  auto first = co_await (std::move(call) || std::move(stop));
  proxy::ForwardOutcome o;
  if (first.index() == 0) {
    o = std::move(std::get<0>(first));
  } else if (pair->decode_stopped && !out->started()) {
    o.result = proxy::ForwardResult::kRetryable;  // nothing reached the client
    o.error = unavailable("the prefill call failed");
  } else {
    // Not stopped by the prefill call: the request itself was cancelled (the server does so
    // when the client goes), possibly after the answer had started. Nothing to retry: a retry
    // would start a second response.
    o.result = proxy::ForwardResult::kClientGone;
    o.error = cancelled("the decode call was cancelled");
  }
  if (o.result == proxy::ForwardResult::kRetryable || o.result == proxy::ForwardResult::kClientGone) {
    pair->prefill_stopped = true;
    pair->prefill_stop.cancel();
  }
  co_return o;
}

// SGLang style: each attempt picks a prefill worker (prefill weight) and a decode worker (decode
// weight), adds the prefill worker's bootstrap address and a fresh random room to the client's
// body, and sends it to both at once. The decode answer goes to the client; the prefill answer
// is read to its end and checked. A failure of either before the client saw a byte stops the
// other, marks the failed worker and tries a new pair (up to --retries); after it, the client
// gets an OpenAI error event (proxy::forward). `first` is the attempt-0 prefill choice.
net::awaitable<http::Response> serve_sglang(GatewayContext& g, http::Request& request,
                                            http::ResponseWriter& out,
                                            std::shared_ptr<const FleetView> view, RoutedRequest r,
                                            const FleetMember* first, HeldTicket* prefill_ticket) {
  constexpr auto kSglang = discovery::PdProtocol::kSglang;
  std::vector<kv::WorkerId> tried_prefill;
  std::vector<kv::WorkerId> tried_decode;
  Status last_error = unavailable("no prefill worker is available");
  for (uint32_t attempt = 0; attempt <= g.config.retries; ++attempt) {
    const FleetMember* prefill = first;
    if (attempt > 0) {
      StagePick pick = co_await pick_worker(g, view, &r, routing::Stage::kPrefill, tried_prefill,
                                            attempt, kSglang, prefill_ticket);
      if (pick.answer) co_return std::move(*pick.answer);
      if (pick.member == nullptr) break;
      prefill = pick.member;
    }
    HeldTicket decode_ticket(*g.router);
    StagePick dpick = co_await pick_worker(g, view, &r, routing::Stage::kDecode, tried_decode,
                                           attempt, kSglang, &decode_ticket);
    if (dpick.answer) co_return std::move(*dpick.answer);
    if (dpick.member == nullptr) break;
    const FleetMember& decode = *dpick.member;

    // A transfer session id, random non-negative 63-bit as SGLang's routers draw it.
    const uint64_t room = random_u64() >> 1;
    const std::string body = bootstrap_body(request.body, prefill->info, room);
    INFERA_LOG(kDebug, "gateway").msg("sglang pair").kv("request_id", r.request_id)
        .kv("prefill", prefill->info.id).kv("decode", decode.info.id).kv("room", room);
    PairCalls pair(co_await net::this_coro::executor);
    proxy::ForwardOptions fo;
    fo.deadline = r.deadline;
    // The prefill call stops the decode call only while the client has seen nothing; the
    // decode call must then not start the client's response either (it may have its first
    // piece in hand already): a retried pair would write a second response head.
    fo.abandoned = &pair.decode_stopped;
    // The decode worker's first token means the prompt's prefill is done on both workers.
    fo.on_first_byte = [&decode_ticket, prefill_ticket] {
      decode_ticket.prefill_done();
      prefill_ticket->prefill_done();
    };
    InflightCall prefill_call(g, *prefill);
    InflightCall decode_call(g, decode);
    auto decode_op = sglang_decode(g, decode.endpoint, upstream_request(request, r.request_id, body),
                                   &out, fo, &pair);
    auto prefill_op = sglang_prefill(g, prefill->endpoint,
                                     upstream_request(request, r.request_id, body), &out, &pair);
    auto both = std::move(decode_op) && std::move(prefill_op);
    auto [outcome, check] = co_await std::move(both);
    prefill_call.end();
    decode_call.end();
    decode_ticket.release();
    prefill_ticket->release();

    const bool prefill_failed = !check.error.ok() && !check.stopped;
    if (prefill_failed) {
      INFERA_LOG(kWarn, "gateway").msg("prefill call failed")
          .kv("request_id", r.request_id).kv("worker", prefill->info.id)
          .kv("room", room).kv("error", check.error.message());
    }
    if (outcome.result != proxy::ForwardResult::kRetryable) {
      // The client has its answer (or left). The prefill call only counts.
      if (prefill_failed) {
        g.fleet->record_failure(*prefill);
      } else if (!check.stopped) {
        g.fleet->record_success(*prefill);
      }
      g.metrics.count_disagg("prefill", prefill->info.id,
                             check.stopped ? 499 : (check.status ? check.status : 502));
      settle(g, r, routing::Stage::kDecode, decode, outcome);
      co_return http::Response{};
    }
    if (check.answer) {  // the prefill worker refused the request itself: the client's answer
      g.fleet->record_success(*prefill);
      g.metrics.count_disagg("prefill", prefill->info.id, check.status);
      co_return passed_through(g, r, *prefill, std::move(*check.answer));
    }
    if (prefill_failed) {
      note_retry(g, r, routing::Stage::kPrefill, *prefill, check.status ? check.status : 502,
                 check.error, tried_prefill);
      last_error = check.error;
    } else {
      note_retry(g, r, routing::Stage::kDecode, decode, 502, outcome.error, tried_decode);
      last_error = outcome.error;
    }
    if (g.clock.now() > r.deadline) {
      last_error = deadline_exceeded("the request deadline passed while retrying");
      break;
    }
  }
  co_return fail_response(g, r, last_error, {.origin = http::ErrorOrigin::kUpstream});
}

// The stage a request's first worker is picked for: prefill on a split fleet.
routing::Stage first_stage(const GatewayContext& g, const FleetView& view, const std::string& model) {
  return g.fleet->split(view, model) ? routing::Stage::kPrefill : routing::Stage::kAggregated;
}

// Whether a request for `model` arriving now would be shed as kQueueFull by
// wait_for_candidates: every worker for its first stage is at its in-flight cap and the queue
// holds --max-queue requests already. (A slot freed meanwhile goes to a queued request first.)
bool queue_full(GatewayContext& g, const FleetView& view, const std::string& model) {
  if (g.slots.waiting() < g.config.max_queue) return false;
  std::vector<kv::WorkerId> candidates;
  bool at_capacity = false;
  g.fleet->candidates(view, model, first_stage(g, view, model), {}, candidates, &at_capacity);
  return candidates.empty() && at_capacity;
}

// A request on a split fleet: the protocol is the first chosen prefill worker's; retries stay
// with workers that speak it.
net::awaitable<http::Response> serve_disaggregated(GatewayContext& g, http::Request& request,
                                                   http::ResponseWriter& out,
                                                   std::shared_ptr<const FleetView> view,
                                                   RoutedRequest r) {
  HeldTicket prefill_ticket(*g.router);
  std::vector<kv::WorkerId> none;
  StagePick first = co_await pick_worker(g, view, &r, routing::Stage::kPrefill, none, 0,
                                         std::nullopt, &prefill_ticket);
  if (first.answer) co_return std::move(*first.answer);
  if (discovery::pd_protocol(first.member->info) == discovery::PdProtocol::kSglang) {
    co_return co_await serve_sglang(g, request, out, std::move(view), std::move(r), first.member,
                                    &prefill_ticket);
  }
  co_return co_await serve_vllm(g, request, out, std::move(view), std::move(r), first.member,
                                &prefill_ticket);
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
  const Fleet::ModelLookup found = g.fleet->lookup(parsed->model);
  if (!parsed->model.empty() && found.models_known && !found.served) {
    co_return fail(not_found("the model '" + parsed->model + "' does not exist"),
                   {.param = "model", .code = "model_not_found"});
  }

  if (g.config.max_inflight_per_worker != 0 && queue_full(g, *view, parsed->model)) {
    // Shed before the costly part: rendering and tokenizing a long chat prompt costs the
    // gateway about a millisecond, parsing it tens of microseconds, and this request would
    // get the same 429 after tokenization. Under a flood (or clients retrying at once) that
    // is the difference between refusing thousands of requests a second and refusing a few
    // hundred while the requests already admitted wait for the same cores.
    RoutedRequest shed;
    shed.route = route;
    shed.request_id = request_id;
    co_return shed_response(g, shed, *view, Pick::kQueueFull,
                            stage_label(first_stage(g, *view, parsed->model)));
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
  prompt_hashes(g, parsed->model, found.adapter, *ids, hashes);
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
                           std::nullopt, std::move(client_body));
}

}  // namespace infera::gateway
