// libFuzzer target for the gateway's OpenAI request parsing (parse_openai_request): untrusted
// client JSON, both endpoints' shapes, with tight limits so depth, message and prompt limits are
// reached. It must never crash, throw or hang, an accepted request must respect the limits, and
// a completions body must read the same through the fast plain-JSON reader and Boost.JSON.
// Input: byte 0 picks the endpoint (chat or completions), the rest is the body.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "infera/gateway/openai_request.h"

namespace {

using infera::gateway::ApiKind;
using infera::gateway::RequestLimits;

constexpr RequestLimits kLimits{.max_json_depth = 16, .max_messages = 8, .max_prompt_tokens = 64};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const ApiKind kind = (data[0] & 1) != 0 ? ApiKind::kChatCompletions : ApiKind::kCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string param;
  auto parsed = infera::gateway::parse_openai_request(kind, body, kLimits, &param);
  if (kind == ApiKind::kCompletions) {
    // The fast reader for plain JSON and Boost.JSON's parser must agree on every body.
    std::string boost_param;
    auto boost = infera::gateway::detail::parse_completions_by_boost(body, kLimits, &boost_param);
    if (parsed.ok() != boost.ok()) std::abort();
    if (!parsed.ok() &&
        (parsed.status().message() != boost.status().message() || param != boost_param)) {
      std::abort();
    }
    if (parsed.ok() &&
        (parsed->model != boost->model || parsed->stream != boost->stream ||
         parsed->add_special_tokens != boost->add_special_tokens ||
         parsed->prompt_text != boost->prompt_text || parsed->prompt_ids != boost->prompt_ids ||
         parsed->num_prompts != boost->num_prompts)) {
      std::abort();
    }
  }
  if (!parsed.ok()) return 0;
  const auto& r = *parsed;
  if (r.kind != kind) std::abort();
  if (r.messages.size() > kLimits.max_messages) std::abort();
  if (r.prompt_ids.size() > kLimits.max_prompt_tokens) std::abort();
  if (kind == ApiKind::kChatCompletions && (r.prompt_text || !r.prompt_ids.empty())) std::abort();
  return 0;
}
