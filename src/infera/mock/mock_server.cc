#include "infera/mock/mock_server.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "infera/common/log.h"
#include "infera/common/random.h"
#include "infera/discovery/etcd.h"
#include "infera/launcher/worker_relays.h"
#include "infera/events/endpoint.h"
#include "infera/events/publisher.h"
#include "infera/http/client.h"
#include "infera/http/error.h"
#include "infera/http/event_loop.h"
#include "infera/http/sse.h"
#include "infera/launcher/worker_record.h"
#include "infera/mock/kv_transfer.h"
#include "infera/mock/openai_api.h"
#include "infera/mock/response_store.h"
#include "infera/mock/text_codec.h"
#include "infera/mock/vllm_metrics.h"

namespace infera::mock {

using engine::EngineConfig;
using engine::FinishReason;
using engine::RequestId;
using engine::TokenId;
using launcher::make_worker_record;
using launcher::WorkerRecordParams;

namespace {

constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr size_t kMaxChoices = 1024;  // core requests per HTTP request
// A decode engine takes a prefill's held KV blocks here (infera's stand-in for NIXL's side
// channel and SGLang's bootstrap server).
constexpr std::string_view kPullPath = "/infera/kv/pull";

http::Response bad_request(const Status& status, std::string_view param) {
  http::ErrorContext context;
  context.origin = http::ErrorOrigin::kRequestBody;
  context.param = param;
  return http::error_response(status, context);
}

http::Response model_not_found(const std::string& model) {
  http::ErrorContext context;
  context.code = "model_not_found";
  return http::error_response(not_found("The model `" + model + "` does not exist."), context);
}

bool query_flag(std::string_view query, std::string_view name) {
  for (std::string_view rest = query; !rest.empty();) {
    const size_t amp = rest.find('&');
    const std::string_view item = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
    if (!item.starts_with(name) || item.size() <= name.size() || item[name.size()] != '=') continue;
    const std::string_view v = item.substr(name.size() + 1);
    return v == "true" || v == "True" || v == "1";
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// The HTTP API: one handler per route; what they share is read-only but the runner.

class Api {
 public:
  Api(const MockOptions& options, const TextCodec& codec, EngineRunner& runner,
      metrics::Registry& registry, KvTransfers& transfers, http::Client& peers)
      : options_(options),
        codec_(codec),
        runner_(runner),
        registry_(registry),
        transfers_(transfers),
        peers_(peers),
        created_(static_cast<int64_t>(std::time(nullptr))),
        id_seed_(options.engine.output_seed ^ 0x6d6f636b656e67ULL),
        engine_id_(next_id(ApiKind::kCompletions).substr(5)) {}

  // The HTTP port, once bound: decode engines pull from it (vLLM's remote_port).
  void set_port(uint16_t port) { port_.store(port); }

  // The pull of a decode engine: takes the blocks held under "key" (served on the HTTP port
  // and on an SGLang-style prefill's bootstrap port).
  void add_pull_route(http::Routes& r) {
    r.add(http::Method::kPost, std::string(kPullPath),
          [this](http::Request& req, http::ResponseWriter&) { return pull(req); });
  }

  http::Routes routes() {
    http::Routes r;
    r.add(http::Method::kGet, "/health", [](http::Request&, http::ResponseWriter&) {
      return ready(http::Response::text(200, ""));
    });
    r.add(http::Method::kGet, "/ping", [](http::Request&, http::ResponseWriter&) {
      return ready(http::Response::text(200, ""));
    });
    r.add(http::Method::kPost, "/ping", [](http::Request&, http::ResponseWriter&) {
      return ready(http::Response::text(200, ""));
    });
    r.add(http::Method::kGet, "/v1/models", [this](http::Request&, http::ResponseWriter&) {
      return ready(http::Response::json(
          200, models_response(options_.served_name(), options_.model, runner_.max_model_len(),
                               created_, options_.lora_modules)));
    });
    r.add(http::Method::kGet, "/metrics", [this](http::Request&, http::ResponseWriter&) {
      http::Response res;
      res.status = 200;
      res.headers.push_back(http::Header{"Content-Type", std::string(kMetricsContentType)});
      res.body = registry_.render();
      return ready(std::move(res));
    });
    r.add(http::Method::kPost, "/tokenize", [this](http::Request& req, http::ResponseWriter&) {
      return ready(tokenize(req));
    });
    r.add(http::Method::kPost, "/detokenize", [this](http::Request& req, http::ResponseWriter&) {
      return ready(detokenize(req));
    });
    r.add(http::Method::kPost, "/reset_prefix_cache",
          [this](http::Request& req, http::ResponseWriter&) { return reset_prefix_cache(req); });
    r.add(http::Method::kPost, "/v1/completions",
          [this](http::Request& req, http::ResponseWriter& out) {
            return generate(ApiKind::kCompletions, req, out);
          });
    r.add(http::Method::kPost, "/v1/chat/completions",
          [this](http::Request& req, http::ResponseWriter& out) {
            return generate(ApiKind::kChat, req, out);
          });
    r.add(http::Method::kPost, "/v1/responses",
          [this](http::Request& req, http::ResponseWriter&) { return respond(req); });
    r.add(http::Method::kPost, "/v1/embeddings",
          [this](http::Request& req, http::ResponseWriter&) { return ready(embed(req)); });
    add_pull_route(r);
    return r;
  }

 private:
  static net::awaitable<http::Response> ready(http::Response response) { co_return response; }

  // Output budget of one prompt: max_tokens, or vLLM's default (16 for completions, the rest of
  // the context for chat); a prompt that does not fit is the user's error.
  Result<uint32_t> budget(const GenerateRequest& r, size_t prompt_len, std::string* param) const {
    const uint64_t max_len = runner_.max_model_len();
    const char* where = r.kind == ApiKind::kChat ? "messages" : "prompt";
    if (prompt_len >= max_len) {
      *param = where;
      return invalid_argument("This model's maximum context length is " + std::to_string(max_len) +
                              " tokens. However, your request has " + std::to_string(prompt_len) +
                              " input tokens. Please reduce the length of the input.");
    }
    const uint64_t max_tokens =
        r.max_tokens ? *r.max_tokens
                     : (r.kind == ApiKind::kCompletions ? 16 : max_len - prompt_len);
    if (prompt_len + max_tokens > max_len) {
      *param = "max_tokens";
      return invalid_argument("This model's maximum context length is " + std::to_string(max_len) +
                              " tokens. However, you requested " +
                              std::to_string(prompt_len + max_tokens) + " tokens (" +
                              std::to_string(prompt_len) + " in the " + where + ", " +
                              std::to_string(max_tokens) +
                              " in the completion). Please reduce the length of the " + where +
                              " or completion.");
    }
    if (r.min_tokens > max_tokens) {
      *param = "min_tokens";
      return invalid_argument("min_tokens must be less than or equal to max_tokens");
    }
    return static_cast<uint32_t>(max_tokens);
  }

  // 32 hex digits, unique in this engine's life; `salt` sets them apart from other engines'.
  std::string next_hex(uint64_t salt = 0) {
    uint64_t state = (id_seed_ ^ salt) + ids_.fetch_add(1, std::memory_order_relaxed);
    const uint64_t a = splitmix64(state);
    const uint64_t b = splitmix64(state);
    char hex[33];
    std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(a),
                  static_cast<unsigned long long>(b));
    return std::string(hex);
  }

  std::string next_id(ApiKind kind) {
    return (kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + next_hex();
  }

  // A prefill's answer for the decode side, shaped like vLLM's NixlConnector's: the held
  // blocks, this engine, its side channel (here: the HTTP port, where the pull route is) and
  // the key of the blocks.
  std::string kv_transfer_params(const std::string& key, const std::vector<uint32_t>& blocks) const {
    boost::json::object o;
    o["do_remote_prefill"] = true;
    o["do_remote_decode"] = false;
    boost::json::array ids;
    for (const uint32_t b : blocks) ids.push_back(b);
    o["remote_block_ids"] = std::move(ids);
    o["remote_engine_id"] = engine_id_;
    o["remote_request_id"] = key;
    o["remote_host"] = options_.advertise_host;
    o["remote_port"] = port_.load();
    o["tp_size"] = 1;
    return boost::json::serialize(o);
  }

  // What a request asks of this engine as a prefill or decode worker.
  enum class PdPart { kNone, kHold, kPull };
  struct PdPlan {
    PdPart part = PdPart::kNone;
    bool sglang = false;
    std::string key;   // the held blocks' key
    std::string host;  // kPull: where to pull from
    uint32_t port = 0;
  };
  PdPlan pd_plan(const GenerateRequest& r) const {
    PdPlan plan;
    const bool sglang = options_.pd_protocol == discovery::PdProtocol::kSglang;
    if (r.do_remote_decode) {  // vLLM, any role (kv_both)
      plan.part = PdPart::kHold;
    } else if (r.remote_prefill) {
      plan.part = PdPart::kPull;
      plan.key = r.remote_prefill->request_id;
      plan.host = r.remote_prefill->host;
      plan.port = r.remote_prefill->port;
    } else if (sglang && r.bootstrap_room && options_.role != discovery::Role::kBoth) {
      // SGLang's --disaggregation-mode decides what the same body means.
      plan.sglang = true;
      plan.key = "room:" + std::to_string(*r.bootstrap_room);
      if (options_.role == discovery::Role::kPrefill) {
        plan.part = PdPart::kHold;
      } else if (r.bootstrap_host && r.bootstrap_port) {
        plan.part = PdPart::kPull;
        plan.host = *r.bootstrap_host;
        plan.port = *r.bootstrap_port;
      }
    }
    return plan;
  }

  // Pulls the blocks `plan` names from the prefill engine: how many it held.
  net::awaitable<Result<uint32_t>> pull_from(PdPlan plan) {
    std::string host = plan.host;
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    http::Request req;
    req.method = http::Method::kPost;
    req.target = std::string(kPullPath);
    req.headers.push_back({"Content-Type", "application/json"});
    boost::json::object body;
    body["key"] = plan.key;
    body["wait"] = plan.sglang;
    req.body = boost::json::serialize(body);
    const http::Endpoint to{host, static_cast<uint16_t>(plan.port)};
    auto answer = co_await peers_.request(to, std::move(req));
    if (!answer.ok()) co_return answer.error().status;
    if (answer->status != 200) {
      co_return unavailable("the prefill engine at " + plan.host + ":" + std::to_string(plan.port) +
                            " answered the pull with HTTP " + std::to_string(answer->status) +
                            ": " + answer->body.substr(0, 200));
    }
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(answer->body, ec);
    const boost::json::value* blocks = ec || !v.is_object() ? nullptr : v.get_object().if_contains("blocks");
    if (blocks == nullptr || !blocks->is_number()) co_return data_loss("malformed pull answer");
    co_return static_cast<uint32_t>(blocks->to_number<uint64_t>(ec));
  }

  net::awaitable<http::Response> pull(http::Request& req) {
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(req.body, ec);
    const boost::json::object* o = ec ? nullptr : v.if_object();
    const boost::json::value* key = o ? o->if_contains("key") : nullptr;
    const boost::json::value* wait = o ? o->if_contains("wait") : nullptr;
    if (key == nullptr || !key->is_string() || key->get_string().empty() ||
        key->get_string().size() > 256 || (wait != nullptr && !wait->is_bool())) {
      co_return bad_request(invalid_argument("a pull is {\"key\": \"...\", \"wait\": bool}"), "key");
    }
    Result<uint32_t> taken = co_await transfers_.take(std::string(key->get_string()),
                                                      wait != nullptr && wait->get_bool());
    if (!taken.ok()) co_return http::error_response(taken.status());
    co_return http::Response::json(200, "{\"blocks\":" + std::to_string(*taken) + "}");
  }

  // The first choice of each prompt reports the prompt's cached tokens.
  static bool counts_cache(const GenerateRequest& r, uint32_t choice) { return choice % r.n == 0; }

  // Drains `stream` into whole answers: each choice's text is appended to results[choice].text
  // and its finish reason set; usage counts the output and the cached prompt tokens; `held`
  // receives a prefill's held blocks. kCancelled: the client left.
  net::awaitable<Status> collect(const GenerateRequest& r, RequestStream& stream, Usage& usage,
                                 std::vector<OutputDetokenizer>& detok,
                                 std::vector<ChoiceResult>& results, std::vector<uint32_t>& held) {
    std::vector<ChoiceOutput> outputs;
    for (;;) {
      const Status st = co_await stream.next(outputs);
      if (!st.ok()) co_return st;
      if (outputs.empty()) co_return ok_status();
      for (const ChoiceOutput& o : outputs) {
        ChoiceResult& c = results[o.choice];
        c.text += detok[o.choice].next(o.token);
        ++usage.completion_tokens;
        if (o.index == 0 && counts_cache(r, o.choice)) usage.cached_tokens += o.cached_tokens;
        if (o.finish != FinishReason::kNone) {
          c.text += detok[o.choice].flush();
          c.finish = o.finish;
        }
        if (!o.held_blocks.empty()) held = o.held_blocks;
      }
    }
  }

  // generate()'s answer in one piece: the JSON completion, a held prefill's answer, or a
  // streamed prefill's events at once. The arguments live in generate()'s frame.
  net::awaitable<http::Response> answer_whole(const GenerateRequest& r,
                                              const std::vector<PreparedPrompt>& prepared,
                                              const PdPlan& plan, const ResponseMeta& meta,
                                              RequestStream& stream, Usage& usage,
                                              std::vector<OutputDetokenizer>& detok,
                                              http::ResponseWriter& out) {
    const bool hold = plan.part == PdPart::kHold;
    const size_t num_choices = detok.size();
    std::vector<ChoiceResult> results(num_choices);
    std::vector<uint32_t> held;
    for (size_t i = 0; i < num_choices; ++i) results[i].text = prepared[i / r.n].echo_text;
    const Status collected = co_await collect(r, stream, usage, detok, results, held);
    if (collected.code() == StatusCode::kCancelled) co_return http::Response{};  // client left
    if (!collected.ok()) co_return http::error_response(collected);
    std::string kv_params;
    if (hold) {
      // The blocks stay held for the decode side: vLLM's answers at once and names them;
      // SGLang's answers once the decode engine of its room took them.
      const std::string key = plan.sglang ? plan.key : meta.id;
      const Status offered = co_await transfers_.offer(
          key, stream.core_id(0), static_cast<uint32_t>(held.size()), plan.sglang);
      if (offered.code() == StatusCode::kCancelled) co_return http::Response{};
      if (!offered.ok()) co_return http::error_response(offered);
      if (!plan.sglang) kv_params = kv_transfer_params(key, held);
    }
    if (!r.stream) {
      co_return http::Response::json(200, completion_response(meta, results, usage, kv_params));
    }
    // A streamed prefill (SGLang sends the client's body as is): its whole answer at once.
    const StreamChunks chunks(meta);
    std::string events;
    for (uint32_t i = 0; i < num_choices; ++i) {
      if (meta.kind == ApiKind::kChat) chunks.append_role(events, i, r.include_usage);
      chunks.append_delta(events, i, results[i].text, results[i].finish, r.include_usage,
                          r.continuous_usage_stats ? &usage : nullptr);
    }
    if (r.include_usage) chunks.append_usage(events, usage);
    events += http::kSseDone;
    if (!(co_await out.write_head(200, http::kSseContentType)).ok()) co_return http::Response{};
    (void)co_await out.write(events, true);
    co_return http::Response{};
  }

  // generate()'s answer as a stream of SSE events, written as the core produces tokens.
  net::awaitable<http::Response> answer_streamed(const GenerateRequest& r,
                                                 const std::vector<PreparedPrompt>& prepared,
                                                 const ResponseMeta& meta, RequestStream& stream,
                                                 Usage& usage,
                                                 std::vector<OutputDetokenizer>& detok,
                                                 http::ResponseWriter& out) {
    const size_t num_choices = detok.size();
    std::vector<ChoiceOutput> outputs;
    const StreamChunks chunks(meta);
    const Status head = co_await out.write_head(200, http::kSseContentType);
    if (!head.ok()) co_return http::Response{};
    std::string buffer;
    const bool usage_null = r.include_usage;
    const Usage* continuous = r.continuous_usage_stats ? &usage : nullptr;
    for (uint32_t i = 0; i < num_choices; ++i) {
      if (meta.kind == ApiKind::kChat) chunks.append_role(buffer, i, usage_null);
      const std::string& echo = prepared[i / r.n].echo_text;
      if (!echo.empty()) {
        chunks.append_delta(buffer, i, echo, FinishReason::kNone, usage_null, continuous);
      }
    }
    for (;;) {
      if (!buffer.empty()) {
        const Status wrote = co_await out.write(buffer);
        if (!wrote.ok()) co_return http::Response{};  // gone: `stream` aborts the request
        buffer.clear();
      }
      const Status st = co_await stream.next(outputs);
      if (st.code() == StatusCode::kCancelled) co_return http::Response{};
      if (!st.ok()) {
        buffer = http::sse_error_event(st);
        buffer += http::kSseDone;
        (void)co_await out.write(buffer, true);
        co_return http::Response{};
      }
      if (outputs.empty()) break;
      for (const ChoiceOutput& o : outputs) {
        std::string text = detok[o.choice].next(o.token);
        ++usage.completion_tokens;
        if (o.index == 0 && counts_cache(r, o.choice)) usage.cached_tokens += o.cached_tokens;
        if (o.finish != FinishReason::kNone) text += detok[o.choice].flush();
        // A token whose text is held back (part of a UTF-8 character) or empty (a special
        // token) sends nothing, unless it ends the choice (vLLM does the same).
        if (text.empty() && o.finish == FinishReason::kNone) continue;
        chunks.append_delta(buffer, o.choice, text, o.finish, usage_null, continuous);
      }
    }
    if (r.include_usage) chunks.append_usage(buffer, usage);
    buffer += http::kSseDone;
    (void)co_await out.write(buffer, true);
    co_return http::Response{};
  }

  // The core's requests of a parsed request, submitted: `n` choices of each prompt, each with
  // the prompt's output budget (an error naming `param` when the prompt does not fit);
  // usage.prompt_tokens counts the prompts. The one path from a request to the core: completions,
  // chat and responses all come through here.
  Result<std::unique_ptr<RequestStream>> submit(const GenerateRequest& r,
                                                const std::vector<PreparedPrompt>& prepared,
                                                std::string_view lora, const PdPlan& plan,
                                                bool remote_kv, Usage& usage, std::string* param) {
    const bool hold = plan.part == PdPart::kHold;
    std::vector<ChoiceSpec> choices;
    choices.reserve(prepared.size() * r.n);
    for (const PreparedPrompt& p : prepared) {
      Result<uint32_t> max_tokens = budget(r, p.ids.size(), param);
      if (!max_tokens.ok()) return max_tokens.status();
      usage.prompt_tokens += p.ids.size();
      // SGLang sends the same body (max_tokens and all) to both engines: its prefill engine
      // runs the prompt and the first token, hands the blocks over and is done, and the decode
      // engine generates the answer. (vLLM's router asks its prefill call for one token itself.)
      const bool prefill_only = hold && plan.sglang;
      for (uint32_t j = 0; j < r.n; ++j) {
        ChoiceSpec c;
        c.prompt = p.ids;
        c.max_tokens = prefill_only ? 1 : *max_tokens;
        c.min_tokens = prefill_only ? std::min(r.min_tokens, 1u) : r.min_tokens;
        c.ignore_eos = r.ignore_eos;
        c.hold_kv = hold;
        c.remote_kv = remote_kv;
        c.lora_name.assign(lora);
        choices.push_back(std::move(c));
      }
    }
    return runner_.submit(std::move(choices));
  }

  std::vector<OutputDetokenizer> detokenizers(size_t num_choices) const {
    std::vector<OutputDetokenizer> detok;
    detok.reserve(num_choices);
    for (size_t i = 0; i < num_choices; ++i) detok.emplace_back(codec_);
    return detok;
  }

  // The answer's "model": the adapter's name, or the served name for the base model.
  std::string model_name(std::string_view lora) const {
    return lora.empty() ? options_.served_name() : std::string(lora);
  }

  net::awaitable<http::Response> generate(ApiKind kind, http::Request& req,
                                          http::ResponseWriter& out) {
    // What a router sent along (its request id and W3C trace context), for whoever debugs one.
    INFERA_LOG(kDebug, "mock")
        .msg("generate")
        .kv("path", req.path())
        .kv("request_id", req.header("X-Request-Id"))
        .kv("traceparent", req.header("traceparent"))
        .kv("tracestate", req.header("tracestate"));
    std::string param;
    Result<GenerateRequest> parsed = parse_generate_request(kind, req.body, &param);
    if (!parsed.ok()) co_return bad_request(parsed.status(), param);
    const GenerateRequest& r = *parsed;
    const std::optional<std::string_view> lora = options_.lora_for(r.model);
    if (!lora) co_return model_not_found(r.model);

    if (r.prompts.size() * r.n > kMaxChoices) {
      co_return bad_request(invalid_argument("at most " + std::to_string(kMaxChoices) +
                                             " choices (prompts x n) per request"),
                            "n");
    }
    Result<std::vector<PreparedPrompt>> prepared = prepare_prompts(codec_, r, &param);
    if (!prepared.ok()) co_return bad_request(prepared.status(), param);
    const PdPlan plan = pd_plan(r);
    const bool hold = plan.part == PdPart::kHold;
    if (plan.part != PdPart::kNone && prepared->size() * r.n != 1) {
      co_return bad_request(invalid_argument("a disaggregated request takes one prompt and n = 1"),
                            "n");
    }
    // A decode of a remote prefill pulls the blocks first. vLLM's decode computes the prompt
    // itself when the pull fails; SGLang's fails the request.
    bool remote_kv = false;
    if (plan.part == PdPart::kPull) {
      Result<uint32_t> pulled = co_await pull_from(plan);
      if (pulled.ok()) {
        remote_kv = true;
      } else if (plan.sglang) {
        co_return http::error_response(unavailable(
            "KV transfer for bootstrap room " + plan.key.substr(5) + " from " + plan.host + ":" +
            std::to_string(plan.port) + " failed: " + pulled.status().message()));
      } else {
        INFERA_LOG(kWarn, "engine").msg("KV pull failed; computing the prompt here")
            .kv("from", plan.host + ":" + std::to_string(plan.port))
            .kv("error", pulled.status().message());
      }
    }
    Usage usage;
    Result<std::unique_ptr<RequestStream>> stream =
        submit(r, *prepared, *lora, plan, remote_kv, usage, &param);
    if (!stream.ok()) co_return bad_request(stream.status(), param);

    ResponseMeta meta;
    meta.kind = kind;
    meta.id = next_id(kind);
    meta.created = static_cast<int64_t>(std::time(nullptr));
    meta.model = model_name(*lora);
    std::vector<OutputDetokenizer> detok = detokenizers(prepared->size() * r.n);

    if (!r.stream || hold) {
      co_return co_await answer_whole(r, *prepared, plan, meta, **stream, usage, detok, out);
    }
    co_return co_await answer_streamed(r, *prepared, meta, **stream, usage, detok, out);
  }

  // POST /v1/responses: a chat completion of the conversation (the stored one of
  // previous_response_id, then this request's messages) through the chat path (submit, collect),
  // answered in the Responses API's shape and stored for a later turn unless store is false.
  net::awaitable<http::Response> respond(http::Request& req) {
    std::string param;
    Result<ResponsesRequest> parsed = parse_responses_request(req.body, &param);
    if (!parsed.ok()) co_return bad_request(parsed.status(), param);
    ResponsesRequest& r = *parsed;
    GenerateRequest& g = r.generate;
    const std::optional<std::string_view> lora = options_.lora_for(g.model);
    if (!lora) co_return model_not_found(g.model);
    if (!r.previous_response_id.empty()) {
      std::optional<boost::json::array> before = responses_.find(r.previous_response_id);
      if (!before) co_return previous_response_not_found(r.previous_response_id);
      // vLLM's order: this request's instructions, the stored conversation (instructions are not
      // carried over on their own), the new input.
      boost::json::array& m = g.chat.messages;
      m.insert(m.begin() + r.num_instructions, before->begin(), before->end());
    }
    Result<std::vector<PreparedPrompt>> prepared = prepare_prompts(codec_, g, &param);
    if (!prepared.ok()) co_return bad_request(prepared.status(), responses_param(param));
    Usage usage;
    Result<std::unique_ptr<RequestStream>> stream =
        submit(g, *prepared, *lora, PdPlan{}, false, usage, &param);
    if (!stream.ok()) co_return bad_request(stream.status(), responses_param(param));
    std::vector<OutputDetokenizer> detok = detokenizers(1);
    std::vector<ChoiceResult> results(1);
    std::vector<uint32_t> held;
    const Status collected = co_await collect(g, **stream, usage, detok, results, held);
    if (collected.code() == StatusCode::kCancelled) co_return http::Response{};  // client left
    if (!collected.ok()) co_return http::error_response(collected);

    ResponsesResult answer;
    answer.id = "resp_" + next_hex(response_salt_);
    answer.message_id = "msg_" + next_hex();
    answer.created_at = static_cast<int64_t>(std::time(nullptr));
    answer.model = model_name(*lora);
    answer.text = std::move(results[0].text);
    answer.usage = usage;
    answer.instructions = r.instructions;
    answer.max_output_tokens = g.max_tokens;
    answer.previous_response_id = r.previous_response_id;
    answer.store = r.store;
    std::string body = responses_response(answer);
    if (r.store) {
      boost::json::array conversation = std::move(g.chat.messages);
      conversation.push_back(boost::json::object{{"role", "assistant"}, {"content", answer.text}});
      responses_.put(answer.id, std::move(conversation));
    }
    co_return http::Response::json(200, std::move(body));
  }

  // The chat path names the chat fields; a Responses request has its own.
  static std::string_view responses_param(std::string_view param) {
    if (param == "messages") return "input";
    if (param == "max_tokens") return "max_output_tokens";
    return param;
  }

  // As vLLM answers a previous_response_id it does not hold (e.g. one another instance stored).
  static http::Response previous_response_not_found(const std::string& id) {
    http::ErrorContext context;
    context.param = "previous_response_id";
    return http::error_response(not_found("Response with id '" + id + "' not found."), context);
  }

  // POST /v1/embeddings: each input tokenized as /tokenize does (ids checked against the
  // vocabulary) and embedded by mock_embedding; no engine scheduling.
  http::Response embed(const http::Request& req) {
    constexpr size_t kMaxValues = size_t{1} << 22;  // floats per answer (inputs x dimensions)
    std::string param;
    Result<EmbeddingsRequest> parsed = parse_embeddings_request(req.body, &param);
    if (!parsed.ok()) return bad_request(parsed.status(), param);
    const EmbeddingsRequest& r = *parsed;
    const std::optional<std::string_view> lora = options_.lora_for(r.model);
    if (!lora) return model_not_found(r.model);
    if (r.inputs.size() * r.dimensions > kMaxValues) {
      return bad_request(invalid_argument("at most " + std::to_string(kMaxValues) +
                                          " values (inputs x dimensions) per request"),
                         "dimensions");
    }
    const uint32_t max_len = runner_.max_model_len();
    std::vector<std::vector<float>> vectors;
    vectors.reserve(r.inputs.size());
    uint64_t tokens = 0;
    for (const PromptInput& input : r.inputs) {
      std::vector<TokenId> ids =
          input.text ? codec_.encode(*input.text, r.add_special_tokens) : input.ids;
      if (Status s = codec_.check_ids(ids); !s.ok()) return bad_request(s, "input");
      if (ids.size() > max_len) {
        return bad_request(
            invalid_argument("This model's maximum context length is " + std::to_string(max_len) +
                             " tokens. However, you requested " + std::to_string(ids.size()) +
                             " tokens in the input for embedding generation. Please "
                             "reduce the length of the input."),
            "input");
      }
      tokens += ids.size();
      vectors.push_back(mock_embedding(ids, r.dimensions));
    }
    ResponseMeta meta;
    meta.id = "embd-" + next_hex();
    meta.created = static_cast<int64_t>(std::time(nullptr));
    meta.model = model_name(*lora);
    return http::Response::json(200, embeddings_response(meta, vectors, r.base64, tokens));
  }

  http::Response tokenize(const http::Request& req) const {
    std::string param;
    Result<TokenizeRequest> parsed = parse_tokenize_request(req.body, &param);
    if (!parsed.ok()) return bad_request(parsed.status(), param);
    const TokenizeRequest& r = *parsed;
    if (!options_.lora_for(r.model)) return model_not_found(r.model);
    std::vector<TokenId> ids;
    if (r.prompt) {
      ids = codec_.encode(*r.prompt, r.add_special_tokens);
    } else {
      Result<std::vector<TokenId>> chat = codec_.encode_chat(r.chat);
      if (!chat.ok()) return bad_request(chat.status(), "messages");
      ids = std::move(*chat);
    }
    std::vector<std::string> strs;
    if (r.return_token_strs) {
      strs.reserve(ids.size());
      for (const TokenId id : ids) strs.push_back(codec_.token_string(id).value_or(""));
    }
    return http::Response::json(
        200, tokenize_response(ids, runner_.max_model_len(), r.return_token_strs ? &strs : nullptr));
  }

  http::Response detokenize(const http::Request& req) const {
    std::string param;
    Result<std::vector<TokenId>> ids = parse_detokenize_request(req.body, &param);
    if (!ids.ok()) return bad_request(ids.status(), param);
    if (Status s = codec_.check_ids(*ids); !s.ok()) return bad_request(s, "tokens");
    std::string body = R"({"prompt":)";
    http::append_json_string(body, codec_.decode(*ids));
    body += '}';
    return http::Response::json(200, std::move(body));
  }

  net::awaitable<http::Response> reset_prefix_cache(http::Request& req) {
    const bool reset_running = query_flag(req.query(), "reset_running_requests");
    const bool done = co_await runner_.reset_prefix_cache(reset_running);
    if (!done) {
      co_return http::error_response(failed_precondition(
          "the prefix cache cannot be reset while requests hold blocks (pass "
          "?reset_running_requests=true to preempt them)"));
    }
    co_return http::Response::text(200, "");
  }

  const MockOptions& options_;
  const TextCodec& codec_;
  EngineRunner& runner_;
  metrics::Registry& registry_;
  KvTransfers& transfers_;
  http::Client& peers_;
  const int64_t created_;
  const uint64_t id_seed_;
  std::atomic<uint64_t> ids_{0};
  const std::string engine_id_;  // vLLM's remote_engine_id: this engine's life
  std::atomic<uint16_t> port_{0};
  ResponseStore responses_;  // /v1/responses answers, for previous_response_id
  // Response ids are keys of a per-process store: engines started with the same --seed must not
  // hand out the same ids, or one would answer for another's conversation.
  const uint64_t response_salt_ = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
};

// The text codec: the tokenizer --tokenizer names, or a synthetic one of the engine's vocabulary.
Result<std::unique_ptr<TextCodec>> make_codec(const MockOptions& o) {
  if (o.tokenizer.empty()) return make_synthetic_codec(o.engine.vocab_size, o.engine.eos_token_id);
  auto codec = load_tokenizer_codec(o.tokenizer);
  if (!codec.ok()) {
    return Status(codec.status().code(),
                  "--tokenizer " + o.tokenizer + ": " + codec.status().message());
  }
  return std::move(*codec);
}

// The KV-event publisher of --kv-events (which o.kv_events holds).
Result<std::unique_ptr<events::KvEventPublisher>> start_kv_publisher(const MockOptions& o) {
  events::KvEventPublisher::Options po;
  po.endpoint = o.kv_events->endpoint;
  po.replay_endpoint = o.kv_events->replay_endpoint;
  po.topic = o.kv_events->topic;
  po.buffer_steps = o.kv_events->buffer_steps;
  po.hwm = static_cast<int>(std::min<uint32_t>(o.kv_events->hwm, 1u << 30));
  po.max_queue_size = o.kv_events->max_queue_size;
  po.format = o.kv_events_format;
  auto publisher = events::KvEventPublisher::start(po);
  if (!publisher.ok()) {
    return Status(publisher.status().code(), "KV events: " + publisher.status().message());
  }
  return std::move(*publisher);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MockEngine

struct MockEngine::Parts {
  // Declaration order is destruction order in reverse: the registry outlives the loop (its
  // histograms are referenced by the runner's state, which the loop's pending work holds).
  metrics::Registry registry;
  std::unique_ptr<TextCodec> codec;
  std::unique_ptr<events::KvEventPublisher> publisher;
  std::unique_ptr<http::EventLoop> loop;
  std::unique_ptr<EngineRunner> runner;
  std::unique_ptr<KvTransfers> transfers;
  std::unique_ptr<http::Client> peers;  // pulls from prefill engines
  std::unique_ptr<Api> api;
  std::unique_ptr<http::Server> server;
  std::unique_ptr<http::Server> bootstrap;  // SGLang-style prefill: the pull route only
  std::unique_ptr<discovery::EtcdRegistration> registration;
  // NATS transports: the relays to the engine's own sockets and port.
  std::unique_ptr<launcher::WorkerRelays> relays;
};

MockEngine::MockEngine(MockOptions options)
    : options_(std::move(options)), parts_(std::make_unique<Parts>()) {}

MockEngine::~MockEngine() { shutdown(std::chrono::milliseconds(0)); }

Result<std::unique_ptr<MockEngine>> MockEngine::start(MockOptions options) {
  std::unique_ptr<MockEngine> engine(new MockEngine(std::move(options)));
  const MockOptions& o = engine->options_;
  Parts& p = *engine->parts_;

  INFERA_ASSIGN_OR_RETURN(p.codec, make_codec(o));
  EngineConfig config = o.engine;
  config.vocab_size = p.codec->vocab_size();
  config.eos_token_id = p.codec->eos_token_id();
  config.enable_kv_events = o.kv_events.has_value();
  INFERA_RETURN_IF_ERROR(validate(config));

  WorkerRecordParams record;
  const bool nats_events = o.kv_event_transport == config::KvEventTransport::kNats;
  if (o.kv_events) {
    INFERA_ASSIGN_OR_RETURN(p.publisher, start_kv_publisher(o));
    // An engine that connects its PUB socket to a router's SUB has no endpoint to register;
    // with NATS events the router needs none (the relay reads the sockets on this host).
    if (events::publisher_binds(o.kv_events->endpoint) && !nats_events) {
      record.kv_endpoint = p.publisher->endpoint();
    }
    if (!nats_events) record.replay_endpoint = p.publisher->replay_endpoint();
    record.topic = o.kv_events->topic;
  }

  p.loop = std::make_unique<http::EventLoop>(static_cast<int>(o.io_threads));
  const metrics::Labels labels = {{"model_name", o.served_name()}, {"engine", "0"}};
  p.runner = std::make_unique<EngineRunner>(p.loop->context(), config, p.publisher.get(),
                                            p.registry, labels);
  EngineRunner* runner = p.runner.get();
  add_vllm_collector(p.registry, [runner] { return runner->snapshot(); }, config, labels);

  const auto transfer_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(o.kv_transfer_timeout_s * 1000));
  KvTransfers::Options to;
  to.timeout = transfer_timeout;
  p.transfers = std::make_unique<KvTransfers>(p.loop->context(), to,
                                              [runner](RequestId id) { runner->release_held(id); });
  http::ClientOptions co;
  co.response_timeout = transfer_timeout + std::chrono::seconds(10);  // a pull may wait that long
  co.max_body_bytes = size_t{64} * 1024;
  p.peers = std::make_unique<http::Client>(co);
  p.api = std::make_unique<Api>(engine->options_, *p.codec, *p.runner, p.registry, *p.transfers,
                                *p.peers);
  http::ServerOptions so;
  so.host = o.host;
  so.port = static_cast<uint16_t>(o.port);
  so.max_body_bytes = size_t{32} << 20;  // long token-id prompts
  auto server = http::Server::start(*p.loop, so, p.api->routes());
  if (!server.ok()) return server.status();
  p.server = std::move(*server);
  p.api->set_port(p.server->port());
  if (o.role == discovery::Role::kPrefill && o.pd_protocol == discovery::PdProtocol::kSglang) {
    http::Routes bootstrap_routes;
    p.api->add_pull_route(bootstrap_routes);
    http::ServerOptions bo;
    bo.host = o.host;
    bo.port = static_cast<uint16_t>(o.bootstrap_port);
    bo.max_body_bytes = size_t{64} * 1024;
    auto bootstrap = http::Server::start(*p.loop, bo, std::move(bootstrap_routes));
    if (!bootstrap.ok()) {
      return Status(bootstrap.status().code(),
                    "--disaggregation-bootstrap-port: " + bootstrap.status().message());
    }
    p.bootstrap = std::move(*bootstrap);
    record.bootstrap_port = p.bootstrap->port();
  }

  record.advertise_host = o.advertise_host;
  record.port = p.server->port();
  record.role = o.role;
  record.block_size = config.block_size;
  record.model = o.served_name();
  record.engine = "mock";
  record.pd_protocol = std::string(discovery::pd_protocol_name(o.pd_protocol));
  engine->worker_ = make_worker_record(record);
  const discovery::WorkerInfo& w = engine->worker_;

  launcher::WorkerRelayOptions relay;
  relay.nats_server = o.nats_server;
  relay.ns = o.nats_namespace;
  relay.worker_id = w.id;
  relay.events = nats_events && p.publisher;
  if (relay.events) {
    relay.kv_endpoint = p.publisher->endpoint();
    relay.replay_endpoint = p.publisher->replay_endpoint();
    relay.topic = o.kv_events->topic;
  }
  relay.requests = o.request_transport == config::RequestTransport::kNats;
  relay.engine = {"127.0.0.1", p.server->port()};
  INFERA_ASSIGN_OR_RETURN(p.relays, launcher::WorkerRelays::start(relay));
  if (o.discovery_backend == config::DiscoveryBackend::kEtcd) {
    auto endpoint = http::parse_endpoint(o.etcd_endpoint);
    if (!endpoint.ok()) return endpoint.status();
    discovery::EtcdRegistrationOptions ro;
    ro.prefix = o.etcd_prefix;
    ro.ttl = std::chrono::seconds(o.etcd_lease_ttl_s);
    p.registration =
        std::make_unique<discovery::EtcdRegistration>(*p.loop, *endpoint, w, std::move(ro));
    INFERA_RETURN_IF_ERROR(p.registration->start(std::chrono::milliseconds(10'000)));
  }
  INFERA_LOG(kInfo, "engine")
      .msg("mock engine ready")
      .kv("url", w.url)
      .kv("model", w.model)
      .kv("codec", p.codec->describe())
      .kv("block_size", config.block_size)
      .kv("num_gpu_blocks", config.num_gpu_blocks)
      .kv("speedup_ratio", config.speedup_ratio)
      .kv("kv_events", w.kv_endpoint)
      .kv("replay", w.replay_endpoint)
      .kv("role", discovery::role_name(w.role))
      .kv("pd_protocol", w.pd_protocol)
      .kv("bootstrap_port", w.bootstrap_port);
  return engine;
}

uint16_t MockEngine::port() const { return parts_->server ? parts_->server->port() : 0; }

RunnerSnapshot MockEngine::snapshot() const { return parts_->runner->snapshot(); }

http::ServerStats MockEngine::http_stats() const { return parts_->server->stats(); }

void MockEngine::shutdown(std::chrono::milliseconds drain) {
  if (shut_down_) return;
  shut_down_ = true;
  Parts& p = *parts_;
  if (p.registration) p.registration->stop();  // routers stop sending here first
  if (p.server) p.server->shutdown(drain);
  if (p.relays) p.relays->stop_requests();
  if (p.bootstrap) p.bootstrap->shutdown(std::chrono::milliseconds(0));
  if (p.runner) p.runner->stop();
  if (p.publisher) {
    (void)p.publisher->flush(std::chrono::milliseconds(500));
    p.publisher->stop();
  }
  if (p.relays) p.relays->stop();
  if (p.loop) p.loop->stop();
}

}  // namespace infera::mock
