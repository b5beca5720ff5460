// Chat rendering cost: the real Qwen3 template (and Llama 3 / Gemma 3 for comparison) on a
// 20-turn conversation, plus parsing the Qwen3 template. The tokenizer configs come from the
// `extract_tokenizers` test (run `ctest -R extract_tokenizers` in the build directory first) or
// from $INFERA_MODELS_DIR.
#include <benchmark/benchmark.h>

#include <boost/json/parse.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "infera/jinja/chat.h"

namespace infera::jinja {
namespace {

std::filesystem::path models_dir() {
  if (const char* env = std::getenv("INFERA_MODELS_DIR")) return env;
  return INFERA_MODELS_DIR;
}

std::string sentence(int turn, int words) {
  static const char* kWords[] = {"the",     "router", "hashes",  "prefix", "blocks", "of", "every",
                                 "request", "and",    "sends",   "it",     "to",     "a",  "worker",
                                 "whose",   "cache",  "already", "holds",  "them"};
  std::string s;
  for (int i = 0; i < words; ++i) {
    if (i > 0) s += ' ';
    s += kWords[(turn * 7 + i) % 19];
  }
  return s + ".";
}

// A system prompt and 20 user/assistant exchanges (~60 words per message); with_tools adds a
// tool schema, a tool call and its result every fifth turn, and reasoning on the last answers.
ChatInputs conversation(bool with_tools) {
  ChatInputs in;
  in.messages.push_back(
      boost::json::object{{"role", "system"}, {"content", "You are a concise assistant."}});
  for (int turn = 0; turn < 20; ++turn) {
    in.messages.push_back(boost::json::object{{"role", "user"}, {"content", sentence(turn, 60)}});
    if (with_tools && turn % 5 == 4) {
      in.messages.push_back(boost::json::parse(
          R"({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
             {"name": "search", "arguments": {"query": "kv cache", "top_k": 3}}}]})"));
      in.messages.push_back(boost::json::object{{"role", "tool"}, {"content", sentence(turn, 30)}});
    }
    boost::json::object answer{{"role", "assistant"}, {"content", sentence(turn + 3, 60)}};
    if (with_tools && turn >= 18) answer["reasoning_content"] = sentence(turn + 5, 20);
    in.messages.push_back(std::move(answer));
  }
  in.add_generation_prompt = true;
  if (with_tools) {
    in.tools = boost::json::array{boost::json::parse(
        R"({"type": "function", "function": {"name": "search", "description": "Search the documents.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"},
            "top_k": {"type": "integer", "default": 5}}, "required": ["query"]}}})")};
  }
  return in;
}

void render_model(benchmark::State& state, const char* model, bool with_tools) {
  auto chat = ChatTemplate::from_file(models_dir() / model / "tokenizer_config.json");
  if (!chat.ok()) {
    state.SkipWithError(chat.status().to_string().c_str());
    return;
  }
  const ChatInputs in = conversation(with_tools);
  size_t bytes = 0;
  for (auto _ : state) {
    auto r = chat->render(in);
    if (!r.ok()) {
      state.SkipWithError(r.status().to_string().c_str());
      return;
    }
    bytes = r->size();
    benchmark::DoNotOptimize(r->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["prompt_bytes"] = static_cast<double>(bytes);
}

void BM_RenderQwen3_20Turns(benchmark::State& state) {
  render_model(state, "qwen3", false);
}
void BM_RenderQwen3_20TurnsTools(benchmark::State& state) {
  render_model(state, "qwen3", true);
}
void BM_RenderLlama3_20Turns(benchmark::State& state) {
  render_model(state, "llama3", false);
}
void BM_RenderGemma3_20Turns(benchmark::State& state) {
  render_model(state, "gemma3", false);
}
BENCHMARK(BM_RenderQwen3_20Turns)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RenderQwen3_20TurnsTools)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RenderLlama3_20Turns)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RenderGemma3_20Turns)->Unit(benchmark::kMicrosecond);

void BM_ParseQwen3Template(benchmark::State& state) {
  std::ifstream in(models_dir() / "qwen3" / "tokenizer_config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  boost::system::error_code ec;
  const boost::json::value config = boost::json::parse(text, ec);
  if (ec || !config.is_object() || !config.as_object().contains("chat_template")) {
    state.SkipWithError("qwen3 tokenizer_config.json not found");
    return;
  }
  const std::string source(config.at("chat_template").as_string());
  for (auto _ : state) {
    auto t = Template::parse(source);
    benchmark::DoNotOptimize(t.ok());
  }
}
BENCHMARK(BM_ParseQwen3Template)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infera::jinja

BENCHMARK_MAIN();
