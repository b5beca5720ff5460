#include "infera/mock/openai_api.h"

#include <algorithm>
#include <array>
#include <bit>
#include <boost/json/parse.hpp>
#include <boost/json/parse_options.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <charconv>
#include <cmath>
#include <limits>

#include "infera/common/base64.h"
#include "infera/common/random.h"
#include "infera/http/error.h"
#include "infera/http/sse.h"

namespace infera::mock {

using engine::finish_reason_name;
using engine::FinishReason;
using engine::TokenId;

namespace {

namespace json = boost::json;

constexpr uint32_t kMaxN = 128;  // choices per prompt
constexpr size_t kMaxPrompts = 1024;
// Chat messages per request: no limit of its own, as vLLM (the HTTP body limit bounds them).
constexpr uint32_t kMaxMessages = std::numeric_limits<uint32_t>::max();

// Request fields the engine accepts. OpenAI's own parameters and vLLM's extensions
// (vllm/entrypoints/openai/protocol.py) are accepted, most of them ignored (the mock has no
// sampler); anything else is answered 400 as OpenAI does ("Unrecognized request argument").
constexpr std::string_view kCommonFields[] = {
    "model", "stream", "stream_options", "max_tokens", "n", "temperature", "top_p", "top_k",
    "min_p", "seed", "stop", "stop_token_ids", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "length_penalty", "logit_bias", "logprobs", "user", "best_of",
    "use_beam_search", "ignore_eos", "min_tokens", "include_stop_str_in_output",
    "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens",
    "allowed_token_ids", "bad_words", "prompt_logprobs", "add_special_tokens", "response_format",
    "guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend",
    "guided_whitespace_pattern", "structured_outputs", "priority", "request_id",
    "logits_processors", "return_tokens_as_token_ids", "return_token_ids", "cache_salt",
    "kv_transfer_params", "vllm_xargs", "echo", "metadata", "service_tier", "store",
    "prompt_cache_key", "safety_identifier", "max_completion_tokens",
    // SGLang disaggregation fields a router may add to the same body
    "bootstrap_host", "bootstrap_port", "bootstrap_room", "rid", "lora_path", "lora_request"};
constexpr std::string_view kCompletionFields[] = {"prompt", "suffix", "prompt_embeds"};
constexpr std::string_view kChatFields[] = {
    "messages", "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call",
    "top_logprobs", "add_generation_prompt", "continue_final_message", "chat_template",
    "chat_template_kwargs", "documents", "mm_processor_kwargs", "reasoning_effort",
    "include_reasoning", "audio", "modalities", "prediction", "web_search_options", "verbosity",
    "thinking", "media_io_kwargs"};

template <size_t N>
bool contains(const std::string_view (&list)[N], std::string_view key) {
  return std::find(std::begin(list), std::end(list), key) != std::end(list);
}

class Parser {
 public:
  explicit Parser(std::string* param) : param_(param) {}

  Status fail(std::string_view field, std::string message) {
    if (param_ != nullptr) *param_ = std::string(field);
    return invalid_argument(std::move(message));
  }

  Result<json::object> parse_object(std::string_view body) {
    json::parse_options opts;
    opts.max_depth = 64;
    boost::system::error_code ec;
    json::value v = json::parse(body, ec, json::storage_ptr(), opts);
    if (ec) {
      return fail("", "the request body is not valid JSON: " + ec.message());
    }
    if (!v.is_object()) return fail("", "the request body must be a JSON object");
    return std::move(v.get_object());
  }

  Result<bool> boolean(const json::value& v, std::string_view field) {
    if (!v.is_bool()) return fail(field, "'" + std::string(field) + "' must be a boolean");
    return v.get_bool();
  }

  // Integers as JSON numbers; a float with no fractional part counts (pydantic's lax mode).
  Result<int64_t> integer(const json::value& v, std::string_view field) {
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64()) {
      if (v.get_uint64() > uint64_t{std::numeric_limits<int64_t>::max()}) {
        return fail(field, "'" + std::string(field) + "' is too large");
      }
      return static_cast<int64_t>(v.get_uint64());
    }
    if (v.is_double()) {
      const double d = v.get_double();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
        return static_cast<int64_t>(d);
      }
    }
    return fail(field, "'" + std::string(field) + "' must be an integer");
  }

