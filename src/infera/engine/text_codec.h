// TextCodec: how the simulated engine turns prompts into token ids and output ids into text.
// Two implementations: TokenizerCodec (--tokenizer: the tokenizer and chat-template modules, the
// very code the router uses, so the engine caches the blocks the router hashes) and
// SyntheticCodec (no tokenizer: one id per whitespace-led word, hashed; output ids become words
// of a fixed list). OutputDetokenizer streams one request's output text, holding back bytes of
// an incomplete UTF-8 character as vLLM's incremental detokenizer does.
// A codec is immutable after creation and safe from any thread; a detokenizer belongs to one
// request's handler.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"
#include "infera/engine/block_hasher.h"
#include "infera/jinja/chat.h"

namespace infera::tokenizer {
class Tokenizer;
}  // namespace infera::tokenizer

namespace infera::engine {

class TextCodec {
 public:
  virtual ~TextCodec() = default;

  // Token ids of `text`; add_special_tokens applies the post-processor (a leading BOS).
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special_tokens) const = 0;
  // The chat prompt as text (the model's chat template); InvalidArgument for template errors
  // or when the model has no chat template.
  virtual Result<std::string> render_chat(const jinja::ChatInputs& inputs) const = 0;
  // Text of `ids` (special tokens skipped).
  virtual std::string decode(std::span<const TokenId> ids) const = 0;
  // The vocabulary's string for one id (vLLM token_strs), or nullopt.
  virtual std::optional<std::string> token_string(TokenId id) const = 0;

  // Ids in [0, vocab_size()) are valid prompt ids; generated ids are drawn from that range.
  virtual uint32_t vocab_size() const = 0;
  virtual TokenId eos_token_id() const = 0;
  // Each token's text is independent of its neighbours (the synthetic codec): the detokenizer
  // then needs no context window.
  virtual bool independent_tokens() const { return false; }
  // "tokenizer <dir>" or "synthetic", for logs.
  virtual std::string describe() const = 0;
};

// Loads tokenizer.json from the directory resolve_model_dir(path_or_id) finds, and the chat
// template from tokenizer_config.json beside it when present (without one, chat requests are
// answered 400). A missing or malformed tokenizer is an error naming the path.
Result<std::unique_ptr<TextCodec>> load_tokenizer_codec(std::string_view path_or_id);

// The codec of an engine started without --tokenizer. vocab_size and eos_token_id come from the
// engine configuration.
std::unique_ptr<TextCodec> make_synthetic_codec(uint32_t vocab_size, TokenId eos_token_id);

// Incremental detokenization of one request's output (vLLM detokenize_incrementally): each
// token's text is decoded with a few tokens of context before it; text that ends inside a
// UTF-8 character is held back until the next token completes it. The concatenation of every
// delta plus flush() is the request's whole output text, so streamed and non-streamed answers
// carry the same text.
class OutputDetokenizer {
 public:
  explicit OutputDetokenizer(const TextCodec& codec) : codec_(codec) {}

  // The text that `token` adds (possibly empty).
  std::string next(TokenId token);
  // Whatever was held back, at the end of the request.
  std::string flush();

 private:
  const TextCodec& codec_;
  std::vector<TokenId> ids_;
  size_t prefix_offset_ = 0;  // start of the context window
  size_t read_offset_ = 0;    // tokens whose text was already emitted
};

}  // namespace infera::engine
