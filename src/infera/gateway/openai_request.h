// The OpenAI requests the gateway routes, parsed at the edge into a typed struct (what routing
// needs: model, stream, the prompt or the chat messages), without throwing and within limits
// (JSON depth, message count, prompt ids), and the prompt's token ids from it. The body itself
// is forwarded to the worker unchanged; this view only informs the routing decision. Pure
// functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "infera/common/status.h"

namespace infera::tokenizer {
class PromptEncoder;
}  // namespace infera::tokenizer

namespace infera::gateway {

enum class ApiKind { kChatCompletions, kCompletions };

struct RequestLimits {
  uint32_t max_json_depth = 64;
  uint32_t max_messages = 10000;
  uint32_t max_prompt_tokens = 1u << 20;
};

struct OpenAiRequest {
  ApiKind kind = ApiKind::kCompletions;
  std::string model;  // "" when absent
  bool stream = false;
  // Completions: the (first) prompt, as text or as token ids; a batch routes by its first prompt.
  std::optional<std::string> prompt_text;
  std::vector<uint32_t> prompt_ids;
  uint32_t num_prompts = 0;
  // Chat: what the chat template needs, read by tokenizer::parse_chat_prompt (the fields and
  // rules of tokenizer::ChatPrompt; continue_final_message turns add_generation_prompt off).
  boost::json::array messages;
  std::optional<boost::json::array> tools;
  bool add_generation_prompt = true;       // vLLM's default
  bool continue_final_message = false;
  boost::json::object chat_template_kwargs;
  // Completions prompts get special tokens by default; chat prompts only when the request asks
  // (on top of the template's own), as vLLM does.
  bool add_special_tokens = true;
  // Chat: kv::media_digest of the messages' non-text parts (tokenizer::media_parts); 0 when
  // there are none. Mixed into the seed of the block hashes from `media_from_token` on
  // (prompt_hashes); the tokens before it render the same with or without the media.
  uint64_t media_digest = 0;
  size_t media_first_message = 0;  // the first message with media (tokenizer::MediaParts)
  size_t media_from_token = 0;     // set with the prompt's tokens (prompt_tokens)
};

// Parses and validates a request body. An InvalidArgument error's message names the problem;
// `param`, when given, receives the offending field (the OpenAI error's "param").
Result<OpenAiRequest> parse_openai_request(ApiKind kind, std::string_view body,
                                           const RequestLimits& limits, std::string* param = nullptr);

// POST /v1/responses as the router reads it: the model, the response it continues, and its
// prompt as a chat request (tokenizer::parse_responses_prompt) when the router can know it
// (none with a previous_response_id, tools or items other than messages).
struct ResponsesRequest {
  std::string model;                 // "" when absent
  std::string previous_response_id;  // "" when absent
  std::optional<OpenAiRequest> chat;
};
Result<ResponsesRequest> parse_responses_request(std::string_view body, const RequestLimits& limits,
                                                 std::string* param = nullptr);

// The `model` of a body the gateway routes by load without reading its prompt (/v1/embeddings,
// /v1/rerank, /v1/score, /detokenize); "" when absent. The body must be a JSON object within
// `limits`' depth; the rest of it is the worker's to judge.
Result<std::string> parse_model_field(std::string_view body, const RequestLimits& limits,
                                      std::string* param = nullptr);

// The prompt's token ids, as the simulated engine computes them: the ids as given, the (first)
// text prompt encoded, or the chat prompt through tokenizer::PromptEncoder::encode_chat with
// every field of the request's chat prompt. Errors are the encoder's (a template error is
// InvalidArgument).
Result<std::vector<uint32_t>> encode_prompt(const tokenizer::PromptEncoder& encoder,
                                            const OpenAiRequest& r);

// How many leading tokens of `ids` (the prompt encode_prompt gave for `r`) the engine computes
// the same whatever the media: the longest common prefix of `ids` with the conversation up to
// the first message with media, rendered alone. All of `ids` without media; 0 when that
// message is the first, or the shorter conversation does not render.
size_t tokens_before_media(const tokenizer::PromptEncoder& encoder, const OpenAiRequest& r,
                           std::span<const uint32_t> ids);

namespace detail {
// Completions bodies are read by a fast reader for plain JSON (ASCII strings without escapes,
// integers, fractions) and only otherwise by Boost.JSON's parser. This is the parse by Boost.JSON
// alone; tests and the fuzz target check that the two agree on every body.
Result<OpenAiRequest> parse_completions_by_boost(std::string_view body,
                                                 const RequestLimits& limits,
                                                 std::string* param = nullptr);
}  // namespace detail

}  // namespace infera::gateway
