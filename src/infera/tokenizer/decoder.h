// Decoders of tokenizer.json ("decoder"), ids -> text after the ids became token strings:
// ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and Sequence, each with the
// decode_chain semantics of the Rust `tokenizers` crate (the final text is the concatenation of
// what the chain returns). Internal to src/infera/tokenizer/. Immutable: any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "infera/tokenizer/regex.h"

namespace infera::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Maps byte-level characters back to bytes across all tokens, then repairs UTF-8 (lossy).
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  Regex pattern_;
  std::string content_;
};

// Runs of "<0xAB>" tokens become the bytes they name (each byte "\uFFFD" if invalid UTF-8).
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

// Removes up to `start` leading and `stop` trailing `content` characters from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  char32_t content_;
  size_t start_;
  size_t stop_;
};

// The replacement character becomes a space; in the first token it is dropped unless the
// prepend scheme is "never".
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool drop_in_first)
      : replacement_(replacement), drop_in_first_(drop_in_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  char32_t replacement_;
  bool drop_in_first_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace infera::tokenizer
