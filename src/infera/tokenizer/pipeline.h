// Pipeline: the components a tokenizer.json describes (added tokens, normalizer, pre-tokenizer,
// BPE model, post-processor, decoder) and the loader that builds them with Boost.JSON.
// Internal to src/infera/tokenizer/: the Tokenizer owns one and runs it. Immutable after load:
// any thread.
#pragma once

#include <memory>
#include <string_view>

#include "infera/common/status.h"
#include "infera/tokenizer/added_vocabulary.h"
#include "infera/tokenizer/bpe.h"
#include "infera/tokenizer/decoder.h"
#include "infera/tokenizer/normalizer.h"
#include "infera/tokenizer/post_processor.h"
#include "infera/tokenizer/pre_tokenizer.h"
#include "infera/tokenizer/vocab.h"

namespace infera::tokenizer {

struct Pipeline {
  Vocab vocab;  // the model vocabulary; `model` points into it, so a Pipeline never moves
  std::unique_ptr<AddedVocabulary> added;
  std::unique_ptr<Normalizer> normalizer;        // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;   // may be null
  std::unique_ptr<Bpe> model;
  std::unique_ptr<PostProcessor> post_processor;  // may be null
  std::unique_ptr<Decoder> decoder;               // may be null: tokens joined by spaces
  size_t vocab_size = 0;
  // A Metaspace pre-tokenizer with prepend_scheme "first" makes the encoding of a segment
  // depend on whether it starts the text.
  bool origin_sensitive = false;
  // The decoder chain maps byte-level characters back to bytes. Added tokens never went through
  // the byte-level pre-tokenizer, so decode hands the decoder their byte-level spelling and gets
  // their content back (tokenizers.js keeps them verbatim, and the Rust crate was fixed to do
  // the same in huggingface/tokenizers#1996; before that, non-ASCII added tokens came back
  // garbled).
  bool byte_level_decoder = false;
};

// `origin` prefixes error messages (usually the file path).
Result<std::unique_ptr<Pipeline>> load_pipeline(std::string_view json, std::string_view origin,
                                                size_t word_cache_entries);

}  // namespace infera::tokenizer