  Result<std::string> string(const json::value& v, std::string_view field) {
    if (!v.is_string()) return fail(field, "'" + std::string(field) + "' must be a string");
    return std::string(v.get_string());
  }

  // A list of token ids.
  Result<std::vector<TokenId>> token_ids(const json::array& a, std::string_view field) {
    std::vector<TokenId> ids;
    ids.reserve(a.size());
    for (const json::value& x : a) {
      int64_t id = -1;
      if (x.is_int64()) {
        id = x.get_int64();
      } else if (x.is_uint64() && x.get_uint64() <= std::numeric_limits<uint32_t>::max()) {
        id = static_cast<int64_t>(x.get_uint64());
      } else {
        return fail(field, "'" + std::string(field) +
                               "' must be a string, a list of strings, a list of token ids or a "
                               "list of lists of token ids");
      }
      if (id < 0 || id > int64_t{std::numeric_limits<uint32_t>::max()}) {
        return fail(field, "token id " + std::to_string(id) + " is out of range");
      }
      ids.push_back(static_cast<TokenId>(id));
    }
    return ids;
  }

  // prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...] (`field`: "prompt", or
  // embeddings' "input"), at most `max_items` prompts.
  Result<std::vector<PromptInput>> prompts(const json::value& v, std::string_view field = "prompt",
                                           size_t max_items = kMaxPrompts) {
    std::vector<PromptInput> out;
    const std::string name(field);
    auto empty = [&] { return fail(field, "the " + name + " must not be empty"); };
    if (v.is_string()) {
      if (v.get_string().empty()) return empty();
      out.push_back(PromptInput{std::string(v.get_string()), {}});
      return out;
    }
    if (!v.is_array()) {
      return fail(field, "'" + name +
                             "' must be a string, a list of strings, a list of token ids or a "
                             "list of lists of token ids");
    }
    const json::array& a = v.get_array();
    if (a.empty()) return empty();
    if (a.front().is_string() || a.front().is_array()) {
      if (a.size() > max_items) {
        return fail(field, "at most " + std::to_string(max_items) + " " + name + "s per request");
      }
      for (const json::value& item : a) {
        if (item.is_string()) {
          if (item.get_string().empty()) return empty();
          out.push_back(PromptInput{std::string(item.get_string()), {}});
        } else if (item.is_array()) {
          if (item.get_array().empty()) return empty();
          INFERA_ASSIGN_OR_RETURN(std::vector<TokenId> ids, token_ids(item.get_array(), field));
          out.push_back(PromptInput{std::nullopt, std::move(ids)});
        } else {
          return fail(field, "each " + name + " of a list must be a string or a list of token ids");
        }
      }
      return out;
    }
    INFERA_ASSIGN_OR_RETURN(std::vector<TokenId> ids, token_ids(a, field));
    out.push_back(PromptInput{std::nullopt, std::move(ids)});
    return out;
  }

 private:
  std::string* param_;
};

