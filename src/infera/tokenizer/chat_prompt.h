// ChatPrompt: what a chat request gives the model's prompt path (messages, tools,
// add_generation_prompt, continue_final_message, chat_template_kwargs, add_special_tokens),
// read from the request's JSON by one parser that the gateway (which hashes the prompt's blocks)
// and the simulated engine (which caches them) both call, so the two never see different
// prompts. Also the two rewrites around the chat template: list-of-parts content flattened for
// templates that expect strings (vLLM), and the cut after the final message (transformers).
// Pure functions; any thread.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "infera/common/status.h"

namespace infera::tokenizer {

struct ChatPrompt {
  // Objects with a string "role"; "content" a string, a list of parts, null or absent.
  boost::json::array messages;
  std::optional<boost::json::array> tools;  // set when the request has a "tools" list
  bool add_generation_prompt = true;        // vLLM's default; off under continue_final_message
  bool continue_final_message = false;
  boost::json::object chat_template_kwargs;
  // Special tokens on top of the ones the template writes (vLLM's chat default: none).
  bool add_special_tokens = false;
};

// Reads the chat prompt's fields from a chat request's body and ignores every other field; null
// counts as absent. vLLM's rules: "messages" is required and not empty (and here at most
// `max_messages` long); continue_final_message with an explicit add_generation_prompt true is
// an error, and without one it turns the generation prompt off. Errors are InvalidArgument;
// `param`, when given, receives the offending field ("messages[2].role").
Result<ChatPrompt> parse_chat_prompt(const boost::json::object& body, uint32_t max_messages,
                                     std::string* param = nullptr);

// A Responses API request (POST /v1/responses) as a chat prompt, the way vLLM's
// serving_responses builds its messages: `instructions` as a system message, then `input` (a
// string: one user message; a list: its message items, each {"role", "content"} with an
// optional "type":"message", content a string or parts; input_text and output_text parts are
// text parts, input_image an image_url part). `chat` is empty when the router cannot know the
// prompt: a `previous_response_id` (the conversation so far lives on the worker that answered
// it), `tools`, or an item that is not a message (function calls, reasoning); such a request is
// routed by load (and by its previous response's worker). Errors (InvalidArgument, `param` set):
// `input` missing or of another type, more than `max_messages` items.
struct ResponsesPrompt {
  std::optional<ChatPrompt> chat;
  std::string previous_response_id;  // "" when absent
};
Result<ResponsesPrompt> parse_responses_prompt(const boost::json::object& body, uint32_t max_messages,
                                               std::string* param = nullptr);

// `messages` with list-of-parts content replaced by its text parts joined by '\n' (other parts
// dropped): vLLM's "string" content format, for templates that do not loop over the parts.
boost::json::array flatten_content(const boost::json::array& messages);

// The content parts of `messages` that are not text (image_url, input_audio, video_url, file,
// ...). They change what the engine computes from the first message that has one on, without
// changing the router's tokens there, so the router mixes them into its block hashes from that
// point (kv::media_seed): a request never predicts hits made by one with other media.
struct MediaParts {
  std::string bytes;         // each part serialized and followed by '\n', in order; "": none
  size_t first_message = 0;  // the index of the first message with one (when `bytes` is not "")
};
MediaParts media_parts(const boost::json::array& messages);

// transformers' continue_final_message: `rendered` (the template's output for `messages`) cut
// right after the final message's text (its string content, or its last part with a "text"), so
// that the model continues that message. Surrounding whitespace the template dropped is not
// required; trailing whitespace it kept stays. Null or empty content leaves `rendered` as it is;
// InvalidArgument when a list of parts has no text or the text is not in `rendered`.
Result<std::string> cut_after_final_message(std::string rendered,
                                            const boost::json::array& messages);

}  // namespace infera::tokenizer
