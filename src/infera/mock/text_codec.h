// TextCodec: how the simulated engine turns prompts into token ids and output ids into text.
// Two implementations: TokenizerCodec (--tokenizer: tokenizer::PromptEncoder, the very code the
// gateway hashes prompts with, so the engine caches the blocks the router hashes) and
// SyntheticCodec (no tokenizer: one id per whitespace-led word, hashed; chat as ChatML; output
// ids become words of a fixed list). prepare_prompts turns a parsed request into the core's
// prompts. OutputDetokenizer streams one request's output text, holding back bytes of an
// incomplete UTF-8 character as vLLM's incremental detokenizer does.
// A codec is immutable after creation and safe from any thread; a detokenizer belongs to one
// request's handler.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"
#include "infera/engine/block_hasher.h"
#include "infera/mock/openai_api.h"
#include "infera/tokenizer/chat_prompt.h"

namespace infera::mock {

class TextCodec {
 public:
  virtual ~TextCodec() = default;

  // Token ids of `text`; add_special_tokens applies the post-processor (a leading BOS).
  virtual std::vector<engine::TokenId> encode(std::string_view text,
                                              bool add_special_tokens) const = 0;
  // Token ids of a chat request's prompt: tokenizer::PromptEncoder::encode_chat (the gateway's
  // ids exactly), or ChatML for the synthetic codec. Errors are answered 400: InvalidArgument
  // for a template error or a continue_final_message that cannot be applied,
  // FailedPrecondition for a model without a chat template.
  virtual Result<std::vector<engine::TokenId>> encode_chat(
      const tokenizer::ChatPrompt& chat) const = 0;
  // Text of `ids` (special tokens skipped).
  virtual std::string decode(std::span<const engine::TokenId> ids) const = 0;
  // The vocabulary's string for one id (vLLM token_strs), or nullopt.
  virtual std::optional<std::string> token_string(engine::TokenId id) const = 0;

  // Ids in [0, vocab_size()) are valid prompt ids; generated ids are drawn from that range.
  virtual uint32_t vocab_size() const = 0;
  // InvalidArgument naming the first id outside the vocabulary.
  Status check_ids(std::span<const engine::TokenId> ids) const;
  virtual engine::TokenId eos_token_id() const = 0;
  // Each token's text is independent of its neighbours (the synthetic codec): the detokenizer
  // then needs no context window.
  virtual bool independent_tokens() const { return false; }
  // "tokenizer <dir>" or "synthetic", for logs.
  virtual std::string describe() const = 0;
};

// Loads the PromptEncoder of path_or_id (tokenizer.json, and the chat template of
// tokenizer_config.json beside it when present; without one, chat requests are answered 400).
// A missing or malformed tokenizer or chat template is an error naming the path.
Result<std::unique_ptr<TextCodec>> load_tokenizer_codec(std::string_view path_or_id);

// The codec of an engine started without --tokenizer. vocab_size and eos_token_id come from the
// engine configuration.
std::unique_ptr<TextCodec> make_synthetic_codec(uint32_t vocab_size, engine::TokenId eos_token_id);

// One prompt of a request, ready for the core, with the text `echo` puts before the output.
struct PreparedPrompt {
  std::vector<engine::TokenId> ids;
  std::string echo_text;
};

// The core's prompts for a parsed request: the chat prompt through encode_chat, or each
// completions prompt (text encoded, with special tokens unless add_special_tokens is false;
// ids checked against the vocabulary). Errors (an empty prompt too) are InvalidArgument or
// the codec's; `param` receives "messages" or "prompt".
Result<std::vector<PreparedPrompt>> prepare_prompts(const TextCodec& codec,
                                                    const GenerateRequest& r, std::string* param);

// Incremental detokenization of one request's output (vLLM detokenize_incrementally): each
// token's text is decoded with a few tokens of context before it; text that ends inside a
// UTF-8 character is held back until the next token completes it. The concatenation of every
// delta plus flush() is the request's whole output text, so streamed and non-streamed answers
// carry the same text.
class OutputDetokenizer {
 public:
  explicit OutputDetokenizer(const TextCodec& codec) : codec_(codec) {}

  // The text that `token` adds (possibly empty).
  std::string next(engine::TokenId token);
  // Whatever was held back, at the end of the request.
  std::string flush();

 private:
  const TextCodec& codec_;
  std::vector<engine::TokenId> ids_;
  size_t prefix_offset_ = 0;  // start of the context window
  size_t read_offset_ = 0;    // tokens whose text was already emitted
};

}  // namespace infera::mock