// stream_options: {"include_usage": bool, "continuous_usage_stats": bool}, into `r`.
Status parse_stream_options(Parser& p, const json::object& so, GenerateRequest& r) {
  for (const auto& [k, v] : so) {
    if (k == "include_usage") {
      if (v.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(r.include_usage, p.boolean(v, "stream_options.include_usage"));
    } else if (k == "continuous_usage_stats") {
      if (v.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(r.continuous_usage_stats,
                              p.boolean(v, "stream_options.continuous_usage_stats"));
    } else {
      return p.fail("stream_options",
                    "Unrecognized request argument supplied: stream_options." + std::string(k));
    }
  }
  return ok_status();
}

// kv_transfer_params (vLLM's P/D handshake): a prefill's do_remote_decode, or where a decode's
// remote prefill holds the blocks, into `r`.
Status parse_kv_transfer_params(Parser& p, const json::object& kv, GenerateRequest& r) {
  if (const json::value* d = kv.if_contains("do_remote_decode"); d && d->is_bool()) {
    r.do_remote_decode = d->get_bool();
  }
  const json::value* remote = kv.if_contains("do_remote_prefill");
  if (remote != nullptr && remote->is_bool() && remote->get_bool()) {
    // A decode of a remote prefill. Without a complete address the engine computes the
    // prompt itself, as vLLM does with empty remote_block_ids.
    const json::value* host = kv.if_contains("remote_host");
    const json::value* port = kv.if_contains("remote_port");
    const json::value* id = kv.if_contains("remote_request_id");
    const json::value* blocks = kv.if_contains("remote_block_ids");
    if (host && host->is_string() && port && port->is_number() && id && id->is_string() && blocks &&
        blocks->is_array() && !blocks->get_array().empty()) {
      boost::system::error_code ec;
      const auto port_number = port->to_number<int64_t>(ec);
      if (ec || port_number <= 0 || port_number > 65535) {
        return p.fail("kv_transfer_params", "'kv_transfer_params.remote_port' must be a port");
      }
      GenerateRequest::RemotePrefill rp;
      rp.host = std::string(host->get_string());
      rp.port = static_cast<uint32_t>(port_number);
      rp.request_id = std::string(id->get_string());
      rp.num_blocks = blocks->get_array().size();
      r.remote_prefill = std::move(rp);
    }
  }
  return ok_status();
}

}  // namespace

Result<GenerateRequest> parse_generate_request(ApiKind kind, std::string_view body,
                                               std::string* param) {
  Parser p(param);
  INFERA_ASSIGN_OR_RETURN(json::object o, p.parse_object(body));
  GenerateRequest r;
  r.kind = kind;
  bool has_prompt = false;
  bool has_stream_options = false;
  for (const auto& [key_sv, value] : o) {
    const std::string_view key = key_sv;
    const bool known = contains(kCommonFields, key) ||
                       (kind == ApiKind::kCompletions ? contains(kCompletionFields, key)
                                                      : contains(kChatFields, key));
    if (!known) {
      return p.fail(key, "Unrecognized request argument supplied: " + std::string(key));
    }
    if (key == "model") {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(r.model, p.string(value, key));
    } else if (key == "prompt") {
      INFERA_ASSIGN_OR_RETURN(r.prompts, p.prompts(value));
      has_prompt = true;
    } else if (key == "stream") {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(r.stream, p.boolean(value, key));
    } else if (key == "stream_options") {
      if (value.is_null()) continue;
      const json::object* so = value.if_object();
      if (so == nullptr) return p.fail(key, "'stream_options' must be an object");
      has_stream_options = true;
      INFERA_RETURN_IF_ERROR(parse_stream_options(p, *so, r));
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(int64_t m, p.integer(value, key));
      if (m < 1) {
        return p.fail(key, "'" + std::string(key) + "' must be at least 1, got " +
                               std::to_string(m));
      }
      r.max_tokens = static_cast<uint32_t>(std::min<int64_t>(m, std::numeric_limits<uint32_t>::max()));
    } else if (key == "min_tokens") {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(int64_t m, p.integer(value, key));
      if (m < 0) return p.fail(key, "'min_tokens' must be greater than or equal to 0");
      r.min_tokens = static_cast<uint32_t>(std::min<int64_t>(m, std::numeric_limits<uint32_t>::max()));
    } else if (key == "n") {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(int64_t n, p.integer(value, key));
      if (n < 1 || n > kMaxN) {
        return p.fail(key, "'n' must be between 1 and " + std::to_string(kMaxN));
      }
      r.n = static_cast<uint32_t>(n);
    } else if (key == "ignore_eos") {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(r.ignore_eos, p.boolean(value, key));
    } else if (key == "echo") {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(r.echo, p.boolean(value, key));
    } else if (key == "add_special_tokens" && kind == ApiKind::kCompletions) {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(r.add_special_tokens, p.boolean(value, key));
    } else if (key == "kv_transfer_params") {
      if (value.is_null()) continue;
      const json::object* kv = value.if_object();
      if (kv == nullptr) return p.fail(key, "'kv_transfer_params' must be an object");
      INFERA_RETURN_IF_ERROR(parse_kv_transfer_params(p, *kv, r));
    } else if (key == "bootstrap_host") {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(r.bootstrap_host, p.string(value, key));
    } else if (key == "bootstrap_port") {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(int64_t port, p.integer(value, key));
      if (port <= 0 || port > 65535) return p.fail(key, "'bootstrap_port' must be a port");
      r.bootstrap_port = static_cast<uint32_t>(port);
    } else if (key == "bootstrap_room") {
      if (value.is_null()) continue;
      if (value.is_array()) {
        return p.fail(key, "batched bootstrap rooms (a list) are not supported; send one prompt");
      }
      INFERA_ASSIGN_OR_RETURN(int64_t room, p.integer(value, key));
      if (room < 0) return p.fail(key, "'bootstrap_room' must be a non-negative integer");
      r.bootstrap_room = static_cast<uint64_t>(room);
    } else if (key == "temperature" || key == "top_p" || key == "presence_penalty" ||
               key == "frequency_penalty" || key == "repetition_penalty") {
      if (!value.is_null() && !value.is_number()) {
        return p.fail(key, "'" + std::string(key) + "' must be a number");
      }
    }
  }
  if (kind == ApiKind::kCompletions && !has_prompt) {
    return p.fail("prompt", "'prompt' is required");
  }
  if (kind == ApiKind::kChat) {
    // The chat prompt's fields (messages, tools, add_generation_prompt, continue_final_message,
    // chat_template_kwargs, add_special_tokens) by the gateway's parser and rules.
    INFERA_ASSIGN_OR_RETURN(r.chat, tokenizer::parse_chat_prompt(o, kMaxMessages, param));
  }
  if (has_stream_options && !r.stream) {
    return p.fail("stream_options", "Stream options can only be defined when `stream=True`.");
  }
  if (r.max_tokens && r.min_tokens > *r.max_tokens) {
    return p.fail("min_tokens", "min_tokens must be less than or equal to max_tokens");
  }
  return r;
}

Result<TokenizeRequest> parse_tokenize_request(std::string_view body, std::string* param) {
  Parser p(param);
  INFERA_ASSIGN_OR_RETURN(json::object o, p.parse_object(body));
  TokenizeRequest r;
  bool has_messages = false;
  for (const auto& [key_sv, value] : o) {
    const std::string_view key = key_sv;
    if (key == "model") {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(r.model, p.string(value, key));
    } else if (key == "prompt") {
      INFERA_ASSIGN_OR_RETURN(std::string text, p.string(value, key));
      r.prompt = std::move(text);
    } else if (key == "messages") {
      has_messages = !value.is_null();
    } else if (key == "return_token_strs") {
      if (value.is_null()) continue;
      INFERA_ASSIGN_OR_RETURN(r.return_token_strs, p.boolean(value, key));
    } else if (key != "add_special_tokens" && key != "tools" && key != "add_generation_prompt" &&
               key != "continue_final_message" && key != "chat_template_kwargs" &&
               key != "chat_template" && key != "mm_processor_kwargs" && key != "documents" &&
               key != "cache_salt") {
      return p.fail(key, "Unrecognized request argument supplied: " + std::string(key));
    }
  }
  if (r.prompt.has_value() == has_messages) {
    return p.fail("prompt", "give either 'prompt' or 'messages'");
  }
  if (r.prompt) {
    if (const json::value* a = o.if_contains("add_special_tokens"); a && !a->is_null()) {
      INFERA_ASSIGN_OR_RETURN(r.add_special_tokens, p.boolean(*a, "add_special_tokens"));
    }
  } else {
    // vLLM's TokenizeChatRequest: the chat fields and rules of a chat completions request.
    INFERA_ASSIGN_OR_RETURN(r.chat, tokenizer::parse_chat_prompt(o, kMaxMessages, param));
  }
  return r;
}

Result<std::vector<TokenId>> parse_detokenize_request(std::string_view body, std::string* param) {
  Parser p(param);
  INFERA_ASSIGN_OR_RETURN(json::object o, p.parse_object(body));
  std::vector<TokenId> ids;
  bool has_tokens = false;
  for (const auto& [key, value] : o) {
    if (key == "tokens") {
      if (!value.is_array()) return p.fail("tokens", "'tokens' must be a list of token ids");
      INFERA_ASSIGN_OR_RETURN(ids, p.token_ids(value.get_array(), "tokens"));
      has_tokens = true;
    } else if (key != "model") {
      return p.fail(key, "Unrecognized request argument supplied: " + std::string(key));
    }
  }
  if (!has_tokens) return p.fail("tokens", "'tokens' is required");
  return ids;
}

namespace {

// The generation fields of a /v1/responses body, into `r`; other fields are ignored.
Status parse_responses_fields(Parser& p, const json::object& o, ResponsesRequest& r) {
  GenerateRequest& g = r.generate;
  for (const auto& [key_sv, value] : o) {
    const std::string_view key = key_sv;
    if (value.is_null()) continue;
    if (key == "model") {
      INFERA_ASSIGN_OR_RETURN(g.model, p.string(value, key));
    } else if (key == "stream") {
      INFERA_ASSIGN_OR_RETURN(const bool stream, p.boolean(value, key));
      if (stream) return p.fail(key, "streaming responses are not supported by the mock engine");
    } else if (key == "store") {
      INFERA_ASSIGN_OR_RETURN(r.store, p.boolean(value, key));
    } else if (key == "max_output_tokens") {
      INFERA_ASSIGN_OR_RETURN(const int64_t m, p.integer(value, key));
      if (m < 1)
        return p.fail(key, "'max_output_tokens' must be at least 1, got " + std::to_string(m));
      g.max_tokens =
          static_cast<uint32_t>(std::min<int64_t>(m, std::numeric_limits<uint32_t>::max()));
    } else if (key == "min_tokens") {
      INFERA_ASSIGN_OR_RETURN(const int64_t m, p.integer(value, key));
      if (m < 0) return p.fail(key, "'min_tokens' must be greater than or equal to 0");
      g.min_tokens =
          static_cast<uint32_t>(std::min<int64_t>(m, std::numeric_limits<uint32_t>::max()));
    } else if (key == "ignore_eos") {
      INFERA_ASSIGN_OR_RETURN(g.ignore_eos, p.boolean(value, key));
    } else if (key == "instructions") {
      INFERA_ASSIGN_OR_RETURN(r.instructions, p.string(value, key));
    } else if (key == "previous_response_id") {
      INFERA_ASSIGN_OR_RETURN(r.previous_response_id, p.string(value, key));
      if (r.previous_response_id.empty() || r.previous_response_id.size() > 256) {
        return p.fail(key, "'previous_response_id' must be a response id");
      }
    }
  }
  if (g.max_tokens && g.min_tokens > *g.max_tokens) {
    return p.fail("min_tokens", "min_tokens must be less than or equal to max_output_tokens");
  }
  return ok_status();
}

}  // namespace

Result<ResponsesRequest> parse_responses_request(std::string_view body, std::string* param) {
  Parser p(param);
  INFERA_ASSIGN_OR_RETURN(json::object o, p.parse_object(body));
  ResponsesRequest r;
  r.generate.kind = ApiKind::kChat;
  INFERA_RETURN_IF_ERROR(parse_responses_fields(p, o, r));
  // The gateway's reading of the prompt. It leaves `chat` empty under a previous_response_id
  // (the conversation is the worker's): the new turn's messages are those of the body without it.
  o.erase("previous_response_id");
  INFERA_ASSIGN_OR_RETURN(tokenizer::ResponsesPrompt prompt,
                          tokenizer::parse_responses_prompt(o, kMaxMessages, param));
  if (!prompt.chat) return p.fail("input", "the mock engine reads only message items");
  r.generate.chat = std::move(*prompt.chat);
  r.num_instructions = r.instructions ? 1 : 0;
  return r;
}

Result<EmbeddingsRequest> parse_embeddings_request(std::string_view body, std::string* param) {
  constexpr size_t kMaxInputs = 2048;  // OpenAI's limit of inputs per request
  constexpr int64_t kMaxDimensions = 4096;
  Parser p(param);
  INFERA_ASSIGN_OR_RETURN(json::object o, p.parse_object(body));
  EmbeddingsRequest r;
  bool has_input = false;
  // vLLM's extra fields (truncate_prompt_tokens, normalize, user, ...) are accepted and ignored.
  for (const auto& [key_sv, value] : o) {
    const std::string_view key = key_sv;
    if (value.is_null()) continue;
    if (key == "model") {
      INFERA_ASSIGN_OR_RETURN(r.model, p.string(value, key));
    } else if (key == "input") {
      INFERA_ASSIGN_OR_RETURN(r.inputs, p.prompts(value, key, kMaxInputs));
      has_input = true;
    } else if (key == "encoding_format") {
      INFERA_ASSIGN_OR_RETURN(const std::string format, p.string(value, key));
      if (format != "float" && format != "base64") {
        return p.fail(key, "'encoding_format' must be \"float\" or \"base64\"");
      }
      r.base64 = format == "base64";
    } else if (key == "dimensions") {
      INFERA_ASSIGN_OR_RETURN(const int64_t d, p.integer(value, key));
      if (d < 1 || d > kMaxDimensions) {
        return p.fail(key, "'dimensions' must be between 1 and " + std::to_string(kMaxDimensions));
      }
      r.dimensions = static_cast<uint32_t>(d);
    } else if (key == "add_special_tokens") {
      INFERA_ASSIGN_OR_RETURN(r.add_special_tokens, p.boolean(value, key));
    }
  }
  if (!has_input) return p.fail("input", "'input' is required");
  return r;
}

// ---------------------------------------------------------------------------------------------
// Responses

namespace {

void append_head(std::string& out, const ResponseMeta& meta, std::string_view object) {
  out += R"({"id":)";
  http::append_json_string(out, meta.id);
  out += R"(,"object":")";
  out += object;
  out += R"(","created":)";
  out += std::to_string(meta.created);
  out += R"(,"model":)";
  http::append_json_string(out, meta.model);
}

