// libFuzzer target for the gateway's OpenAI request parsing (parse_openai_request): untrusted
// client JSON, both endpoints' shapes, with tight limits so depth, message and prompt limits are
// reached. It must never crash, throw or hang, and an accepted request must respect the limits.
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
  if (!parsed.ok()) return 0;
  const auto& r = *parsed;
  if (r.kind != kind) std::abort();
  if (r.messages.size() > kLimits.max_messages) std::abort();
  if (r.prompt_ids.size() > kLimits.max_prompt_tokens) std::abort();
  if (kind == ApiKind::kChatCompletions && (r.prompt_text || !r.prompt_ids.empty())) std::abort();
  return 0;
}
