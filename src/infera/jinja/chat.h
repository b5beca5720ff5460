// Chat prompts rendered the way Hugging Face transformers' apply_chat_template(..., tokenize=False)
// renders them: the model's chat template from tokenizer_config.json, given the messages, tools,
// add_generation_prompt, the tokenizer's special tokens and any extra template kwargs
// (e.g. enable_thinking). A ChatTemplate is immutable once built; render() may be called from any
// number of threads at once.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <filesystem>
#include <optional>
#include <string>

#include "infera/common/status.h"
#include "infera/jinja/template.h"

namespace infera::jinja {

struct ChatInputs {
  // OpenAI-shaped messages, passed to the template as given: content may be a string, null or a
  // list of parts ({"type": "text", "text": ...}); the template decides what to do with them.
  boost::json::array messages;
  // Tool schemas; set (even if empty) when the request has a `tools` field.
  std::optional<boost::json::array> tools;
  bool add_generation_prompt = false;
  // Extra template variables (a request's chat_template_kwargs); they override special tokens.
  boost::json::object template_kwargs;
};

class ChatTemplate {
 public:
  // From a parsed tokenizer_config.json: `chat_template` is a string, or a list of
  // {"name", "template"} where "tool_use" is used when tools are given and "default" otherwise.
  // Special tokens (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token,
  // additional_special_tokens, extra_special_tokens; strings or {"content": ...}) become template
  // variables as in transformers' special_tokens_map. A missing or malformed template is an error.
  static Result<ChatTemplate> from_tokenizer_config(const boost::json::object& config);
  // Reads and parses the file; a chat_template.jinja beside it overrides the config's template,
  // as transformers loads it. Errors name the path.
  static Result<ChatTemplate> from_file(const std::filesystem::path& tokenizer_config_json);

  // The rendered prompt. Template errors (raise_exception's message verbatim, undefined values
  // used, type errors) are INVALID_ARGUMENT; a limit hit is RESOURCE_EXHAUSTED.
  Result<std::string> render(const ChatInputs& inputs, const Limits& limits = {}) const;

  // The special-token variables the template sees (name -> string, or list for
  // additional_special_tokens).
  const boost::json::object& special_tokens() const { return special_tokens_; }

 private:
  ChatTemplate(Template default_template, std::optional<Template> tool_use_template,
               boost::json::object special_tokens)
      : default_template_(std::move(default_template)),
        tool_use_template_(std::move(tool_use_template)),
        special_tokens_(std::move(special_tokens)) {}

  Template default_template_;
  std::optional<Template> tool_use_template_;
  boost::json::object special_tokens_;
};

}  // namespace infera::jinja