void append_finish(std::string& out, FinishReason finish) {
  out += R"(,"finish_reason":)";
  if (finish == FinishReason::kNone) {
    out += "null";
  } else {
    out += '"';
    out += finish_reason_name(finish);
    out += '"';
  }
}

void append_usage_json(std::string& out, const Usage& u) {
  out += R"({"prompt_tokens":)";
  out += std::to_string(u.prompt_tokens);
  out += R"(,"total_tokens":)";
  out += std::to_string(u.prompt_tokens + u.completion_tokens);
  out += R"(,"completion_tokens":)";
  out += std::to_string(u.completion_tokens);
  out += R"(,"prompt_tokens_details":{"cached_tokens":)";
  out += std::to_string(u.cached_tokens);
  out += "}}";
}

}  // namespace

std::string completion_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                                const Usage& usage, std::string_view kv_transfer_params) {
  const bool chat = meta.kind == ApiKind::kChat;
  std::string out;
  size_t text_bytes = 0;
  for (const ChoiceResult& c : choices) text_bytes += c.text.size();
  out.reserve(256 + text_bytes + 160 * choices.size());
  append_head(out, meta, chat ? "chat.completion" : "text_completion");
  out += R"(,"choices":[)";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += ',';
    out += R"({"index":)";
    out += std::to_string(i);
    if (chat) {
      out += R"(,"message":{"role":"assistant","content":)";
      http::append_json_string(out, choices[i].text);
      out += R"(,"refusal":null,"tool_calls":[]})";
      out += R"(,"logprobs":null)";
    } else {
      out += R"(,"text":)";
      http::append_json_string(out, choices[i].text);
      out += R"(,"logprobs":null)";
    }
    append_finish(out, choices[i].finish);
    out += R"(,"stop_reason":null)";
    if (!chat) out += R"(,"prompt_logprobs":null)";
    out += '}';
  }
  out += R"(],"usage":)";
  append_usage_json(out, usage);
  out += R"(,"kv_transfer_params":)";
  out += kv_transfer_params.empty() ? std::string_view("null") : kv_transfer_params;
  out += '}';
  return out;
}

