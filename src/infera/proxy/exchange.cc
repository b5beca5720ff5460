#include "infera/proxy/exchange.h"

#include <functional>
#include <utility>

#include "infera/common/log.h"
#include "infera/http/net.h"
#include "infera/proxy/bodies.h"

namespace infera::proxy {
namespace {

using discovery::PdProtocol;
using routing::Stage;

// What one exchange works with; lives in exchange()'s frame.
struct Ctx {
  const http::Request& request;
  Downstream& out;
  Upstream& upstream;
  Owner& owner;
  const ExchangeSpec& spec;
};

// A call's request: the client's, with the exchange's request id and trace context.
http::Request outgoing(const Ctx& c, std::string body) {
  return upstream_request(c.request, c.spec.request_id, std::move(body),
                          {c.spec.traceparent, c.spec.tracestate});
}

// One attempt's result, for the loop.
struct Try {
  enum Kind { kSettled, kRetry, kNoWorker };
  Kind kind = kNoWorker;
  // kSettled: the client's answer when it is to be sent whole (none: written, or the client
  // left); kNoWorker: the owner's answer (a shed request), or none (end with the last failure).
  std::optional<http::Response> answer;
  Status error;  // kRetry: why the attempt failed
};

Try settled(std::optional<http::Response> answer = std::nullopt) {
  Try t;
  t.kind = Try::kSettled;
  t.answer = std::move(answer);
  return t;
}

Try no_worker(Picked& picked) {
  Try t;
  t.kind = Try::kNoWorker;
  t.answer = std::move(picked.answer);
  return t;
}

// `worker` failed before the client saw a byte: reported, excluded from the next attempts.
Try retry(Ctx& c, Stage stage, const Worker& worker, int status, Status error,
          std::vector<kv::WorkerId>& tried) {
  c.owner.call_ended(stage, worker, Health::kFailure, status);
  c.owner.retrying(stage, worker, error);
  tried.push_back(worker.slot);
  Try t;
  t.kind = Try::kRetry;
  t.error = std::move(error);
  return t;
}

using Attempt = std::function<net::awaitable<Try>(uint32_t attempt)>;

// The attempt loop: runs `attempt` 0, 1, ... until one settles, no worker is left, the retries
// are used up or the request's deadline has passed. Returns the settling Try, or a kNoWorker
// one whose error (`last_error` until an attempt failed) is the request's answer.
net::awaitable<Try> attempt_loop(const Ctx& c, Status last_error, const Attempt& attempt) {
  for (uint32_t n = 0; n <= c.spec.retries; ++n) {
    Try t = co_await attempt(n);
    if (t.kind == Try::kSettled) co_return t;
    if (t.kind == Try::kNoWorker) {
      if (t.answer) co_return t;
      break;
    }
    last_error = std::move(t.error);
    if (c.spec.clock->now() > c.spec.deadline) {
      last_error = deadline_exceeded("the request deadline passed while retrying");
      break;
    }
  }
  Try end;
  end.error = std::move(last_error);
  co_return end;
}

// The client's answer at the end of a loop.
http::Response answer_of(Ctx& c, Try t) {
  if (t.answer) return std::move(*t.answer);
  if (t.kind == Try::kSettled) return http::Response{};
  return c.owner.failed(t.error);
}

// The end of a relayed call that did not ask for a retry.
void settle_relayed(Ctx& c, Stage stage, const Worker& worker, const ForwardOutcome& o) {
  Health health = Health::kUnjudged;
  int status = o.upstream_status;
  switch (o.result) {
    case ForwardResult::kCompleted:
      health = Health::kSuccess;
      break;
    case ForwardResult::kBrokenStream:
      health = Health::kFailure;
      status = 502;
      break;
    case ForwardResult::kClientGone:
    case ForwardResult::kRetryable:
      status = 499;
      break;
  }
  c.owner.call_ended(stage, worker, health, status);
  c.owner.ended(worker, status, &o);
}

// A prefill answer that goes to the client as it is: the worker refused the request (4xx).
http::Response passed_through(Ctx& c, const Worker& worker, http::Response answer) {
  http::Response resp;
  resp.status = answer.status;
  const std::string_view type = answer.header("Content-Type");
  if (!type.empty()) resp.headers.push_back({"Content-Type", std::string(type)});
  resp.headers.push_back({"X-Request-Id", c.spec.request_id});
  resp.body = std::move(answer.body);
  c.owner.ended(worker, resp.status, nullptr);
  return resp;
}

// One relayed call per attempt: an aggregated request, or vLLM's decode stage (`body`: the
// stage's rewrite; null: the client's own).
net::awaitable<http::Response> serve_relayed(Ctx& c, Stage stage,
                                             std::optional<PdProtocol> protocol,
                                             const std::string* body) {
  std::vector<kv::WorkerId> tried;
  Attempt attempt = [&](uint32_t n) -> net::awaitable<Try> {
    Picked p = co_await c.owner.pick(stage, n, tried, protocol);
    if (!p.worker) co_return no_worker(p);
    const Worker w = *p.worker;
    Hold* hold = p.hold.get();
    ForwardOptions fo;
    fo.deadline = c.spec.deadline;
    fo.meter = c.spec.meter;
    fo.on_first_byte = [hold] { hold->prefill_done(); };
    http::Request up =
        outgoing(c, body ? *body : c.request.body);
    ForwardOutcome o = co_await c.upstream.relay(*w.endpoint, std::move(up), c.out, std::move(fo));
    hold->call_ended();
    p.hold.reset();
    if (o.result == ForwardResult::kRetryable) {
      co_return retry(c, stage, w, 502, std::move(o.error), tried);
    }
    settle_relayed(c, stage, w, o);
    co_return settled();
  };
  Status none = unavailable("no " + std::string(routing::stage_worker(stage)) + " is available");
  Try t = co_await attempt_loop(c, std::move(none), attempt);
  co_return answer_of(c, std::move(t));
}

// Attempt `n`'s prefill pick of a split request: attempt 0's was made before the protocol was
// known (exchange()), later ones among the workers that speak `protocol`.
net::awaitable<Picked> prefill_pick(Ctx& c, uint32_t n, Picked& first,
                                    const std::vector<kv::WorkerId>& tried, PdProtocol protocol) {
  if (n == 0) co_return std::move(first);
  co_return co_await c.owner.pick(Stage::kPrefill, n, tried, protocol);
}

// vLLM style: a prefill call among the prefill workers, whose answer carries the prompt's
// kv_transfer_params; then the decode stage, relayed, with them in its body. The prefill
// worker's load stays held until the request ends. `first`: attempt 0's prefill pick.
net::awaitable<http::Response> serve_vllm(Ctx& c, Picked first) {
  const std::string prefill_request = prefill_body(c.request.body);
  std::optional<std::string> params;
  std::unique_ptr<Hold> prefilled;  // the prefill worker that computed the prompt
  std::vector<kv::WorkerId> tried;
  Attempt attempt = [&](uint32_t n) -> net::awaitable<Try> {
    Picked p = co_await prefill_pick(c, n, first, tried, PdProtocol::kVllm);
    if (!p.worker) co_return no_worker(p);
    const Worker w = *p.worker;
    http::Request up = outgoing(c, prefill_request);
    auto answer = co_await c.upstream.fetch(*w.endpoint, std::move(up), c.spec.deadline);
    p.hold->call_ended();
    if (!answer.ok() &&
        (c.out.client_gone() || answer.error().status.code() == StatusCode::kCancelled)) {
      c.owner.call_ended(Stage::kPrefill, w, Health::kUnjudged, 499);
      c.owner.ended(w, 499, nullptr);
      co_return settled();
    }
    if (!answer.ok()) co_return retry(c, Stage::kPrefill, w, 502, answer.error().status, tried);
    if (answer->status >= 500) {
      co_return retry(c, Stage::kPrefill, w, answer->status,
                      unavailable("prefill worker answered HTTP " + std::to_string(answer->status)),
                      tried);
    }
    c.owner.call_ended(Stage::kPrefill, w, Health::kSuccess, answer->status);
    p.hold->prefill_done();  // the prefill call's answer: its worker computed the prompt
    prefilled = std::move(p.hold);
    if (answer->status != 200) co_return settled(passed_through(c, w, std::move(answer.value())));
    params = transfer_params(answer->body);
    if (!params) {
      INFERA_LOG(kDebug, "proxy")
          .msg("the prefill answer carries no kv_transfer_params; decode computes the prompt")
          .kv("request_id", c.spec.request_id)
          .kv("worker", w.info->id);
    }
    co_return settled();  // go on to the decode stage
  };
  Try t = co_await attempt_loop(c, unavailable("no prefill worker is available"), attempt);
  if (t.kind != Try::kSettled || t.answer || !prefilled) co_return answer_of(c, std::move(t));

  const std::string decode_request = params ? decode_body(c.request.body, *params) : c.request.body;
  co_return co_await serve_relayed(c, Stage::kDecode, PdProtocol::kVllm, &decode_request);
}

// SGLang style: the two calls of one attempt run at once on the request's strand, and each can
// stop the other: a prefill failure before the client saw a byte stops the decode call (its
// worker would wait for KV blocks that never come), a decode failure stops the prefill call
// (its worker would hold the blocks for a room nobody joins).
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
  int status = 0;                        // the worker's HTTP status; 0: no answer
  Status error;                          // ok: a 2xx answer without an error event
  bool stopped = false;                  // stopped because the decode call failed, or cancelled
  std::optional<http::Response> answer;  // a 4xx answer, for the client
};

// A whole call's result as a default-constructible value (awaitable operators need one).
struct Fetched {
  std::optional<http::Response> answer;
  Status error;
};

net::awaitable<Fetched> fetch_value(Upstream* upstream, const http::Endpoint* to,
                                    http::Request up, Nanos deadline) {
  Fetched f;
  auto answer = co_await upstream->fetch(*to, std::move(up), deadline);
  if (answer.ok()) {
    f.answer = std::move(answer.value());
  } else {
    f.error = answer.error().status;
  }
  co_return f;
}

net::awaitable<PrefillCheck> sglang_prefill(Upstream* upstream, const http::Endpoint* to,
                                            http::Request up, Nanos deadline,
                                            const Downstream* out,
                                            PairCalls* pair) {
  co_await net::this_coro::throw_if_cancelled(false);
  PrefillCheck c;
  auto call = fetch_value(upstream, to, std::move(up), deadline);
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

net::awaitable<ForwardOutcome> sglang_decode(Upstream* upstream, const http::Endpoint* to,
                                             http::Request up, Downstream* out, ForwardOptions fo,
                                             PairCalls* pair) {
  co_await net::this_coro::throw_if_cancelled(false);
  auto call = upstream->relay(*to, std::move(up), *out, std::move(fo));
  auto stop = until_stopped(&pair->decode_stop, &pair->decode_stopped);
  auto first = co_await (std::move(call) || std::move(stop));
  ForwardOutcome o;
  if (first.index() == 0) {
    o = std::move(std::get<0>(first));
  } else if (pair->decode_stopped && !out->started()) {
    o.result = ForwardResult::kRetryable;  // nothing reached the client
    o.error = unavailable("the prefill call failed");
  } else {
    // Not stopped by the prefill call: the request itself was cancelled (the server does so
    // when the client goes), possibly after the answer had started. Nothing to retry: a retry
    // would start a second response.
    o.result = ForwardResult::kClientGone;
    o.error = cancelled("the decode call was cancelled");
  }
  if (o.result == ForwardResult::kRetryable || o.result == ForwardResult::kClientGone) {
    pair->prefill_stopped = true;
    pair->prefill_stop.cancel();
  }
  co_return o;
}

// One SGLang pair, both calls to their end.
struct PairResult {
  ForwardOutcome decode;
  PrefillCheck prefill;
};

net::awaitable<PairResult> run_pair(Ctx& c, const Worker& prefill, Hold* prefill_hold,
                                    const Worker& decode, Hold* decode_hold) {
  const uint64_t room = c.owner.bootstrap_room();
  const std::string body = bootstrap_body(c.request.body, bootstrap_host(prefill.info->id),
                                          prefill.info->bootstrap_port, room);
  INFERA_LOG(kDebug, "proxy")
      .msg("sglang pair")
      .kv("request_id", c.spec.request_id)
      .kv("prefill", prefill.info->id)
      .kv("decode", decode.info->id)
      .kv("room", room);
  PairCalls pair(co_await net::this_coro::executor);
  ForwardOptions fo;
  fo.deadline = c.spec.deadline;
  fo.meter = c.spec.meter;
  // The prefill call stops the decode call only while the client has seen nothing; the decode
  // call must then not start the client's response either (it may have its first piece in hand
  // already): a retried pair would write a second response head.
  fo.abandoned = &pair.decode_stopped;
  // The decode worker's first token means the prompt's prefill is done on both workers.
  fo.on_first_byte = [decode_hold, prefill_hold] {
    decode_hold->prefill_done();
    prefill_hold->prefill_done();
  };
  auto decode_op = sglang_decode(&c.upstream, decode.endpoint,
                                 outgoing(c, body), &c.out,
                                 std::move(fo), &pair);
  auto prefill_op =
      sglang_prefill(&c.upstream, prefill.endpoint,
                     outgoing(c, body), c.spec.deadline,
                     &c.out, &pair);
  auto both = std::move(decode_op) && std::move(prefill_op);
  auto [outcome, check] = co_await std::move(both);
  prefill_hold->call_ended();
  decode_hold->call_ended();
  PairResult r;
  r.decode = std::move(outcome);
  r.prefill = std::move(check);
  co_return r;
}

// Classifies a finished pair: the client's answer, or a retry with the failed worker marked.
Try settle_pair(Ctx& c, const Worker& prefill, const Worker& decode, PairResult& r,
                std::vector<kv::WorkerId>& tried_prefill, std::vector<kv::WorkerId>& tried_decode) {
  const PrefillCheck& check = r.prefill;
  const bool prefill_failed = !check.error.ok() && !check.stopped;
  const int prefill_status = check.status ? check.status : 502;
  if (prefill_failed) {
    INFERA_LOG(kWarn, "proxy")
        .msg("prefill call failed")
        .kv("request_id", c.spec.request_id)
        .kv("worker", prefill.info->id)
        .kv("error", check.error.message());
  }
  if (r.decode.result != ForwardResult::kRetryable) {
    // The client has its answer (or left); the prefill call only counts.
    const Health health = prefill_failed  ? Health::kFailure
                          : check.stopped ? Health::kUnjudged
                                          : Health::kSuccess;
    c.owner.call_ended(Stage::kPrefill, prefill, health, check.stopped ? 499 : prefill_status);
    settle_relayed(c, Stage::kDecode, decode, r.decode);
    return settled();
  }
  if (r.prefill.answer) {  // the prefill worker refused the request itself: the client's answer
    c.owner.call_ended(Stage::kPrefill, prefill, Health::kSuccess, check.status);
    return settled(passed_through(c, prefill, std::move(*r.prefill.answer)));
  }
  if (prefill_failed) {
    return retry(c, Stage::kPrefill, prefill, prefill_status, check.error, tried_prefill);
  }
  return retry(c, Stage::kDecode, decode, 502, r.decode.error, tried_decode);
}

// SGLang style: each attempt picks a prefill and a decode worker and sends both the client's
// body with the prefill worker's bootstrap address and a fresh room. `first`: attempt 0's
// prefill pick.
net::awaitable<http::Response> serve_sglang(Ctx& c, Picked first) {
  std::vector<kv::WorkerId> tried_prefill;
  std::vector<kv::WorkerId> tried_decode;
  Attempt attempt = [&](uint32_t n) -> net::awaitable<Try> {
    Picked p = co_await prefill_pick(c, n, first, tried_prefill, PdProtocol::kSglang);
    if (!p.worker) co_return no_worker(p);
    Picked d = co_await c.owner.pick(Stage::kDecode, n, tried_decode, PdProtocol::kSglang);
    if (!d.worker) co_return no_worker(d);
    const Worker prefill = *p.worker;
    const Worker decode = *d.worker;
    PairResult r = co_await run_pair(c, prefill, p.hold.get(), decode, d.hold.get());
    p.hold.reset();
    d.hold.reset();
    co_return settle_pair(c, prefill, decode, r, tried_prefill, tried_decode);
  };
  Try t = co_await attempt_loop(c, unavailable("no prefill worker is available"), attempt);
  co_return answer_of(c, std::move(t));
}

}  // namespace

net::awaitable<http::Response> exchange(const http::Request& request, Downstream& out,
                                        Upstream& upstream, Owner& owner,
                                        const ExchangeSpec& spec) {
  Ctx c{request, out, upstream, owner, spec};
  if (!spec.split) co_return co_await serve_relayed(c, Stage::kAggregated, std::nullopt, nullptr);
  // A split fleet: the protocol is the first prefill worker's.
  std::vector<kv::WorkerId> none;
  Picked first = co_await owner.pick(Stage::kPrefill, 0, none, std::nullopt);
  if (!first.worker) {
    if (first.answer) co_return std::move(*first.answer);
    co_return owner.failed(unavailable("no prefill worker is available"));
  }
  if (discovery::pd_protocol(*first.worker->info) == PdProtocol::kSglang) {
    co_return co_await serve_sglang(c, std::move(first));
  }
  co_return co_await serve_vllm(c, std::move(first));
}

}  // namespace infera::proxy
