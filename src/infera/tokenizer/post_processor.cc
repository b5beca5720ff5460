#include "infera/tokenizer/post_processor.h"

namespace infera::tokenizer {

void TemplatePostProcessor::add_special_tokens(std::vector<TokenId>& ids) const {
  if (!before_.empty()) ids.insert(ids.begin(), before_.begin(), before_.end());
  ids.insert(ids.end(), after_.begin(), after_.end());
}

}  // namespace infera::tokenizer