StreamChunks::StreamChunks(const ResponseMeta& meta) : chat_(meta.kind == ApiKind::kChat) {
  head_ = "data: ";
  append_head(head_, meta, chat_ ? "chat.completion.chunk" : "text_completion");
  head_ += R"(,"choices":[)";
}

void StreamChunks::append_delta(std::string& out, uint32_t index, std::string_view text,
                                FinishReason finish, bool usage_null, const Usage* usage) const {
  out += head_;
  out += R"({"index":)";
  out += std::to_string(index);
  out += chat_ ? R"(,"delta":{"content":)" : R"(,"text":)";
  http::append_json_string(out, text);
  out += chat_ ? R"(},"logprobs":null)" : R"(,"logprobs":null)";
  append_finish(out, finish);
  out += R"(,"stop_reason":null}])";
  if (usage != nullptr) {
    out += R"(,"usage":)";
    append_usage_json(out, *usage);
  } else if (usage_null) {
    out += R"(,"usage":null)";
  }
  out += "}\n\n";
}

void StreamChunks::append_role(std::string& out, uint32_t index, bool usage_null) const {
  out += head_;
  out += R"({"index":)";
  out += std::to_string(index);
  out += R"(,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}])";
  if (usage_null) out += R"(,"usage":null)";
  out += "}\n\n";
}

