#include "infera/engine/text_codec.h"

#include <xxhash.h>

#include <array>
#include <boost/json/parse.hpp>
#include <fstream>
#include <sstream>
#include <system_error>

#include "infera/common/log.h"
#include "infera/tokenizer/model_dir.h"
#include "infera/tokenizer/tokenizer.h"

namespace infera::engine {
namespace {

namespace json = boost::json;

// ---------------------------------------------------------------------------------------------
// TokenizerCodec

class TokenizerCodec final : public TextCodec {
 public:
  TokenizerCodec(std::filesystem::path dir, std::unique_ptr<tokenizer::Tokenizer> tok,
                 std::optional<jinja::ChatTemplate> chat, std::string chat_error, TokenId eos)
      : dir_(std::move(dir)),
        tok_(std::move(tok)),
        chat_(std::move(chat)),
        chat_error_(std::move(chat_error)),
        eos_(eos),
        vocab_size_(static_cast<uint32_t>(tok_->vocab_size())) {}

  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens) const override {
    return tok_->encode(text, add_special_tokens);
  }
  Result<std::string> render_chat(const jinja::ChatInputs& inputs) const override {
    if (!chat_) return invalid_argument(chat_error_);
    return chat_->render(inputs);
  }
  std::string decode(std::span<const TokenId> ids) const override {
    return tok_->decode(ids, /*skip_special_tokens=*/true);
  }
  std::optional<std::string> token_string(TokenId id) const override {
    return tok_->id_to_token(id);
  }
  uint32_t vocab_size() const override { return vocab_size_; }
  TokenId eos_token_id() const override { return eos_; }
  std::string describe() const override { return "tokenizer " + dir_.string(); }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::optional<jinja::ChatTemplate> chat_;
  std::string chat_error_;
  TokenId eos_;
  uint32_t vocab_size_;
};

// The EOS token's string from tokenizer_config.json (a string or {"content": ...}).
std::optional<std::string> eos_token_of(const std::filesystem::path& config_path) {
  std::ifstream in(config_path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  boost::system::error_code ec;
  const json::value v = json::parse(buffer.str(), ec);
  if (ec || !v.is_object()) return std::nullopt;
  const json::value* eos = v.get_object().if_contains("eos_token");
  if (eos == nullptr) return std::nullopt;
  if (eos->is_string()) return std::string(eos->get_string());
  if (eos->is_object()) {
    const json::value* content = eos->get_object().if_contains("content");
    if (content != nullptr && content->is_string()) return std::string(content->get_string());
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// SyntheticCodec

// Output words of the synthetic codec: id -> " " + kWords[id % size].
constexpr std::array<std::string_view, 64> kWords = {
    "the",     "of",     "and",    "to",      "in",      "a",       "is",     "that",
    "for",     "it",     "as",     "was",     "with",    "be",      "by",     "on",
    "not",     "he",     "this",   "are",     "or",      "his",     "from",   "at",
    "which",   "but",    "have",   "an",      "had",     "they",    "you",    "were",
    "cache",   "block",  "token",  "prefix",  "router",  "engine",  "worker", "stream",
    "request", "model",  "event",  "latency", "batch",   "queue",   "memory", "step",
    "river",   "stone",  "light",  "garden",  "window",  "morning", "silver", "forest",
    "harbor",  "letter", "violet", "thunder", "meadow",  "lantern", "orbit",  "quiet"};

class SyntheticCodec final : public TextCodec {
 public:
  SyntheticCodec(uint32_t vocab_size, TokenId eos) : vocab_size_(vocab_size), eos_(eos) {}

  // One id per piece: a run of whitespace followed by a run of non-whitespace (roughly one
  // token per word, like a BPE tokenizer on English).
  std::vector<TokenId> encode(std::string_view text, bool /*add_special_tokens*/) const override {
    std::vector<TokenId> ids;
    ids.reserve(text.size() / 5 + 1);
    size_t i = 0;
    while (i < text.size()) {
      const size_t start = i;
      while (i < text.size() && is_space(text[i])) ++i;
      while (i < text.size() && !is_space(text[i])) ++i;
      const uint64_t h = XXH3_64bits(text.data() + start, i - start);
      auto id = static_cast<TokenId>(h % vocab_size_);
      if (id == eos_) id = (id + 1) % vocab_size_;
      ids.push_back(id);
    }
    return ids;
  }

  // ChatML: <|im_start|>role\ncontent<|im_end|>\n per message, then the assistant's header.
  Result<std::string> render_chat(const jinja::ChatInputs& inputs) const override {
    std::string out;
    for (const json::value& m : inputs.messages) {
      const json::object* msg = m.if_object();
      const json::value* role = msg ? msg->if_contains("role") : nullptr;
      if (role == nullptr || !role->is_string()) {
        return invalid_argument("each message must be an object with a string 'role'");
      }
      out += "<|im_start|>";
      out += role->get_string();
      out += '\n';
      if (const json::value* content = msg->if_contains("content"); content != nullptr) {
        if (content->is_string()) {
          out += content->get_string();
        } else if (content->is_array()) {
          for (const json::value& part : content->get_array()) {
            const json::object* p = part.if_object();
            const json::value* t = p ? p->if_contains("text") : nullptr;
            if (t != nullptr && t->is_string()) out += t->get_string();
          }
        }
      }
      out += "<|im_end|>\n";
    }
    if (inputs.add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }

  std::string decode(std::span<const TokenId> ids) const override {
    std::string out;
    for (const TokenId id : ids) {
      if (id == eos_) continue;  // a special token: skipped
      out += ' ';
      out += kWords[id % kWords.size()];
    }
    return out;
  }
  std::optional<std::string> token_string(TokenId id) const override {
    if (id >= vocab_size_) return std::nullopt;
    if (id == eos_) return std::string("</s>");
    return "\u2581" + std::string(kWords[id % kWords.size()]);
  }
  uint32_t vocab_size() const override { return vocab_size_; }
  TokenId eos_token_id() const override { return eos_; }
  bool independent_tokens() const override { return true; }
  std::string describe() const override { return "synthetic"; }

 private:
  static bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
  }
  uint32_t vocab_size_;
  TokenId eos_;
};

// Whether `text` ends inside a UTF-8 character, or with the U+FFFD a decoder puts for one.
bool ends_incomplete(std::string_view text) {
  if (text.ends_with("\xEF\xBF\xBD")) return true;
  // A lead byte without all its continuation bytes.
  size_t n = 0;  // continuation bytes at the end
  while (n < text.size() && n < 3 &&
         (static_cast<unsigned char>(text[text.size() - 1 - n]) & 0xC0) == 0x80) {
    ++n;
  }
  if (n == text.size()) return n > 0;
  const auto lead = static_cast<unsigned char>(text[text.size() - 1 - n]);
  size_t need = 0;
  if ((lead & 0xE0) == 0xC0) {
    need = 1;
  } else if ((lead & 0xF0) == 0xE0) {
    need = 2;
  } else if ((lead & 0xF8) == 0xF0) {
    need = 3;
  }
  return need > n;
}

}  // namespace

Result<std::unique_ptr<TextCodec>> load_tokenizer_codec(std::string_view path_or_id) {
  INFERA_ASSIGN_OR_RETURN(std::filesystem::path dir, tokenizer::resolve_model_dir(path_or_id));
  INFERA_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok,
                          tokenizer::Tokenizer::from_file(dir / "tokenizer.json"));
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  std::optional<jinja::ChatTemplate> chat;
  std::string chat_error;
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    auto loaded = jinja::ChatTemplate::from_file(config_path);
    if (loaded.ok()) {
      chat.emplace(std::move(*loaded));
    } else {
      chat_error = "this model has no usable chat template: " + loaded.status().message();
      INFERA_LOG(kWarn, "engine").msg("no chat template").kv("error", loaded.status().message());
    }
  } else {
    chat_error = "this model has no chat template (no tokenizer_config.json in " + dir.string() + ")";
  }
  std::optional<TokenId> eos;
  if (auto name = eos_token_of(config_path)) eos = tok->token_to_id(*name);
  for (const char* name : {"</s>", "<|endoftext|>", "<eos>", "<|end_of_text|>"}) {
    if (eos) break;
    eos = tok->token_to_id(name);
  }
  return std::unique_ptr<TextCodec>(
      new TokenizerCodec(dir, std::move(tok), std::move(chat), std::move(chat_error), eos.value_or(0)));
}

std::unique_ptr<TextCodec> make_synthetic_codec(uint32_t vocab_size, TokenId eos_token_id) {
  INFERA_CHECK(vocab_size >= 2);
  return std::make_unique<SyntheticCodec>(vocab_size, eos_token_id);
}

// vLLM vllm/transformers_utils/detokenizer_utils.py detokenize_incrementally, on ids: the
// window ids[prefix_offset:read_offset] is text already emitted; decoding it together with the
// new ids and cutting its length off yields the new text with the right spacing and merges.
std::string OutputDetokenizer::next(TokenId token) {
  if (codec_.independent_tokens()) {
    const TokenId one[] = {token};
    return codec_.decode(one);
  }
  ids_.push_back(token);
  const std::span<const TokenId> all(ids_);
  const std::string prefix_text =
      codec_.decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_));
  std::string new_text = codec_.decode(all.subspan(prefix_offset_));
  if (new_text.size() > prefix_text.size() && !ends_incomplete(new_text)) {
    new_text.erase(0, prefix_text.size());
    prefix_offset_ = read_offset_;
    read_offset_ = ids_.size();
    // Keep the buffer short: nothing before prefix_offset_ is read again.
    if (prefix_offset_ > 64) {
      ids_.erase(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(prefix_offset_));
      read_offset_ -= prefix_offset_;
      prefix_offset_ = 0;
    }
    return new_text;
  }
  return {};
}

std::string OutputDetokenizer::flush() {
  if (codec_.independent_tokens() || read_offset_ == ids_.size()) return {};
  const std::span<const TokenId> all(ids_);
  const std::string prefix_text =
      codec_.decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_));
  std::string new_text = codec_.decode(all.subspan(prefix_offset_));
  read_offset_ = ids_.size();
  if (new_text.size() <= prefix_text.size()) return {};
  new_text.erase(0, prefix_text.size());
  return new_text;
}

}  // namespace infera::engine
