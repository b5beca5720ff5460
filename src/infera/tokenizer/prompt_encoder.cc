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

// Messages with list-of-parts content flattened to strings (text parts joined by '\n', other
// parts dropped), as vLLM does for "string" content-format templates.
json::array flatten_content(const json::array& messages) {
  json::array out = messages;
  for (auto& m : out) {
    if (!m.is_object()) continue;
    auto* content = m.as_object().if_contains("content");
    if (content == nullptr || !content->is_array()) continue;
    std::string text;
    bool first = true;
    for (const auto& part : content->as_array()) {
      const json::object* p = part.if_object();
      if (p == nullptr) continue;
      const auto* type = p->if_contains("type");
      const auto* t = p->if_contains("text");
      if (type && type->is_string() && type->as_string() == "text" && t && t->is_string()) {
        if (!first) text.push_back('\n');
        text.append(t->as_string().data(), t->as_string().size());
        first = false;
      }
    }
    *content = json::string(text);
  }
  return out;
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

Result<EncodedPrompt> PromptEncoder::encode_chat(const boost::json::array& messages,
                                                 const std::optional<boost::json::array>& tools,
                                                 bool add_generation_prompt,
                                                 const boost::json::object& template_kwargs) const {
  if (!chat_) {
    return failed_precondition("the tokenizer at " + directory_.string() +
                               " has no chat template (tokenizer_config.json chat_template)");
  }
  jinja::ChatInputs inputs;
  inputs.messages = openai_content_ ? messages : flatten_content(messages);
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