void StreamChunks::append_usage(std::string& out, const Usage& usage) const {
  // head_ ends with `"choices":[`: an empty list.
  out += head_;
  out += R"(],"usage":)";
  append_usage_json(out, usage);
  out += "}\n\n";
}

std::string responses_response(const ResponsesResult& r) {
  std::string out;
  out.reserve(640 + r.text.size());
  out += R"({"id":)";
  http::append_json_string(out, r.id);
  out += R"(,"object":"response","created_at":)";
  out += std::to_string(r.created_at);
  out += R"(,"model":)";
  http::append_json_string(out, r.model);
  out += R"(,"status":"completed","error":null,"incomplete_details":null,"instructions":)";
  if (r.instructions) {
    http::append_json_string(out, *r.instructions);
  } else {
    out += "null";
  }
  out += R"(,"max_output_tokens":)";
  out += r.max_output_tokens ? std::to_string(*r.max_output_tokens) : std::string("null");
  out += R"(,"output":[{"type":"message","id":)";
  http::append_json_string(out, r.message_id);
  out += R"(,"status":"completed","role":"assistant","content":[{"type":"output_text","text":)";
  http::append_json_string(out, r.text);
  out += R"(,"annotations":[]}]}],"parallel_tool_calls":true,"tool_choice":"auto","tools":[])";
  out += R"(,"text":{"format":{"type":"text"}},"truncation":"disabled","metadata":{})";
  out += R"(,"usage":{"input_tokens":)";
  out += std::to_string(r.usage.prompt_tokens);
  out += R"(,"input_tokens_details":{"cached_tokens":)";
  out += std::to_string(r.usage.cached_tokens);
  out += R"(},"output_tokens":)";
  out += std::to_string(r.usage.completion_tokens);
  out += R"(,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":)";
  out += std::to_string(r.usage.prompt_tokens + r.usage.completion_tokens);
  out += R"(},"previous_response_id":)";
  if (r.previous_response_id.empty()) {
    out += "null";
  } else {
    http::append_json_string(out, r.previous_response_id);
  }
  out += R"(,"store":)";
  out += r.store ? "true" : "false";
  out += '}';
  return out;
}

