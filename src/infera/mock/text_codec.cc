#include "infera/mock/text_codec.h"

#include <xxhash.h>

#include <array>
#include <boost/json/parse.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "infera/common/log.h"
#include "infera/tokenizer/prompt_encoder.h"
#include "infera/tokenizer/tokenizer.h"

namespace infera::mock {

using engine::TokenId;

namespace {

namespace json = boost::json;

// ---------------------------------------------------------------------------------------------
// TokenizerCodec

class TokenizerCodec final : public TextCodec {
 public:
  TokenizerCodec(std::unique_ptr<tokenizer::PromptEncoder> encoder, TokenId eos)
      : encoder_(std::move(encoder)),
        eos_(eos),
        vocab_size_(static_cast<uint32_t>(encoder_->tokenizer().vocab_size())) {}

  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens) const override {
    return std::move(encoder_->encode_text(text, add_special_tokens)->ids);
  }
  Result<std::vector<TokenId>> encode_chat(const tokenizer::ChatPrompt& chat) const override {
    INFERA_ASSIGN_OR_RETURN(tokenizer::EncodedPrompt encoded, encoder_->encode_chat(chat));
    return std::move(encoded.ids);
  }
  std::string decode(std::span<const TokenId> ids) const override {
    return encoder_->tokenizer().decode(ids, /*skip_special_tokens=*/true);
  }
  std::optional<std::string> token_string(TokenId id) const override {
    return encoder_->tokenizer().id_to_token(id);
  }
  uint32_t vocab_size() const override { return vocab_size_; }
  TokenId eos_token_id() const override { return eos_; }
  std::string describe() const override { return "tokenizer " + encoder_->directory().string(); }

 private:
  std::unique_ptr<tokenizer::PromptEncoder> encoder_;
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

  // ChatML: <|im_start|>role\ncontent<|im_end|>\n per message, then the assistant's header;
  // list content and continue_final_message as the tokenizer codec treats them for a template
  // that expects strings.
  Result<std::vector<TokenId>> encode_chat(const tokenizer::ChatPrompt& chat) const override {
    const json::array messages = tokenizer::flatten_content(chat.messages);
    std::string out;
    for (const json::value& m : messages) {
      const json::object* msg = m.if_object();
      const json::value* role = msg ? msg->if_contains("role") : nullptr;
      if (role == nullptr || !role->is_string()) {
        return invalid_argument("each message must be an object with a string 'role'");
      }
      out += "<|im_start|>";
      out += role->get_string();
      out += '\n';
      if (const json::value* content = msg->if_contains("content");
          content != nullptr && content->is_string()) {
        out += content->get_string();
      }
      out += "<|im_end|>\n";
    }
    if (chat.add_generation_prompt) out += "<|im_start|>assistant\n";
    if (chat.continue_final_message) {
      INFERA_ASSIGN_OR_RETURN(out, tokenizer::cut_after_final_message(std::move(out), messages));
    }
    return encode(out, chat.add_special_tokens);
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
  INFERA_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::PromptEncoder> encoder,
                          tokenizer::PromptEncoder::load(path_or_id));
  if (!encoder->has_chat_template()) {
    INFERA_LOG(kWarn, "engine")
        .msg("no chat template; chat requests are answered 400")
        .kv("tokenizer", encoder->directory().string());
  }
  const tokenizer::Tokenizer& tok = encoder->tokenizer();
  std::optional<TokenId> eos;
  if (auto name = eos_token_of(encoder->directory() / "tokenizer_config.json")) {
    eos = tok.token_to_id(*name);
  }
  for (const char* name : {"</s>", "<|endoftext|>", "<eos>", "<|end_of_text|>"}) {
    if (eos) break;
    eos = tok.token_to_id(name);
  }
  return std::unique_ptr<TextCodec>(new TokenizerCodec(std::move(encoder), eos.value_or(0)));
}

std::unique_ptr<TextCodec> make_synthetic_codec(uint32_t vocab_size, TokenId eos_token_id) {
  INFERA_CHECK(vocab_size >= 2);
  return std::make_unique<SyntheticCodec>(vocab_size, eos_token_id);
}

Status TextCodec::check_ids(std::span<const TokenId> ids) const {
  for (const TokenId id : ids) {
    if (id >= vocab_size()) {
      return invalid_argument("Token id " + std::to_string(id) + " is out of vocabulary");
    }
  }
  return ok_status();
}

Result<std::vector<PreparedPrompt>> prepare_prompts(const TextCodec& codec,
                                                    const GenerateRequest& r, std::string* param) {
  std::vector<PreparedPrompt> out;
  if (r.kind == ApiKind::kChat) {
    *param = "messages";
    PreparedPrompt p;
    INFERA_ASSIGN_OR_RETURN(p.ids, codec.encode_chat(r.chat));
    out.push_back(std::move(p));
  } else {
    *param = "prompt";
    for (const PromptInput& in : r.prompts) {
      PreparedPrompt p;
      if (in.text) {
        p.ids = codec.encode(*in.text, r.add_special_tokens);
        if (r.echo) p.echo_text = *in.text;
      } else {
        INFERA_RETURN_IF_ERROR(codec.check_ids(in.ids));
        p.ids = in.ids;
        if (r.echo) p.echo_text = codec.decode(p.ids);
      }
      out.push_back(std::move(p));
    }
  }
  for (const PreparedPrompt& p : out) {
    if (p.ids.empty()) return invalid_argument("the prompt must not be empty");
  }
  param->clear();
  return out;
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

}  // namespace infera::mock
