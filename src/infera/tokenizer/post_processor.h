// Post-processors of tokenizer.json ("post_processor") for one sequence with
// add_special_tokens: TemplateProcessing (its "single" template), ByteLevel (offsets only, so
// ids are unchanged) and Sequence. Internal to src/infera/tokenizer/. Immutable: any thread.
#pragma once

#include <memory>
#include <vector>

#include "infera/tokenizer/vocab.h"

namespace infera::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens around the ids of one encoded sequence.
  virtual void add_special_tokens(std::vector<TokenId>& ids) const = 0;
};

// The ids of the special tokens before and after $A in the "single" template.
class TemplatePostProcessor final : public PostProcessor {
 public:
  TemplatePostProcessor(std::vector<TokenId> before, std::vector<TokenId> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  void add_special_tokens(std::vector<TokenId>& ids) const override;

 private:
  std::vector<TokenId> before_;
  std::vector<TokenId> after_;
};

class NoopPostProcessor final : public PostProcessor {
 public:
  void add_special_tokens(std::vector<TokenId>&) const override {}
};

class SequencePostProcessor final : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void add_special_tokens(std::vector<TokenId>& ids) const override {
    for (const auto& s : steps_) s->add_special_tokens(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

}  // namespace infera::tokenizer