std::vector<float> mock_embedding(std::span<const TokenId> ids, uint32_t dimensions) {
  // Seeded by a hash of the ids (splitmix64 as the mixer), then `dimensions` draws in [-1, 1),
  // normalized to unit length.
  uint64_t seed = 0x656d62656464ULL ^ ids.size();
  for (const TokenId id : ids) {
    uint64_t state = seed ^ id;
    seed = splitmix64(state);
  }
  std::vector<float> v(dimensions);
  double norm2 = 0;
  for (float& x : v) {
    const uint64_t bits = splitmix64(seed);
    const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1)
    x = static_cast<float>(2.0 * u - 1.0);
    norm2 += static_cast<double>(x) * static_cast<double>(x);
  }
  const double norm = std::sqrt(norm2);
  if (norm > 0) {
    for (float& x : v) x = static_cast<float>(static_cast<double>(x) / norm);
  }
  return v;
}

namespace {

// float32 values, little-endian, in base64 (what OpenAI's encoding_format "base64" carries).
std::string base64_floats(const std::vector<float>& v) {
  std::string bytes;
  bytes.reserve(v.size() * 4);
  for (const float f : v) {
    const auto u = std::bit_cast<uint32_t>(f);
    for (int shift = 0; shift < 32; shift += 8) bytes += static_cast<char>((u >> shift) & 0xffu);
  }
  return base64_encode(bytes);
}

void append_floats(std::string& out, const std::vector<float>& v) {
  out += '[';
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ',';
    const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v[i]);  // shortest round trip
    out.append(buf, ec == std::errc() ? end : buf);
  }
  out += ']';
}

}  // namespace

