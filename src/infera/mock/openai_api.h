// The simulated engine's OpenAI surface as vLLM serves it: request bodies of /v1/completions,
// /v1/chat/completions, /v1/responses, /v1/embeddings and /tokenize parsed without throwing into
// typed structs (a wrong type, an empty prompt, max_tokens <= 0 or an unknown field is an
// InvalidArgument naming the field, answered 400 by http::error_response), and the JSON the
// engine answers with: whole responses, SSE chunks, the usage chunk, /v1/models, embeddings.
// Byte-level shapes follow vLLM's protocol.py and OpenAI's API reference. Pure functions; any
// thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"
#include "infera/engine/block_hasher.h"
#include "infera/engine/engine_core.h"
#include "infera/tokenizer/chat_prompt.h"

namespace infera::mock {

enum class ApiKind : uint8_t { kCompletions, kChat };

// One completions prompt: text, or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<engine::TokenId> ids;
};

struct GenerateRequest {
  ApiKind kind = ApiKind::kCompletions;
  std::string model;  // "" when absent

  // Completions: one or more prompts (each becomes `n` choices), text encoded with the
  // post-processor's special tokens unless add_special_tokens is false.
  std::vector<PromptInput> prompts;
  bool add_special_tokens = true;
  // Chat: the prompt as the gateway reads it (tokenizer::parse_chat_prompt), add_special_tokens
  // included.
  tokenizer::ChatPrompt chat;

  std::optional<uint32_t> max_tokens;  // max_tokens or max_completion_tokens; >= 1
  uint32_t min_tokens = 0;
  bool ignore_eos = false;
  uint32_t n = 1;  // choices per prompt

  bool stream = false;
  bool include_usage = false;             // stream_options.include_usage
  bool continuous_usage_stats = false;    // stream_options.continuous_usage_stats (vLLM)
  bool echo = false;                      // completions: prefix each text with its prompt
  // vLLM disaggregation (NIXL): a prefill request asks {"do_remote_decode": true}; a decode
  // request carries the prefill's answer, {"do_remote_prefill": true, "remote_host": ...}.
  bool do_remote_decode = false;
  struct RemotePrefill {
    std::string host;        // remote_host: the prefill engine's side channel
    uint32_t port = 0;       // remote_port
    std::string request_id;  // remote_request_id: the key of its held blocks
    size_t num_blocks = 0;   // remote_block_ids' length
  };
  std::optional<RemotePrefill> remote_prefill;  // do_remote_prefill with a complete address
  // SGLang disaggregation: the prefill engine's bootstrap server and the transfer session.
  std::optional<std::string> bootstrap_host;
  std::optional<uint32_t> bootstrap_port;
  std::optional<uint64_t> bootstrap_room;
};

// Parses a request body. Errors are InvalidArgument; `param` (optional) receives the offending
// field for the OpenAI error's "param".
Result<GenerateRequest> parse_generate_request(ApiKind kind, std::string_view body,
                                               std::string* param = nullptr);

// POST /v1/responses (the Responses API as vLLM serves it, not streamed). The prompt is read by
// the gateway's tokenizer::parse_responses_prompt: `instructions` as a system message, then the
// message items of `input`. previous_response_id is only read here; the server puts the stored
// conversation between the instructions and the new input (vLLM's serving_responses order).
// Unknown fields are ignored (the API has many); stream=true, non-message items and tools are
// errors.
struct ResponsesRequest {
  // kind kChat; `chat` the new turn's messages; max_tokens from max_output_tokens, ignore_eos,
  // min_tokens as for chat.
  GenerateRequest generate;
  std::string previous_response_id;  // "" when absent
  size_t num_instructions = 0;       // 1 when chat.messages starts with `instructions`
  std::optional<std::string> instructions;
  bool store = true;
};
Result<ResponsesRequest> parse_responses_request(std::string_view body,
                                                 std::string* param = nullptr);

