// libFuzzer target: parse arbitrary bytes as a template and render it with a fixed chat context
// (messages with tool calls and list content, tools, special tokens) under tight limits. Any
// input must end in a Result, never a crash, a hang or unbounded memory.
// Seed corpus: tests/testdata/chat/fuzz_corpus/ (the real Qwen3 / Llama 3 / Gemma 3 chat
// templates and the small templates of tests/testdata/chat/templates/).
#include <boost/json/parse.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "infera/jinja/template.h"

namespace {

const boost::json::object& context() {
  static const boost::json::object kContext = boost::json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": [{"type": "text", "text": "Look"}, {"type": "image"}]},
      {"role": "assistant", "content": "<think>\nhm\n</think>\n\nSure.", "reasoning_content": "r"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
        {"type": "function", "function": {"name": "g", "arguments": {"x": [1, 2.5, null, true]}}}]},
      {"role": "tool", "content": "{\"ok\": true}", "tool_call_id": "c1"},
      {"role": "user", "content": "héllo 🌍 \u0000 end"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "documents": null,
    "add_generation_prompt": true,
    "enable_thinking": false,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "additional_special_tokens": ["<a>", "<b>"]
  })")
                                                  .as_object();
  return kContext;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto t = infera::jinja::Template::parse(source);
  if (!t.ok()) return 0;
  infera::jinja::Limits limits;
  limits.max_steps = 100'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_memory_bytes = 32 << 20;
  limits.max_call_depth = 32;
  auto r = t->render(context(), limits, std::chrono::system_clock::time_point{});
  (void)r;
  return 0;
}
