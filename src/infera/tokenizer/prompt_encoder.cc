#include "infera/tokenizer/prompt_encoder.h"

#include <boost/json.hpp>
#include <fstream>
#include <regex>
#include <sstream>

#include "infera/tokenizer/model_dir.h"

namespace infera::tokenizer {
namespace {

namespace json = boost::json;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// vLLM's content-format detection ("auto"): a template that loops over a message's content
// takes OpenAI's list of parts; any other template gets the text parts joined by newlines.
bool template_iterates_content(const std::filesystem::path& dir) {
  std::string source;
  std::error_code ec;
  json::value config = json::parse(read_text(dir / "tokenizer_config.json"), ec);
  if (!ec && config.is_object()) {
    if (const auto* t = config.as_object().if_contains("chat_template")) {
      if (t->is_string()) {
        source += t->as_string();
      } else if (t->is_array()) {
        for (const auto& v : t->as_array()) {
          if (!v.is_object()) continue;
          if (const auto* s = v.as_object().if_contains("template"); s && s->is_string()) {
            source += s->as_string();
          }
        }
      }
    }
  }
  if (std::filesystem::exists(dir / "chat_template.jinja", ec)) {
    source += read_text(dir / "chat_template.jinja");
  }
  static const std::regex kLoop(
      R"(for\s+\w+\s+in\s+\w+\s*(\.\s*content\b|\[\s*['"]content['"]\s*\]))");
  return std::regex_search(source, kLoop);
}

}  // namespace

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
      p->openai_content_ = template_iterates_content(dir);
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

Result<EncodedPrompt> PromptEncoder::encode_chat(const ChatPrompt& chat) const {
  return encode_chat(chat.messages, chat.tools, chat.chat_template_kwargs,
                     ChatOptions{.add_generation_prompt = chat.add_generation_prompt,
                                 .continue_final_message = chat.continue_final_message,
                                 .add_special_tokens = chat.add_special_tokens});
}

Result<EncodedPrompt> PromptEncoder::encode_chat(const boost::json::array& messages,
                                                 const std::optional<boost::json::array>& tools,
                                                 const boost::json::object& template_kwargs,
                                                 const ChatOptions& options) const {
  if (!chat_) {
    return failed_precondition("the tokenizer at " + directory_.string() +
                               " has no chat template (tokenizer_config.json chat_template)");
  }
  jinja::ChatInputs inputs;
  inputs.messages = openai_content_ ? messages : flatten_content(messages);
  inputs.tools = tools;
  inputs.add_generation_prompt = options.add_generation_prompt;
  inputs.template_kwargs = template_kwargs;
  EncodedPrompt out;
  INFERA_ASSIGN_OR_RETURN(out.rendered, chat_->render(inputs));
  // The final message as the template saw it (flattened or not), as transformers looks for it.
  if (options.continue_final_message) {
    INFERA_ASSIGN_OR_RETURN(out.rendered,
                            cut_after_final_message(std::move(out.rendered), inputs.messages));
  }
  // Rendered chat prompts carry the template's special tokens; more only when asked (vLLM).
  out.ids = tokenizer_->encode(out.rendered, options.add_special_tokens);
  return out;
}

}  // namespace infera::tokenizer
