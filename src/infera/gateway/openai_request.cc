#include "infera/gateway/openai_request.h"

#include <boost/json.hpp>

namespace infera::gateway {
namespace json = boost::json;
namespace {

Status field_error(std::string* param, std::string_view field, std::string message) {
  if (param) *param = std::string(field);
  return invalid_argument(std::move(message));
}

// Token ids: non-negative integers below 2^32.
bool read_ids(const json::array& a, std::vector<uint32_t>& out) {
  out.clear();
  out.reserve(a.size());
  for (const json::value& v : a) {
    if (v.is_uint64() && v.get_uint64() <= UINT32_MAX) {
      out.push_back(static_cast<uint32_t>(v.get_uint64()));
    } else if (v.is_int64() && v.get_int64() >= 0 && v.get_int64() <= UINT32_MAX) {
      out.push_back(static_cast<uint32_t>(v.get_int64()));
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

Result<OpenAiRequest> parse_openai_request(ApiKind kind, std::string_view body,
                                           const RequestLimits& limits, std::string* param) {
  json::parse_options opts;
  opts.max_depth = limits.max_json_depth;
  boost::system::error_code ec;
  json::value root = json::parse(body, ec, {}, opts);
  if (ec) {
    if (ec == json::error::too_deep) {
      return invalid_argument("request JSON nests deeper than " +
                              std::to_string(limits.max_json_depth) + " levels");
    }
    return invalid_argument("request body is not valid JSON: " + ec.message());
  }
  if (!root.is_object()) return invalid_argument("request body must be a JSON object");
  const json::object& o = root.get_object();
  OpenAiRequest r;
  r.kind = kind;

  if (const json::value* m = o.if_contains("model"); m && !m->is_null()) {
    if (!m->is_string()) return field_error(param, "model", "'model' must be a string");
    r.model = std::string(m->get_string());
  }
  if (const json::value* s = o.if_contains("stream"); s && !s->is_null()) {
    if (!s->is_bool()) return field_error(param, "stream", "'stream' must be a boolean");
    r.stream = s->get_bool();
  }
  if (const json::value* a = o.if_contains("add_special_tokens"); a && !a->is_null()) {
    if (!a->is_bool()) {
      return field_error(param, "add_special_tokens", "'add_special_tokens' must be a boolean");
    }
    r.add_special_tokens = a->get_bool();
  }

  if (kind == ApiKind::kCompletions) {
    const json::value* p = o.if_contains("prompt");
    if (!p || p->is_null()) return field_error(param, "prompt", "'prompt' is required");
    if (p->is_string()) {
      r.prompt_text = std::string(p->get_string());
      r.num_prompts = 1;
    } else if (p->is_array()) {
      const json::array& a = p->get_array();
      if (a.empty()) return field_error(param, "prompt", "'prompt' must not be empty");
      if (a[0].is_string()) {
        for (const json::value& x : a) {
          if (!x.is_string()) {
            return field_error(param, "prompt", "'prompt' mixes strings and other types");
          }
        }
        r.prompt_text = std::string(a[0].get_string());
        r.num_prompts = static_cast<uint32_t>(a.size());
      } else if (a[0].is_array()) {
        for (const json::value& x : a) {
          if (!x.is_array() || !read_ids(x.get_array(), r.prompt_ids)) {
            return field_error(param, "prompt", "'prompt' must be token id lists");
          }
        }
        read_ids(a[0].get_array(), r.prompt_ids);
        r.num_prompts = static_cast<uint32_t>(a.size());
      } else if (read_ids(a, r.prompt_ids)) {
        r.num_prompts = 1;
      } else {
        return field_error(param, "prompt",
                           "'prompt' must be a string, a list of strings, token ids, or lists of "
                           "token ids");
      }
      if (r.prompt_ids.size() > limits.max_prompt_tokens) {
        return field_error(param, "prompt",
                           "prompt has " + std::to_string(r.prompt_ids.size()) +
                               " tokens, more than the limit of " +
                               std::to_string(limits.max_prompt_tokens));
      }
    } else {
      return field_error(param, "prompt", "'prompt' must be a string or an array");
    }
    if (r.prompt_text && r.prompt_text->empty() && r.num_prompts == 1) {
      return field_error(param, "prompt", "'prompt' must not be empty");
    }
    return r;
  }

  // Chat completions.
  r.add_special_tokens = false;
  const json::value* msgs = o.if_contains("messages");
  if (!msgs || msgs->is_null()) return field_error(param, "messages", "'messages' is required");
  if (!msgs->is_array()) return field_error(param, "messages", "'messages' must be an array");
  const json::array& a = msgs->get_array();
  if (a.empty()) return field_error(param, "messages", "'messages' must not be empty");
  if (a.size() > limits.max_messages) {
    return field_error(param, "messages",
                       "too many messages (" + std::to_string(a.size()) + " > " +
                           std::to_string(limits.max_messages) + ")");
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const json::value& m = a[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return field_error(param, where, where + " must be an object");
    const json::value* role = m.get_object().if_contains("role");
    if (!role || !role->is_string()) {
      return field_error(param, where + ".role", where + ".role must be a string");
    }
    const json::value* content = m.get_object().if_contains("content");
    if (content && !content->is_null() && !content->is_string() && !content->is_array()) {
      return field_error(param, where + ".content",
                         where + ".content must be a string or a list of parts");
    }
  }
  r.messages = a;
  if (const json::value* t = o.if_contains("tools"); t && !t->is_null()) {
    if (!t->is_array()) return field_error(param, "tools", "'tools' must be an array");
    r.tools = t->get_array();
  }
  if (const json::value* g = o.if_contains("add_generation_prompt"); g && !g->is_null()) {
    if (!g->is_bool()) {
      return field_error(param, "add_generation_prompt", "'add_generation_prompt' must be a boolean");
    }
    r.add_generation_prompt = g->get_bool();
  }
  if (const json::value* c = o.if_contains("continue_final_message"); c && c->is_bool()) {
    r.continue_final_message = c->get_bool();
  }
  if (const json::value* k = o.if_contains("chat_template_kwargs"); k && !k->is_null()) {
    if (!k->is_object()) {
      return field_error(param, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    }
    r.chat_template_kwargs = k->get_object();
  }
  r.num_prompts = 1;
  return r;
}

}  // namespace infera::gateway
