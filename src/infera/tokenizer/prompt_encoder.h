// PromptEncoder: a model's prompt path, as vLLM runs it, in one place for the gateway, the
// simulated engine and `infera tokenize`: tokenizer.json encodes text (completions prompts
// with the post-processor's special tokens unless told otherwise); chat messages are first
// rendered with tokenizer_config.json's chat template and encoded without special tokens.
// Loaded once from a directory or a Hugging Face id resolved offline; immutable afterwards and
// safe to use from any number of threads.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "infera/common/clock.h"
#include "infera/common/status.h"
#include "infera/jinja/chat.h"
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
  // Template errors are INVALID_ARGUMENT with the template's message (HTTP 400);
  // no chat template in the model directory is FAILED_PRECONDITION.
  Result<EncodedPrompt> encode_chat(const boost::json::array& messages,
                                    const std::optional<boost::json::array>& tools,
                                    bool add_generation_prompt,
                                    const boost::json::object& template_kwargs) const;

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
