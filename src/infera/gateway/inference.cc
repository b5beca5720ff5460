// The request path of ARCHITECTURE section 3: parse, tokenize (render chat), hash, score, pick,
// register active blocks, forward and relay, release on end, error or disconnect; a worker
// that fails before the first byte is marked and the request goes to the next best worker.
#include <algorithm>

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

http::Request upstream_request(const http::Request& client, const std::string& request_id) {
  http::Request up;
  up.method = client.method;
  up.target = client.target;
  up.body = client.body;  // forwarded unchanged
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

  std::vector<kv::WorkerId> tried;
  std::vector<kv::WorkerId> candidates;
  Status last_error = unavailable("no worker is available");
  const Nanos deadline = start + from_seconds(g.config.request_timeout_s);
  for (uint32_t attempt = 0; attempt <= g.config.retries; ++attempt) {
    bool at_capacity = false;
    g.fleet->candidates(*view, parsed->model, routing::Stage::kAggregated, tried, candidates,
                        &at_capacity);
    if (candidates.empty() && at_capacity && attempt == 0) {
      // Every worker is at its in-flight cap: wait in the bounded queue for a slot, up to the
      // first-byte deadline; a full queue or a wait that runs out sheds with 429.
      if (g.queued.fetch_add(1) >= g.config.max_queue) {
        g.queued.fetch_sub(1);
        co_return fail(resource_exhausted("every worker is at its in-flight limit and the queue "
                                          "is full; retry later"),
                       {.origin = http::ErrorOrigin::kServer});
      }
      const Nanos wait_until =
          std::min(deadline, g.clock.now() + from_seconds(g.config.upstream_first_byte_timeout_s));
      net::steady_timer timer(co_await net::this_coro::executor);
      while (candidates.empty() && at_capacity && g.clock.now() < wait_until) {
        timer.expires_after(std::chrono::milliseconds(5));
        auto [ec] = co_await timer.async_wait(use_nothrow);
        if (ec) break;  // cancelled: the client went away
        g.fleet->candidates(*view, parsed->model, routing::Stage::kAggregated, tried, candidates,
                            &at_capacity);
      }
      g.queued.fetch_sub(1);
    }
    if (candidates.empty()) {
      if (attempt > 0) break;
      if (at_capacity) {
        co_return fail(resource_exhausted("every worker is at its in-flight limit; retry later"),
                       {.origin = http::ErrorOrigin::kServer});
      }
      co_return fail(unavailable(view->members.empty() ? "no worker is registered"
                                                        : "no worker can serve this request now"),
                     {.origin = http::ErrorOrigin::kServer});
    }
    const Nanos t_score = g.clock.now();
    auto routed = g.router->route(hashes, static_cast<uint32_t>(ids->size()), candidates);
    g.metrics.score.observe(to_seconds(g.clock.now() - t_score));
    if (!routed.ok()) co_return fail(routed.status(), {});
    const routing::Decision& d = routed->decision;
    const FleetMember* member = view->by_slot(d.worker());
    if (member == nullptr) {  // cannot happen: candidates come from this view
      g.router->release(routed->ticket);
      co_return fail(internal_error("routing chose an unknown worker"), {});
    }
    if (attempt == 0 && d.request_blocks > 0) {
      g.metrics.predicted_hit_ratio.observe(static_cast<double>(d.chosen().cache_hits) /
                                            static_cast<double>(d.request_blocks));
      g.metrics.prompt_tokens.inc(static_cast<double>(ids->size()));
      g.metrics.predicted_hit_tokens.inc(static_cast<double>(d.chosen().cache_hits) *
                                         g.config.block_size);
    }
    INFERA_LOG(kDebug, "gateway").msg("routed").kv("request_id", request_id)
        .kv("worker", member->info.id).kv("hits", d.chosen().cache_hits)
        .kv("blocks", d.request_blocks).kv("cost", d.chosen().cost).kv("attempt", attempt);

    member->rt->inflight.fetch_add(1, std::memory_order_relaxed);
    member->rt->requests.fetch_add(1, std::memory_order_relaxed);
    proxy::ForwardOptions fo;
    fo.deadline = deadline;
    proxy::ForwardOutcome outcome = co_await proxy::forward(
        *g.upstream, member->endpoint, upstream_request(request, request_id), out, fo, g.clock);
    member->rt->inflight.fetch_sub(1, std::memory_order_relaxed);
    g.router->release(routed->ticket);

    switch (outcome.result) {
      case proxy::ForwardResult::kCompleted:
        g.fleet->record_success(*member);
        g.metrics.ttft.observe(to_seconds(outcome.first_byte - start));
        g.metrics.duration.observe(to_seconds(g.clock.now() - start));
        g.metrics.count_request(route, outcome.upstream_status, member->info.id);
        co_return http::Response{};
      case proxy::ForwardResult::kBrokenStream:
        g.fleet->record_failure(*member);
        INFERA_LOG(kWarn, "gateway").msg("worker failed mid-stream").kv("request_id", request_id)
            .kv("worker", member->info.id).kv("error", outcome.error.message());
        g.metrics.count_request(route, 502, member->info.id);
        co_return http::Response{};
      case proxy::ForwardResult::kClientGone:
        g.metrics.count_request(route, 499, member->info.id);
        co_return http::Response{};
      case proxy::ForwardResult::kRetryable:
        g.fleet->record_failure(*member);
        g.metrics.retries.inc();
        INFERA_LOG(kWarn, "gateway").msg("worker failed before the first byte; trying another")
            .kv("request_id", request_id).kv("worker", member->info.id)
            .kv("error", outcome.error.message());
        last_error = outcome.error;
        tried.push_back(member->slot);
        if (g.clock.now() > deadline) {
          last_error = deadline_exceeded("the request deadline passed while retrying");
          attempt = g.config.retries;  // stop
        }
        break;
    }
  }
  co_return fail(last_error, {.origin = http::ErrorOrigin::kUpstream});
}

}  // namespace infera::gateway
