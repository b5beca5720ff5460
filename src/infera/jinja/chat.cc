#include "infera/jinja/chat.h"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <fstream>
#include <iterator>
#include <string_view>
#include <vector>

#include "infera/jinja/interpreter.h"

namespace infera::jinja {
namespace {

// transformers SpecialTokensMixin.SPECIAL_TOKENS_ATTRIBUTES (tokenization_utils_base.py).
constexpr std::string_view kSpecialTokenNames[] = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

// Names apply_chat_template passes itself; a template kwarg may not replace them (Python would
// raise "got multiple values for keyword argument").
constexpr std::string_view kReservedNames[] = {"messages", "tools", "documents",
                                               "add_generation_prompt"};

// A token in tokenizer_config.json: "text" or an AddedToken {"content": "text", ...}.
std::optional<std::string_view> token_text(const boost::json::value& v) {
  if (v.is_string()) return std::string_view(v.get_string());
  if (v.is_object()) {
    if (const auto* c = v.get_object().if_contains("content"); c != nullptr && c->is_string()) {
      return std::string_view(c->get_string());
    }
  }
  return std::nullopt;
}

// transformers' special_tokens_map: every set, non-empty special token (str), and the list of
// additional special tokens when non-empty; extra_special_tokens (a mapping) add names.
boost::json::object special_tokens_of(const boost::json::object& config) {
  boost::json::object out;
  auto put = [&](std::string_view name, const boost::json::value* v) {
    if (v == nullptr) return;
    if (const auto text = token_text(*v); text && !text->empty()) out[name] = *text;
  };
  for (std::string_view name : kSpecialTokenNames) put(name, config.if_contains(name));
  if (const auto* extra = config.if_contains("additional_special_tokens");
      extra != nullptr && extra->is_array()) {
    boost::json::array list;
    for (const auto& t : extra->get_array()) {
      if (const auto text = token_text(t)) list.emplace_back(*text);
    }
    if (!list.empty()) out["additional_special_tokens"] = std::move(list);
  }
  if (const auto* extra = config.if_contains("extra_special_tokens");
      extra != nullptr && extra->is_object()) {
    for (const auto& kv : extra->get_object()) put(kv.key(), &kv.value());
  }
  return out;
}

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path.string());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return data_loss("error reading " + path.string());
  return bytes;
}

Result<Template> parse_named(std::string_view source, std::string_view what) {
  auto t = Template::parse(source);
  if (!t.ok()) return invalid_argument(std::string(what) + ": " + t.status().message());
  return t;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_tokenizer_config(const boost::json::object& config) {
  const boost::json::value* chat_template = config.if_contains("chat_template");
  if (chat_template == nullptr || chat_template->is_null()) {
    return not_found("tokenizer_config.json has no chat_template");
  }
  std::optional<Template> default_template;
  std::optional<Template> tool_use;
  if (chat_template->is_string()) {
    INFERA_ASSIGN_OR_RETURN(Template t, parse_named(chat_template->get_string(), "chat_template"));
    default_template = std::move(t);
  } else if (chat_template->is_array()) {
    for (const auto& entry : chat_template->get_array()) {
      const auto* obj = entry.if_object();
      const auto* name = obj != nullptr ? obj->if_contains("name") : nullptr;
      const auto* source = obj != nullptr ? obj->if_contains("template") : nullptr;
      if (name == nullptr || !name->is_string() || source == nullptr || !source->is_string()) {
        return invalid_argument(
            "chat_template list entries must be {\"name\": string, \"template\": string}");
      }
      const std::string_view n = name->get_string();
      if (n != "default" && n != "tool_use") continue;
      INFERA_ASSIGN_OR_RETURN(
          Template t, parse_named(source->get_string(), "chat_template '" + std::string(n) + "'"));
      (n == "default" ? default_template : tool_use) = std::move(t);
    }
    if (!default_template) {
      return invalid_argument("chat_template list has no 'default' template");
    }
  } else {
    return invalid_argument("chat_template must be a string or a list of named templates");
  }
  return ChatTemplate(std::move(*default_template), std::move(tool_use), special_tokens_of(config));
}

Result<ChatTemplate> ChatTemplate::from_file(const std::filesystem::path& tokenizer_config_json) {
  INFERA_ASSIGN_OR_RETURN(std::string bytes, read_file(tokenizer_config_json));
  boost::system::error_code ec;
  boost::json::value config = boost::json::parse(bytes, ec);
  if (ec || !config.is_object()) {
    return invalid_argument(tokenizer_config_json.string() + " is not a JSON object" +
                            (ec ? ": " + ec.message() : std::string()));
  }
  boost::json::object& object = config.get_object();
  const std::filesystem::path jinja_file =
      tokenizer_config_json.parent_path() / "chat_template.jinja";
  std::error_code fs_error;
  if (std::filesystem::is_regular_file(jinja_file, fs_error)) {
    INFERA_ASSIGN_OR_RETURN(std::string source, read_file(jinja_file));
    object["chat_template"] = source;
  }
  auto result = from_tokenizer_config(object);
  if (!result.ok()) {
    return Status(result.status().code(),
                  tokenizer_config_json.string() + ": " + result.status().message());
  }
  return result;
}

Result<std::string> ChatTemplate::render(const ChatInputs& inputs, const Limits& limits) const {
  static const boost::json::value kNull;
  const boost::json::value add_generation_prompt(inputs.add_generation_prompt);
  std::vector<Binding> bindings;
  bindings.reserve(4 + special_tokens_.size() + inputs.template_kwargs.size());
  auto bind_value = [&](std::string_view name, const boost::json::value* v) {
    Binding b;
    b.name = name;
    b.value = v;
    bindings.push_back(b);
  };
  Binding messages;
  messages.name = "messages";
  messages.array = &inputs.messages;
  bindings.push_back(messages);
  if (inputs.tools) {
    Binding tools;
    tools.name = "tools";
    tools.array = &*inputs.tools;
    bindings.push_back(tools);
  } else {
    bind_value("tools", &kNull);
  }
  bind_value("documents", &kNull);
  bind_value("add_generation_prompt", &add_generation_prompt);
  for (const auto& kv : special_tokens_) bind_value(kv.key(), &kv.value());
  for (const auto& kv : inputs.template_kwargs) {  // later bindings win: kwargs override tokens
    for (std::string_view reserved : kReservedNames) {
      if (kv.key() == reserved) {
        return invalid_argument("chat template kwargs may not set '" + std::string(reserved) + "'");
      }
    }
    bind_value(kv.key(), &kv.value());
  }
  const Template& t = inputs.tools && tool_use_template_ ? *tool_use_template_ : default_template_;
  return t.render_bindings(bindings.data(), bindings.size(), limits, std::nullopt);
}

}  // namespace infera::jinja
