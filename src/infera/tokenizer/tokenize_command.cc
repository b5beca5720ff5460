#include "infera/tokenizer/tokenize_command.h"

#include <cstring>

#include <boost/json.hpp>

#include "infera/config/flags.h"
#include "infera/tokenizer/prompt_encoder.h"

namespace infera::tokenizer {
namespace json = boost::json;

namespace {

constexpr size_t kMaxLineBytes = 64 << 20;  // one input line (a 100k-token document is ~400 kB)
constexpr uint32_t kMaxMessages = 1u << 20;  // a line's messages; the line's size bounds them

Result<json::object> tokenize_one(const PromptEncoder& encoder, bool add_special_tokens,
                                  std::string_view line) {
  std::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec || !v.is_object()) return invalid_argument("each line must be a JSON object");
  const json::object& o = v.as_object();
  json::object result;
  EncodedPrompt encoded;
  if (const auto* text = o.if_contains("text")) {
    if (!text->is_string()) return invalid_argument("\"text\" must be a string");
    INFERA_ASSIGN_OR_RETURN(encoded, encoder.encode_text(text->as_string(), add_special_tokens));
  } else if (o.contains("messages")) {
    // The chat fields of a chat completions request, read by the parser the gateway and the
    // engine use.
    INFERA_ASSIGN_OR_RETURN(ChatPrompt chat, parse_chat_prompt(o, kMaxMessages));
    INFERA_ASSIGN_OR_RETURN(encoded, encoder.encode_chat(chat));
  } else {
    return invalid_argument("a line needs \"text\" or \"messages\"");
  }
  json::array ids;
  ids.reserve(encoded.ids.size());
  for (TokenId id : encoded.ids) ids.push_back(id);
  result["ids"] = std::move(ids);
  if (o.contains("messages")) result["prompt"] = encoded.rendered;
  return result;
}

// Reads one line of any length up to kMaxLineBytes; false at end of input.
bool read_line(std::FILE* in, std::string& line, bool& too_long) {
  line.clear();
  too_long = false;
  char buf[65536];
  bool any = false;
  while (std::fgets(buf, sizeof buf, in) != nullptr) {
    any = true;
    const size_t n = std::strlen(buf);
    if (line.size() + n <= kMaxLineBytes) {
      line.append(buf, n);
    } else {
      too_long = true;
    }
    if (n > 0 && buf[n - 1] == '\n') break;
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return any;
}

}  // namespace

int tokenize_lines(const PromptEncoder& encoder, bool add_special_tokens, std::FILE* in,
                   std::FILE* out) {
  int rc = 0;
  std::string line;
  bool too_long = false;
  while (read_line(in, line, too_long)) {
    if (!too_long && line.find_first_not_of(" \t") == std::string::npos) continue;
    Result<json::object> r = too_long ? Result<json::object>(invalid_argument("line too long"))
                                      : tokenize_one(encoder, add_special_tokens, line);
    std::string text;
    if (r.ok()) {
      text = json::serialize(*r);
    } else {
      rc = 1;
      text = json::serialize(json::object{{"error", r.status().message()}});
    }
    text.push_back('\n');
    std::fwrite(text.data(), 1, text.size(), out);
  }
  std::fflush(out);
  return rc;
}

int run_tokenize_command(std::span<const std::string> args) {
  std::string path;
  bool add_special_tokens = false;
  config::FlagSet f(
      "usage: infera tokenize --tokenizer PATH_OR_ID [--add-special-tokens] < in.jsonl > out.jsonl\n"
      "One JSON object per input line: {\"text\": \"...\"} or {\"messages\": [...], \"tools\": "
      "[...],\n\"add_generation_prompt\": true, \"chat_template_kwargs\": {...}}. One JSON object "
      "per output line:\n{\"ids\": [...]} plus \"prompt\" (the rendered chat) for messages. The "
      "same code the router uses.\n");
  f.add("--tokenizer", &path,
        "a directory with tokenizer.json (and tokenizer_config.json for chat), or a Hugging Face "
        "id in the local cache",
        "PATH_OR_ID");
  f.add("--add-special-tokens", &add_special_tokens,
        "add the post-processor's special tokens to text (rendered chat never gets them)", "");
  f.enable_config_sources(config::process_config_sources());
  if (Status s = f.parse(args); !s.ok()) {
    std::fprintf(stderr, "infera tokenize: %s\n", s.message().c_str());
    return 2;
  }
  if (f.help_requested()) {
    std::printf("%s", f.help().c_str());
    return 0;
  }
  if (path.empty()) {
    std::fprintf(stderr, "infera tokenize: --tokenizer is required\n");
    return 2;
  }
  auto encoder = PromptEncoder::load(path);
  if (!encoder.ok()) {
    std::fprintf(stderr, "infera tokenize: %s\n", encoder.status().message().c_str());
    return 2;
  }
  return tokenize_lines(**encoder, add_special_tokens, stdin, stdout);
}

}  // namespace infera::tokenizer