// POST /v1/embeddings (vLLM's shape): input as a string, strings, token ids or lists of token ids
// (at most 2048 items, none empty).
struct EmbeddingsRequest {
  std::string model;
  std::vector<PromptInput> inputs;
  bool base64 = false;       // encoding_format "base64": little-endian float32, base64
  uint32_t dimensions = 16;  // 1..4096
  bool add_special_tokens = true;
};
Result<EmbeddingsRequest> parse_embeddings_request(std::string_view body,
                                                   std::string* param = nullptr);

// POST /tokenize (vLLM): {"prompt": "..."} or {"messages": [...], ...}.
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;
  bool add_special_tokens = true;  // for `prompt`
  tokenizer::ChatPrompt chat;      // when prompt is unset, read as a chat request's
  bool return_token_strs = false;
};
Result<TokenizeRequest> parse_tokenize_request(std::string_view body, std::string* param = nullptr);

// POST /detokenize (vLLM): {"tokens": [...]}.
Result<std::vector<engine::TokenId>> parse_detokenize_request(std::string_view body,
                                                              std::string* param = nullptr);

// ---------------------------------------------------------------------------------------------
// Responses

struct ResponseMeta {
  ApiKind kind = ApiKind::kCompletions;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

struct Usage {
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  uint64_t cached_tokens = 0;  // prompt_tokens_details.cached_tokens
};

struct ChoiceResult {
  std::string text;
  engine::FinishReason finish = engine::FinishReason::kNone;
};

// A whole (non-streamed) response. kv_transfer_params: a JSON object or "" (null).
std::string completion_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                                const Usage& usage, std::string_view kv_transfer_params = {});

// The SSE events of one streamed response. The part every event of the response starts with
// (`data: {"id":...,"object":...,"created":...,"model":...,"choices":[`) is built once.
class StreamChunks {
 public:
  explicit StreamChunks(const ResponseMeta& meta);

  // One event for choice `index`: a text delta (completions) or a content delta (chat), with
  // finish_reason when `finish` is set. `usage` adds vLLM's continuous usage stats; `usage_null`
  // writes "usage":null (OpenAI's shape when include_usage is on).
  void append_delta(std::string& out, uint32_t index, std::string_view text,
                    engine::FinishReason finish, bool usage_null,
                    const Usage* usage = nullptr) const;
  // The chat stream's first event of a choice: {"delta":{"role":"assistant","content":""}}.
  void append_role(std::string& out, uint32_t index, bool usage_null) const;
  // The final usage event ("choices": []).
  void append_usage(std::string& out, const Usage& usage) const;

 private:
  bool chat_;
  std::string head_;  // `data: {` ... `,"choices":[`
};

// A whole /v1/responses answer: one assistant message with one output_text part.
struct ResponsesResult {
  std::string id;          // "resp_..."
  std::string message_id;  // "msg_..."
  int64_t created_at = 0;  // unix seconds
  std::string model;
  std::string text;
  Usage usage;  // prompt_tokens -> input_tokens, completion_tokens -> output_tokens
  std::optional<std::string> instructions;
  std::optional<uint32_t> max_output_tokens;
  std::string previous_response_id;  // "" -> null
  bool store = true;
};
std::string responses_response(const ResponsesResult& r);

// The deterministic unit-length embedding of `ids` (float32, `dimensions` values): a function of
// the ids alone, so equal inputs embed equally.
std::vector<float> mock_embedding(std::span<const engine::TokenId> ids, uint32_t dimensions);
// A whole /v1/embeddings answer; `embeddings[i]` is input i's.
std::string embeddings_response(const ResponseMeta& meta,
                                const std::vector<std::vector<float>>& embeddings, bool base64,
                                uint64_t prompt_tokens);

// A LoRA adapter served under its own model name (vLLM --lora-modules NAME=PATH).
struct LoraModule {
  std::string name;
  std::string path;
};

// GET /v1/models: the base model, then each adapter with the base as its `parent`, as vLLM lists
// them.
std::string models_response(std::string_view served_name, std::string_view root,
                            uint32_t max_model_len, int64_t created,
                            std::span<const LoraModule> adapters = {});
// POST /tokenize answer; token_strs null unless given.
std::string tokenize_response(const std::vector<engine::TokenId>& ids, uint32_t max_model_len,
                              const std::vector<std::string>* token_strs);

}  // namespace infera::mock
