#include "infera/tokenizer/chat_prompt.h"

#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <boost/json/value.hpp>
#include <string_view>

namespace infera::tokenizer {
namespace {

namespace json = boost::json;

Status field_error(std::string* param, std::string_view field, std::string message) {
  if (param != nullptr) *param = std::string(field);
  return invalid_argument(std::move(message));
}

// The field's value, or nullptr when it is absent or null.
const json::value* present(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

Status read_bool(const json::object& o, std::string_view key, bool& out, std::string* param) {
  const json::value* v = present(o, key);
  if (v == nullptr) return ok_status();
  if (!v->is_bool()) {
    return field_error(param, key, "'" + std::string(key) + "' must be a boolean");
  }
  out = v->get_bool();
  return ok_status();
}

// Python's str.strip() on the ASCII whitespace.
std::string_view strip(std::string_view s, bool leading, bool trailing) {
  auto is_space = [](char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
  };
  size_t b = 0, e = s.size();
  while (leading && b < e && is_space(s[b])) ++b;
  while (trailing && e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

}  // namespace

Result<ChatPrompt> parse_chat_prompt(const json::object& body, uint32_t max_messages,
                                     std::string* param) {
  ChatPrompt c;
  const json::value* msgs = present(body, "messages");
  if (msgs == nullptr) return field_error(param, "messages", "'messages' is required");
  if (!msgs->is_array()) {
    return field_error(param, "messages", "'messages' must be a list of messages");
  }
  const json::array& a = msgs->get_array();
  if (a.empty()) return field_error(param, "messages", "'messages' must not be empty");
  if (a.size() > max_messages) {
    return field_error(param, "messages",
                       "too many messages (" + std::to_string(a.size()) + " > " +
                           std::to_string(max_messages) + ")");
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const json::object* m = a[i].if_object();
    if (m == nullptr) return field_error(param, where, where + " must be an object");
    const json::value* role = m->if_contains("role");
    if (role == nullptr || !role->is_string()) {
      return field_error(param, where + ".role", where + ".role must be a string");
    }
    const json::value* content = present(*m, "content");
    if (content != nullptr && !content->is_string() && !content->is_array()) {
      return field_error(param, where + ".content",
                         where + ".content must be a string, a list of parts or null");
    }
  }
  c.messages = a;

  if (const json::value* t = present(body, "tools")) {
    if (!t->is_array()) return field_error(param, "tools", "'tools' must be a list");
    c.tools = t->get_array();
  }
  INFERA_RETURN_IF_ERROR(read_bool(body, "add_generation_prompt", c.add_generation_prompt, param));
  INFERA_RETURN_IF_ERROR(
      read_bool(body, "continue_final_message", c.continue_final_message, param));
  if (const json::value* k = present(body, "chat_template_kwargs")) {
    if (!k->is_object()) {
      return field_error(param, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    }
    c.chat_template_kwargs = k->get_object();
  }
  INFERA_RETURN_IF_ERROR(read_bool(body, "add_special_tokens", c.add_special_tokens, param));

  // vLLM's ChatCompletionRequest.check_generation_prompt rejects both set; continuing a message
  // without an explicit add_generation_prompt is taken to mean no generation prompt.
  if (c.continue_final_message && c.add_generation_prompt &&
      present(body, "add_generation_prompt")) {
    return field_error(
        param, "continue_final_message",
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  }
  if (c.continue_final_message) c.add_generation_prompt = false;
  return c;
}

namespace {

// One Responses content part as the chat part vLLM reads it; null when it has no chat form.
std::optional<json::object> chat_part(const json::value& part) {
  const json::object* p = part.if_object();
  const json::value* type = p != nullptr ? p->if_contains("type") : nullptr;
  if (type == nullptr || !type->is_string()) return std::nullopt;
  const json::string& t = type->get_string();
  if (t == "input_text" || t == "output_text" || t == "text") {
    const json::value* text = p->if_contains("text");
    if (text == nullptr || !text->is_string()) return std::nullopt;
    return json::object{{"type", "text"}, {"text", text->get_string()}};
  }
  if (t == "input_image") {
    const json::value* url = p->if_contains("image_url");
    if (url == nullptr || !url->is_string()) return std::nullopt;
    return json::object{{"type", "image_url"}, {"image_url", json::object{{"url", url->get_string()}}}};
  }
  return std::nullopt;
}

// One input item as a chat message; null when it is not a message the router can read.
std::optional<json::object> chat_message(const json::value& item) {
  const json::object* m = item.if_object();
  if (m == nullptr) return std::nullopt;
  if (const json::value* type = m->if_contains("type"); type != nullptr && *type != "message") {
    return std::nullopt;
  }
  const json::value* role = m->if_contains("role");
  const json::value* content = m->if_contains("content");
  if (role == nullptr || !role->is_string() || content == nullptr) return std::nullopt;
  if (content->is_string()) return json::object{{"role", role->get_string()}, {"content", content->get_string()}};
  if (!content->is_array()) return std::nullopt;
  json::array parts;
  for (const json::value& part : content->get_array()) {
    std::optional<json::object> p = chat_part(part);
    if (!p) return std::nullopt;
    parts.push_back(std::move(*p));
  }
  return json::object{{"role", role->get_string()}, {"content", std::move(parts)}};
}

}  // namespace

Result<ResponsesPrompt> parse_responses_prompt(const json::object& body, uint32_t max_messages,
                                               std::string* param) {
  ResponsesPrompt out;
  const json::value* input = present(body, "input");
  if (input == nullptr) return field_error(param, "input", "'input' is required");
  if (!input->is_string() && !input->is_array()) {
    return field_error(param, "input", "'input' must be a string or a list of items");
  }
  if (input->is_array() && input->get_array().size() > max_messages) {
    return field_error(param, "input", "too many input items (" +
                                           std::to_string(input->get_array().size()) + " > " +
                                           std::to_string(max_messages) + ")");
  }
  if (const json::value* prev = present(body, "previous_response_id")) {
    if (!prev->is_string() || prev->get_string().size() > 256) {
      return field_error(param, "previous_response_id", "'previous_response_id' must be a string");
    }
    out.previous_response_id = std::string(prev->get_string());
    return out;
  }
  if (present(body, "tools") != nullptr) return out;
  ChatPrompt c;
  if (const json::value* instructions = present(body, "instructions"); instructions != nullptr) {
    if (!instructions->is_string()) {
      return field_error(param, "instructions", "'instructions' must be a string");
    }
    c.messages.push_back(json::object{{"role", "system"}, {"content", instructions->get_string()}});
  }
  if (input->is_string()) {
    c.messages.push_back(json::object{{"role", "user"}, {"content", input->get_string()}});
  } else {
    for (const json::value& item : input->get_array()) {
      std::optional<json::object> m = chat_message(item);
      if (!m) return out;  // an item the router cannot read: the prompt is the worker's alone
      c.messages.push_back(std::move(*m));
    }
  }
  if (c.messages.empty()) return field_error(param, "input", "'input' must not be empty");
  out.chat = std::move(c);
  return out;
}

json::array flatten_content(const json::array& messages) {
  json::array out = messages;
  for (json::value& m : out) {
    if (!m.is_object()) continue;
    json::value* content = m.get_object().if_contains("content");
    if (content == nullptr || !content->is_array()) continue;
    std::string text;
    bool first = true;
    for (const json::value& part : content->get_array()) {
      const json::object* p = part.if_object();
      if (p == nullptr) continue;
      const json::value* type = p->if_contains("type");
      const json::value* t = p->if_contains("text");
      if (type && type->is_string() && type->get_string() == "text" && t && t->is_string()) {
        if (!first) text.push_back('\n');
        text.append(t->get_string().data(), t->get_string().size());
        first = false;
      }
    }
    *content = json::string(text);
  }
  return out;
}

MediaParts media_parts(const json::array& messages) {
  MediaParts out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json::object* o = messages[i].if_object();
    const json::value* content = o != nullptr ? o->if_contains("content") : nullptr;
    if (content == nullptr || !content->is_array()) continue;
    for (const json::value& part : content->get_array()) {
      const json::object* p = part.if_object();
      const json::value* type = p != nullptr ? p->if_contains("type") : nullptr;
      if (type != nullptr && type->is_string() && type->get_string() == "text") continue;
      if (out.bytes.empty()) out.first_message = i;
      out.bytes += json::serialize(part);  // a part that is not an object counts: never a false hit
      out.bytes.push_back('\n');
    }
  }
  return out;
}

// transformers' apply_chat_template (tokenization_utils_base.py / utils/chat_template_utils.py),
// continue_final_message: the final message's text is the string content, or the last part
// that has a "text"; the prompt ends at the last occurrence of that text, stripped, keeping the
// text's trailing whitespace when the template kept it (and the text has no leading whitespace).
Result<std::string> cut_after_final_message(std::string rendered, const json::array& messages) {
  std::string_view final_text;
  const json::object* last = messages.empty() ? nullptr : messages.back().if_object();
  const json::value* content = last != nullptr ? last->if_contains("content") : nullptr;
  if (content != nullptr && content->is_string()) {
    final_text = content->get_string();
  } else if (content != nullptr && content->is_array()) {
    bool found = false;
    const json::array& parts = content->get_array();
    for (auto it = parts.rbegin(); it != parts.rend() && !found; ++it) {
      const json::object* p = it->if_object();
      const json::value* t = p != nullptr ? p->if_contains("text") : nullptr;
      if (t != nullptr && t->is_string()) {
        final_text = t->get_string();
        found = true;
      }
    }
    if (!found) {
      return invalid_argument(
          "continue_final_message is set but the final message has no text to continue");
    }
  }
  const std::string_view stripped = strip(final_text, true, true);
  if (stripped.empty()) return rendered;
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos) {
    return invalid_argument(
        "continue_final_message is set but the final message does not appear in the chat "
        "template's output");
  }
  const size_t kept = strip(final_text, true, false).size();
  const bool template_kept_spacing = std::string_view(rendered).substr(at, kept) == final_text;
  rendered.resize(at + (template_kept_spacing ? kept : stripped.size()));
  return rendered;
}

}  // namespace infera::tokenizer
