// PromptEncoder: a model's prompt path, as vLLM runs it, in one place for the gateway, the
// simulated engine and `infera tokenize`: tokenizer.json encodes text (completions prompts
// with the post-processor's special tokens unless told otherwise); chat prompts (ChatPrompt,
// chat_prompt.h) are first rendered with tokenizer_config.json's chat template and encoded
// without special tokens unless the request asks for them.
// Loaded once from a directory or a Hugging Face id resolved offline; immutable afterwards and
// safe to use from any number of threads.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/clock.h"
#include "infera/common/status.h"
#include "infera/jinja/chat.h"
#include "infera/tokenizer/chat_prompt.h"
#include "infera/tokenizer/tokenizer.h"

namespace infera::tokenizer {

struct EncodedPrompt {
  std::vector<TokenId> ids;
  std::string rendered;  // the chat template's output (chat only)
};

class PromptEncoder {
 public:
  // `path_or_id`: a directory with tokenizer.json (and optionally tokenizer_config.json), or a
  // Hugging Face id found in the local cache. Errors name what was looked at.
  static Result<std::unique_ptr<PromptEncoder>> load(std::string_view path_or_id);

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::filesystem::path& directory() const { return directory_; }
  bool has_chat_template() const { return chat_.has_value(); }

  Result<EncodedPrompt> encode_text(std::string_view text, bool add_special_tokens) const;

  // A chat request's prompt, as vLLM builds it: list-of-parts content flattened unless the
  // template loops over the parts (vLLM's "auto" content format), the template rendered, the
  // output cut after the final message under continue_final_message (transformers), then
  // encoded, with the post-processor's special tokens only when the request asks for them.
  // The gateway hashes and the simulated engine caches exactly these ids. Template errors and
  // a continue_final_message that cannot be applied are INVALID_ARGUMENT (HTTP 400); no chat
  // template in the model directory is FAILED_PRECONDITION.
  Result<EncodedPrompt> encode_chat(const ChatPrompt& chat) const;

  // The same for a caller that keeps the prompt's parts in its own struct (the gateway's
  // OpenAiRequest), without copying the messages into a ChatPrompt.
  struct ChatOptions {
    bool add_generation_prompt = true;
    bool continue_final_message = false;
    bool add_special_tokens = false;
  };
  Result<EncodedPrompt> encode_chat(const boost::json::array& messages,
                                    const std::optional<boost::json::array>& tools,
                                    const boost::json::object& template_kwargs,
                                    const ChatOptions& options) const;

 private:
  PromptEncoder() = default;

  std::filesystem::path directory_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<jinja::ChatTemplate> chat_;
  // The template loops over message content (OpenAI parts); otherwise list content is
  // flattened to a string first, as vLLM's "auto" content format does.
  bool openai_content_ = false;
};

}  // namespace infera::tokenizer
