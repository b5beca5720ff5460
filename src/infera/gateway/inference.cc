// The request path of docs/contracts.md section 3, the gateway's half: parse, tokenize (render
// chat), hash, admit (the in-flight cap and its queue), score and pick, and every metric and log
// line. The exchange with the workers (the attempt loop, retries before the first byte, the
// aggregated, vLLM two-call and SGLang paired strategies) is proxy::exchange's; the gateway is
// its Owner (RequestOwner below): it picks each stage's worker, holds the worker's active load
// and in-flight slot, and keeps the accounts of every call and of the request.
#include <algorithm>
#include <optional>

#include "infera/common/log.h"
#include "infera/gateway/context.h"
#include "infera/gateway/request_trace.h"
#include "infera/http/error.h"
#include "infera/http/net.h"
#include "infera/kv/block_hash.h"
#include "infera/proxy/exchange.h"

namespace infera::gateway {
namespace {

std::string_view route_name(ApiKind kind) {
  return kind == ApiKind::kChatCompletions ? "/v1/chat/completions" : "/v1/completions";
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

// One request's access line (--access-log): written once, wherever the request ended.
void log_access(const GatewayContext& g, std::string_view trace_id, const RequestEnd& a) {
  if (!g.config.access_log || !log_enabled(LogLevel::kInfo)) return;
  LogLine line(LogLevel::kInfo, "access");
  line.buffered().msg("request").kv("request_id", a.request_id).kv("trace_id", trace_id).kv("model", a.model)
      .kv("route", a.route).kv("worker", a.worker).kv("status", a.status)
      .kv("prompt_tokens", a.prompt_tokens).kv("hit_blocks", a.hit_blocks)
      .kv("output_tokens", a.output_tokens).kv("retries", a.retries)
      .kv("duration_s", a.duration_s);
  if (a.ttft_s >= 0) line.kv("ttft_s", a.ttft_s);
}

// What the owner needs about one request, computed once before the exchange.
struct RoutedRequest {
  std::string route;
  std::string request_id;
  std::string model;
  std::string metric_model;  // the model label: `model` when the fleet serves it, else ""
  RequestTrace trace;        // the client's trace context, or the one started here
  uint32_t prompt_tokens = 0;
  // /v1/responses: the worker that answered the response this request continues ("": none or
  // unknown), and whether the answer's id is to be remembered for the requests continuing it.
  std::string pinned_worker;
  bool remember_answer = false;
  double tokenize_s = 0;     // the router's own work on the prompt, for its span
  double hash_s = 0;
  std::vector<uint64_t> hashes;
  Nanos start{0};
  Nanos deadline{0};
};

// A request is over: its access line, and its span when it is traced and sampled.
void request_done(GatewayContext& g, const RoutedRequest& r, const RequestEnd& end) {
  log_access(g, r.trace.trace_id, end);
  if (g.spans && r.trace.sampled) g.spans->submit(router_span(r.trace, end));
}

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

// One call in flight on a worker (its --max-inflight-per-worker count), holding the slot taken
// with WorkerRuntime::try_take_slot.
class InflightCall {
 public:
  // `m` must outlive the call (it belongs to the request's fleet view).
  InflightCall(GatewayContext& g, const FleetMember& m) : member_(&m), rt_(m.rt), slots_(&g.slots) {
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

}  // namespace

Result<std::vector<uint32_t>> prompt_tokens(const GatewayContext& g, OpenAiRequest& r,
                                            Nanos& tokenize_time) {
  if (!r.prompt_ids.empty()) return std::move(r.prompt_ids);
  if (!g.prompts) return std::vector<uint32_t>{};  // no tokenizer: route by load only
  const Nanos t0 = g.clock.now();
  Result<std::vector<uint32_t>> ids = encode_prompt(*g.prompts, r);  // the engine's path too
  if (ids.ok()) r.media_from_token = tokens_before_media(*g.prompts, r, *ids);
  tokenize_time += g.clock.now() - t0;
  return ids;
}

void prompt_hashes(const GatewayContext& g, const OpenAiRequest& r, bool adapter,
                   std::span<const uint32_t> ids, std::vector<uint64_t>& out) {
  const uint32_t bs = g.config.block_size;
  const uint64_t seed = adapter ? kv::lora_seed(r.model) : kv::kHashSeed;
  if (r.media_digest == 0) return kv::compute_seq_hashes(ids, bs, seed, out);
  // Blocks wholly before the media hash as any prompt's; the rest chain on with the media's seed.
  const size_t plain = std::min(r.media_from_token, ids.size()) / bs * bs;
  kv::compute_seq_hashes(ids.first(plain), bs, seed, out);
  thread_local std::vector<uint64_t> rest;
  kv::compute_seq_hashes(ids.subspan(plain), bs, kv::media_seed(seed, r.media_digest), rest, nullptr,
                         !out.empty(), out.empty() ? 0 : out.back());
  out.insert(out.end(), rest.begin(), rest.end());
}

namespace {

// The client's answer for a request that fails here (never reached a worker, or every attempt
// failed): the OpenAI error, the request id, the request counted.
// `resp` as the client's answer for `r` that no worker gave: the request id on it, the request
// counted and its access line written. Every such answer goes through here.
http::Response answer_here(GatewayContext& g, const RoutedRequest& r, http::Response resp,
                           std::string_view worker = {}) {
  resp.headers.push_back({"X-Request-Id", r.request_id});
  g.metrics.count_request(r.route, resp.status, worker, r.metric_model);
  request_done(g, r, {.request_id = r.request_id, .route = r.route, .model = r.model,
                      .worker = worker, .status = resp.status, .prompt_tokens = r.prompt_tokens,
                      .duration_s = to_seconds(g.clock.now() - r.start),
                      .tokenize_s = r.tokenize_s, .hash_s = r.hash_s});
  return resp;
}

http::Response fail_response(GatewayContext& g, const RoutedRequest& r, const Status& s,
                             http::ErrorContext ctx, std::string_view worker = {}) {
  return answer_here(g, r, http::error_response(s, ctx), worker);
}

// No candidate for `stage`.
http::Response shed_response(GatewayContext& g, const RoutedRequest& r, const FleetView& view,
                             Pick pick, routing::Stage stage) {
  const std::string who = "every " + std::string(routing::stage_worker(stage));
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
                                       : "no " + std::string(routing::stage_worker(stage)) +
                                             " can serve this request now"),
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

// The stage a request's first worker is picked for: prefill on a split fleet.
routing::Stage first_stage(const GatewayContext& g, const FleetView& view,
                           const std::string& model) {
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

// A picked worker's route-time load (its router ticket) and its in-flight slot.
class RouteHold final : public proxy::Hold {
 public:
  RouteHold(GatewayContext& g, const FleetMember& m, kv::LoadTicket ticket)
      : ticket_(*g.router), call_(g, m) {
    ticket_.hold(ticket);
  }
  void prefill_done() override { ticket_.prefill_done(); }
  void call_ended() override { call_.end(); }

 private:
  HeldTicket ticket_;
  InflightCall call_;
};

// The gateway's side of one request's exchange: routing and accounting.
class RequestOwner final : public proxy::Owner {
 public:
  // `meter`: what the relayed answer generated, measured as it is relayed.
  RequestOwner(GatewayContext& g, std::shared_ptr<const FleetView> view, const RoutedRequest& r,
               const proxy::TokenMeter& meter)
      : g_(g), view_(std::move(view)), r_(r), meter_(meter) {}

  net::awaitable<proxy::Picked> pick(routing::Stage stage, uint32_t attempt,
                                     std::vector<kv::WorkerId> tried,
                                     std::optional<discovery::PdProtocol> protocol) override;

  void call_ended(routing::Stage stage, const proxy::Worker& w, proxy::Health health,
                  int status) override {
    const FleetMember& m = member(w);
    if (health == proxy::Health::kSuccess) g_.fleet->record_success(m);
    if (health == proxy::Health::kFailure) g_.fleet->record_failure(m);
    if (stage != routing::Stage::kAggregated) {
      g_.metrics.count_disagg(routing::stage_name(stage), m.info.id, status);
    }
  }

  void retrying(routing::Stage stage, const proxy::Worker& w, const Status& error) override {
    g_.metrics.retries.inc();
    ++retries_;
    if (r_.trace.sampled) {
      retry_events_.push_back({"retry", unix_ns_after(r_.trace, to_seconds(g_.clock.now() - r_.start)),
                               {{"infera.worker", w.info->id},
                                {"infera.stage", std::string(routing::stage_name(stage))},
                                {"error.message", error.message()}}});
    }
    INFERA_LOG(kWarn, "gateway")
        .msg("worker failed before the first byte; trying another")
        .kv("request_id", r_.request_id)
        .kv("stage", routing::stage_name(stage))
        .kv("worker", w.info->id)
        .kv("error", error.message());
  }

  void ended(const proxy::Worker& w, int status, const proxy::ForwardOutcome* relayed) override {
    const double first_byte_s = relayed != nullptr && relayed->first_byte.count() != 0
                                    ? to_seconds(relayed->first_byte - r_.start)
                                    : -1;
    const uint64_t generated = relayed != nullptr ? meter_.generated() : 0;
    if (r_.remember_answer && status / 100 == 2 && !meter_.answer_id().empty()) {
      g_.responses.remember(meter_.answer_id(), w.info->id, g_.clock.now());
    }
    if (generated > 0) g_.metrics.count_generated(r_.metric_model, generated);
    request_done(g_, r_, {.request_id = r_.request_id, .route = r_.route, .model = r_.model,
                          .worker = w.info->id, .status = status, .prompt_tokens = r_.prompt_tokens,
                          .hit_blocks = hit_blocks_,
                          .request_blocks = static_cast<uint32_t>(r_.hashes.size()),
                          .retries = retries_, .output_tokens = generated, .ttft_s = first_byte_s,
                          .duration_s = to_seconds(g_.clock.now() - r_.start),
                          .tokenize_s = r_.tokenize_s, .hash_s = r_.hash_s, .score_s = score_s_,
                          .events = &retry_events_});
    if (relayed != nullptr && relayed->result == proxy::ForwardResult::kCompleted) {
      g_.metrics.observe_completed(r_.metric_model, to_seconds(relayed->first_byte - r_.start),
                                   to_seconds(g_.clock.now() - r_.start));
    }
    if (relayed != nullptr && relayed->result == proxy::ForwardResult::kBrokenStream) {
      INFERA_LOG(kWarn, "gateway")
          .msg("worker failed mid-stream")
          .kv("request_id", r_.request_id)
          .kv("worker", w.info->id)
          .kv("error", relayed->error.message());
    }
    g_.metrics.count_request(r_.route, status, w.info->id, r_.metric_model);
  }

  http::Response failed(const Status& error) override {
    return fail_response(g_, r_, error, {.origin = http::ErrorOrigin::kUpstream});
  }

  uint64_t bootstrap_room() override { return random_u64() >> 1; }  // as SGLang's routers draw

 private:
  // A continued response goes to the worker that answered it when that one is a candidate.
  void pin(std::vector<kv::WorkerId>& candidates) {
    for (const kv::WorkerId slot : candidates) {
      const FleetMember* m = view_->by_slot(slot);
      if (m != nullptr && m->info.id == r_.pinned_worker) {
        candidates.assign(1, slot);
        g_.metrics.count_affinity("pinned");
        return;
      }
    }
    g_.metrics.count_affinity("unavailable");
  }

  // The pick's accounting once `m` holds the request: prediction metrics, the log, the worker.
  proxy::Picked finish_pick(routing::Stage stage, uint32_t attempt, const routing::Decision& d,
                            const FleetMember& m, proxy::Picked out);

  // The member a picked worker belongs to (one of the few this request picked).
  const FleetMember& member(const proxy::Worker& w) const {
    for (const FleetMember* m : picked_) {
      if (m->slot == w.slot) return *m;
    }
    INFERA_CHECK(false);  // the spine reports only workers this owner picked
    return *picked_.front();
  }

  GatewayContext& g_;
  std::shared_ptr<const FleetView> view_;  // the members' storage, for the whole exchange
  const RoutedRequest& r_;
  const proxy::TokenMeter& meter_;
  std::vector<const FleetMember*> picked_;
  uint32_t retries_ = 0;     // workers that failed before the first byte (the access line)
  uint32_t hit_blocks_ = 0;  // predicted hits on the (last) chosen prefill or aggregated worker
  double score_s_ = 0;       // every routing decision's time (the span)
  std::vector<trace::SpanEvent> retry_events_;  // sampled requests only
};

// One stage's routing decision in one attempt. With no candidate, the answer on a first attempt
// is the shed (429) or 503; on a later attempt none (the request ends with its last failure).
net::awaitable<proxy::Picked> RequestOwner::pick(routing::Stage stage, uint32_t attempt,
                                                 std::vector<kv::WorkerId> tried,
                                                 std::optional<discovery::PdProtocol> protocol) {
  proxy::Picked out;
  std::vector<kv::WorkerId> candidates;
  for (;;) {
    const Pick pick = co_await wait_for_candidates(g_, view_, r_.model, stage, tried, protocol,
                                                   attempt == 0, r_.deadline, &candidates);
    if (pick != Pick::kOk) {
      if (attempt == 0) out.answer = shed_response(g_, r_, *view_, pick, stage);
      co_return out;
    }
    if (attempt == 0 && !r_.pinned_worker.empty()) pin(candidates);
    const Nanos t_score = g_.clock.now();
    auto routed = g_.router->route(r_.hashes, r_.prompt_tokens, candidates, stage);
    const double score_s = to_seconds(g_.clock.now() - t_score);
    g_.metrics.score.observe(score_s);
    score_s_ += score_s;
    if (!routed.ok()) {
      out.answer = fail_response(g_, r_, routed.status(), {});
      co_return out;
    }
    const routing::Decision& d = routed->decision;
    const FleetMember* m = view_->by_slot(d.worker());
    if (m == nullptr) {  // cannot happen: candidates come from this view
      g_.router->release(routed->ticket);
      out.answer = fail_response(g_, r_, internal_error("routing chose an unknown worker"), {});
      co_return out;
    }
    if (!m->rt->try_take_slot(g_.config.max_inflight_per_worker)) {
      // Its last slot went to a request routed at the same time on another thread: choose
      // again (that worker is now at its cap, so it is not a candidate, or this one waits).
      g_.router->release(routed->ticket);
      continue;
    }
    out.hold = std::make_unique<RouteHold>(g_, *m, routed->ticket);
    co_return finish_pick(stage, attempt, d, *m, std::move(out));
  }
}

proxy::Picked RequestOwner::finish_pick(routing::Stage stage, uint32_t attempt,
                                        const routing::Decision& d, const FleetMember& fm,
                                        proxy::Picked out) {
  const FleetMember* m = &fm;
  if (attempt == 0 && stage != routing::Stage::kDecode) record_prediction(g_, r_, d);
  INFERA_LOG(kDebug, "gateway")
      .msg("routed")
      .kv("request_id", r_.request_id)
      .kv("stage", routing::stage_name(stage))
      .kv("worker", m->info.id)
      .kv("hits", d.chosen().cache_hits)
      .kv("blocks", d.request_blocks)
      .kv("active", d.chosen().active_blocks)
      .kv("cost", d.chosen().cost)
      .kv("attempt", attempt);
  picked_.push_back(m);
  if (stage != routing::Stage::kDecode) hit_blocks_ = d.chosen().cache_hits + d.chosen().predicted_hits;
  out.worker = proxy::Worker{.slot = m->slot, .info = &m->info, .endpoint = &m->endpoint};
  return out;
}

// A request's answers before it is routed (refused, invalid, no such model): each with the
// request id, each counted.
struct EarlyAnswers {
  EarlyAnswers(GatewayContext& gc, std::string_view r, const http::Request& request)
      : g(gc),
        route(r),
        request_id(make_request_id(request.header("X-Request-Id"))),
        trace(begin_trace(request, gc.spans != nullptr, gc.config.otlp_sample_ratio)),
        start(gc.clock.now()) {}

  GatewayContext& g;
  std::string_view route;
  const std::string request_id;
  const RequestTrace trace;
  const Nanos start;
  std::string metric_model;  // set once the fleet is known to serve the request's model

  // Before the fleet is known to serve the model, the access line names none either.
  http::Response fail(const Status& s, http::ErrorContext ctx) const {
    return fail_response(g, routed(metric_model), s, ctx);
  }
  // The request's record for the owner and the accounts (RequestOwner, fail_response), with
  // what is known before routing.
  RoutedRequest routed(std::string model) const {
    RoutedRequest r;
    r.route = std::string(route);
    r.request_id = request_id;
    r.trace = trace;
    r.model = std::move(model);
    r.metric_model = metric_model;
    r.start = start;
    r.deadline = start + from_seconds(g.config.request_timeout_s);
    return r;
  }
  // The 401 when the request's API key does not pass (check_api_key); none when it does.
  std::optional<http::Response> deny(http::Request& request) const {
    std::optional<http::Response> denied = check_api_key(g, request);
    if (!denied) return std::nullopt;
    return answer_here(g, routed({}), std::move(*denied));  // called first: no model label yet
  }
};

// What every routed request checks once its model is known: the model label, the 404 for a
// model no worker of a fleet that lists its models serves, and the 429 when the queue is full
// (before the costly part: rendering and tokenizing a long chat prompt costs the gateway about a
// millisecond, parsing it tens of microseconds, and the request would get the same 429 after
// tokenization; under a flood that is the difference between refusing thousands of requests a
// second and refusing a few hundred while the admitted ones wait for the same cores). An answer
// ends the request.
std::optional<http::Response> admit_model(GatewayContext& g, EarlyAnswers& early, const FleetView& view,
                                          const std::string& model, const Fleet::ModelLookup& found,
                                          routing::Stage stage) {
  if (found.served) early.metric_model = model;
  if (!model.empty() && found.models_known && !found.served) {
    return early.fail(not_found("the model '" + model + "' does not exist"),
                      {.param = "model", .code = "model_not_found"});
  }
  if (g.config.max_inflight_per_worker != 0 && queue_full(g, view, model)) {
    return shed_response(g, early.routed(model), view, Pick::kQueueFull, stage);
  }
  return std::nullopt;
}

// The prompt's tokens and block hashes into `r` (tokenize, the prompt-size limit, hash, and
// their metrics); the client's 400 when the prompt cannot be encoded or is too long (`param`:
// the field that holds it).
std::optional<http::Response> hash_prompt(GatewayContext& g, const EarlyAnswers& early,
                                          OpenAiRequest& req, bool adapter, std::string_view param,
                                          RoutedRequest& r) {
  const http::ErrorContext ctx{.origin = http::ErrorOrigin::kRequestBody, .param = param};
  Nanos tokenize_time{0};
  Result<std::vector<uint32_t>> ids = prompt_tokens(g, req, tokenize_time);
  if (!ids.ok()) return early.fail(ids.status(), ctx);
  if (ids->size() > g.config.max_prompt_tokens) {
    return early.fail(invalid_argument("the prompt has " + std::to_string(ids->size()) +
                                       " tokens, more than this server accepts (" +
                                       std::to_string(g.config.max_prompt_tokens) + ")"),
                      ctx);
  }
  const Nanos t_hash = g.clock.now();
  prompt_hashes(g, req, adapter, *ids, r.hashes);
  const Nanos hash_time = g.clock.now() - t_hash;
  g.metrics.tokenize.observe(to_seconds(tokenize_time));
  g.metrics.hash.observe(to_seconds(hash_time));
  r.prompt_tokens = static_cast<uint32_t>(ids->size());
  r.tokenize_s = to_seconds(tokenize_time);
  r.hash_s = to_seconds(hash_time);
  return std::nullopt;
}

// The exchange of a request routed by `r` (proxy::exchange, with the gateway as its owner).
net::awaitable<http::Response> exchange_routed(GatewayContext& g, std::shared_ptr<const FleetView> view,
                                               RoutedRequest r, bool split, http::Request& request,
                                               http::ResponseWriter& out) {
  proxy::ExchangeSpec spec;
  spec.split = split;
  spec.retries = g.config.retries;
  spec.deadline = r.deadline;
  spec.clock = &g.clock;
  spec.request_id = r.request_id;
  spec.traceparent = r.trace.traceparent;
  spec.tracestate = r.trace.tracestate;
  // The stream's gaps go to the model's histogram, looked up at the first one.
  metrics::Histogram* itl = nullptr;
  // The answer's id only where it is remembered (/v1/responses).
  proxy::TokenMeter meter(
      [&g, &r, &itl](double gap_s) {
        if (itl == nullptr) itl = &g.metrics.inter_token_latency(r.metric_model);
        itl->observe(gap_s);
      },
      r.remember_answer);
  spec.meter = &meter;
  RequestOwner owner(g, std::move(view), r, meter);
  proxy::WriterDownstream downstream(out);
  co_return co_await proxy::exchange(request, downstream, *g.transport, owner, spec);
}

}  // namespace

net::awaitable<http::Response> handle_inference(GatewayContext& g, ApiKind kind,
                                                http::Request& request,
                                                http::ResponseWriter& out) {
  const std::string route(route_name(kind));
  EarlyAnswers early(g, route, request);
  auto fail = [&](const Status& s, http::ErrorContext ctx) { return early.fail(s, ctx); };
  if (std::optional<http::Response> denied = early.deny(request)) co_return std::move(*denied);
  std::string param;
  Result<OpenAiRequest> parsed = parse_openai_request(kind, request.body, g.limits, &param);
  if (!parsed.ok()) {
    co_return fail(parsed.status(), {.origin = http::ErrorOrigin::kRequestBody, .param = param});
  }
  const auto view = g.fleet->view();
  const Fleet::ModelLookup found = g.fleet->lookup(*view, parsed->model);
  if (std::optional<http::Response> answer = admit_model(g, early, *view, parsed->model, found,
                                                         first_stage(g, *view, parsed->model))) {
    co_return std::move(*answer);
  }

  RoutedRequest r = early.routed(parsed->model);
  const std::string_view prompt_param = kind == ApiKind::kChatCompletions ? "messages" : "prompt";
  if (std::optional<http::Response> bad = hash_prompt(g, early, *parsed, found.adapter, prompt_param, r)) {
    co_return std::move(*bad);
  }
  const bool split = g.fleet->split(*view, r.model);
  co_return co_await exchange_routed(g, std::move(view), std::move(r), split, request, out);
}

namespace {

// The OpenAI routes whose body names a model but whose prompt the router does not read
// (embeddings, rerank, score, detokenize): the same key check, model check,
// admission, pick (by load: no block hashes) and exchange as completions, aggregated, the body
// forwarded unchanged.
net::awaitable<http::Response> handle_passthrough(GatewayContext& g, std::string route,
                                                  http::Request& request, http::ResponseWriter& out) {
  EarlyAnswers early(g, route, request);
  auto fail = [&](const Status& s, http::ErrorContext ctx) { return early.fail(s, ctx); };
  if (std::optional<http::Response> denied = early.deny(request)) co_return std::move(*denied);
  std::string param;
  Result<std::string> model = parse_model_field(request.body, g.limits, &param);
  if (!model.ok()) co_return fail(model.status(), {.origin = http::ErrorOrigin::kRequestBody, .param = param});
  auto view = g.fleet->view();
  const Fleet::ModelLookup found = g.fleet->lookup(*view, *model);
  if (std::optional<http::Response> answer =
          admit_model(g, early, *view, *model, found, routing::Stage::kAggregated)) {
    co_return std::move(*answer);
  }
  co_return co_await exchange_routed(g, std::move(view), early.routed(std::move(*model)), /*split=*/false,
                                     request, out);
}

// POST /v1/responses: prefix-aware when the router can know the prompt (its input rendered as
// chat, as vLLM does), and a request continuing a stored response pinned to the worker that
// answered it (ResponseAffinity), whose id the answer's first bytes give (TokenMeter).
net::awaitable<http::Response> handle_responses(GatewayContext& g, http::Request& request,
                                                http::ResponseWriter& out) {
  EarlyAnswers early(g, "/v1/responses", request);
  auto fail = [&](const Status& s, http::ErrorContext ctx) { return early.fail(s, ctx); };
  if (std::optional<http::Response> denied = early.deny(request)) co_return std::move(*denied);
  std::string param;
  Result<ResponsesRequest> parsed = parse_responses_request(request.body, g.limits, &param);
  if (!parsed.ok()) co_return fail(parsed.status(), {.origin = http::ErrorOrigin::kRequestBody, .param = param});
  auto view = g.fleet->view();
  const Fleet::ModelLookup found = g.fleet->lookup(*view, parsed->model);
  if (std::optional<http::Response> answer =
          admit_model(g, early, *view, parsed->model, found, routing::Stage::kAggregated)) {
    co_return std::move(*answer);
  }
  RoutedRequest r = early.routed(parsed->model);
  r.remember_answer = true;
  if (parsed->chat) {
    if (std::optional<http::Response> bad = hash_prompt(g, early, *parsed->chat, found.adapter, "input", r)) {
      co_return std::move(*bad);
    }
  }
  if (!parsed->previous_response_id.empty()) {
    r.pinned_worker = g.responses.worker_of(parsed->previous_response_id, g.clock.now());
    if (r.pinned_worker.empty()) g.metrics.count_affinity("unknown");
  }
  co_return co_await exchange_routed(g, std::move(view), std::move(r), /*split=*/false, request, out);
}

}  // namespace

void add_inference_routes(GatewayContext& g, http::Routes& routes) {
  routes.add(http::Method::kPost, "/v1/chat/completions",
             [&g](http::Request& r, http::ResponseWriter& w) {
               return handle_inference(g, ApiKind::kChatCompletions, r, w);
             });
  routes.add(http::Method::kPost, "/v1/completions",
             [&g](http::Request& r, http::ResponseWriter& w) {
               return handle_inference(g, ApiKind::kCompletions, r, w);
             });
  // vLLM's /detokenize goes to a worker too: the engine's own tokenizer answers.
  routes.add(http::Method::kPost, "/v1/responses",
             [&g](http::Request& r, http::ResponseWriter& w) { return handle_responses(g, r, w); });
  for (const char* path : {"/v1/embeddings", "/v1/rerank", "/v1/score", "/detokenize"}) {
    routes.add(http::Method::kPost, path, [&g, path](http::Request& r, http::ResponseWriter& w) {
      return handle_passthrough(g, path, r, w);
    });
  }
}

}  // namespace infera::gateway
