#include "infera/tokenizer/prompt_encoder.h"

#include "infera/tokenizer/model_dir.h"

namespace infera::tokenizer {

Result<std::unique_ptr<PromptEncoder>> PromptEncoder::load(std::string_view path_or_id) {
  INFERA_ASSIGN_OR_RETURN(std::filesystem::path dir, resolve_model_dir(path_or_id));
  std::unique_ptr<PromptEncoder> p(new PromptEncoder());
  p->directory_ = dir;
  INFERA_ASSIGN_OR_RETURN(p->tokenizer_, Tokenizer::from_file(dir / "tokenizer.json"));
  const std::filesystem::path config = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    auto chat = jinja::ChatTemplate::from_file(config);
    if (chat.ok()) {
      p->chat_ = std::move(*chat);
    } else if (chat.status().code() != StatusCode::kNotFound) {
      // A template that exists but does not parse is a startup error, not a silent degrade.
      return chat.status();
    }
  }
  return p;
}

Result<EncodedPrompt> PromptEncoder::encode_text(std::string_view text,
                                                 bool add_special_tokens) const {
  EncodedPrompt out;
  out.ids = tokenizer_->encode(text, add_special_tokens);
  return out;
}

Result<EncodedPrompt> PromptEncoder::encode_chat(const boost::json::array& messages,
                                                 const std::optional<boost::json::array>& tools,
                                                 bool add_generation_prompt,
                                                 const boost::json::object& template_kwargs) const {
  if (!chat_) {
    return failed_precondition("the tokenizer at " + directory_.string() +
                               " has no chat template (tokenizer_config.json chat_template)");
  }
  jinja::ChatInputs inputs;
  inputs.messages = messages;
  inputs.tools = tools;
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.template_kwargs = template_kwargs;
  EncodedPrompt out;
  INFERA_ASSIGN_OR_RETURN(out.rendered, chat_->render(inputs));
  // Rendered chat prompts carry their own special tokens: never add more (vLLM does the same).
  out.ids = tokenizer_->encode(out.rendered, false);
  return out;
}

}  // namespace infera::tokenizer