std::string embeddings_response(const ResponseMeta& meta,
                                const std::vector<std::vector<float>>& embeddings, bool base64,
                                uint64_t prompt_tokens) {
  std::string out;
  append_head(out, meta, "list");
  out += R"(,"data":[)";
  for (size_t i = 0; i < embeddings.size(); ++i) {
    if (i > 0) out += ',';
    out += R"({"object":"embedding","index":)";
    out += std::to_string(i);
    out += R"(,"embedding":)";
    if (base64) {
      http::append_json_string(out, base64_floats(embeddings[i]));
    } else {
      append_floats(out, embeddings[i]);
    }
    out += '}';
  }
  out += R"(],"usage":{"prompt_tokens":)";
  out += std::to_string(prompt_tokens);
  out += R"(,"total_tokens":)";
  out += std::to_string(prompt_tokens);
  out += R"(,"completion_tokens":0,"prompt_tokens_details":null}})";
  return out;
}

std::string models_response(std::string_view served_name, std::string_view root,
                            uint32_t max_model_len, int64_t created,
                            std::span<const LoraModule> adapters) {
  std::string out = R"({"object":"list","data":[{"id":)";
  http::append_json_string(out, served_name);
  out += R"(,"object":"model","created":)";
  out += std::to_string(created);
  out += R"(,"owned_by":"vllm","root":)";
  http::append_json_string(out, root);
  out += R"(,"parent":null,"max_model_len":)";
  out += std::to_string(max_model_len);
  out += R"(,"permission":[{"id":"modelperm-infera-mock","object":"model_permission","created":)";
  out += std::to_string(created);
  out += R"(,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,)"
         R"("allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,)"
         R"("organization":"*","group":null,"is_blocking":false}]})";
  for (const LoraModule& a : adapters) {
    out += R"(,{"id":)";
    http::append_json_string(out, a.name);
    out += R"(,"object":"model","created":)";
    out += std::to_string(created);
    out += R"(,"owned_by":"vllm","root":)";
    http::append_json_string(out, a.path);
    out += R"(,"parent":)";
    http::append_json_string(out, served_name);
    out += R"(,"max_model_len":null,"permission":[]})";
  }
  out += "]}";
  return out;
}

std::string tokenize_response(const std::vector<TokenId>& ids, uint32_t max_model_len,
                              const std::vector<std::string>* token_strs) {
  std::string out = R"({"count":)";
  out += std::to_string(ids.size());
  out += R"(,"max_model_len":)";
  out += std::to_string(max_model_len);
  out += R"(,"tokens":[)";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  out += R"(],"token_strs":)";
  if (token_strs == nullptr) {
    out += "null";
  } else {
    out += '[';
    for (size_t i = 0; i < token_strs->size(); ++i) {
      if (i > 0) out += ',';
      http::append_json_string(out, (*token_strs)[i]);
    }
    out += ']';
  }
  out += '}';
  return out;
}

}  // namespace infera::mock
