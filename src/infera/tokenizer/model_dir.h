// Where a tokenizer lives: `--router-tokenizer-path` and `--tokenizer` take a directory or a
// Hugging Face id ("Qwen/Qwen3-0.6B") that is resolved offline from the local Hugging Face
// cache: $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub or
// ~/.cache/huggingface/hub (huggingface_hub's own defaults), then
// models--ORG--NAME/snapshots/<rev>/, preferring the revision refs/main names. Reads the file
// system and the environment only; any thread.
#pragma once

#include <filesystem>
#include <string_view>

#include "infera/common/status.h"

namespace infera::tokenizer {

// The directory holding tokenizer.json (and, usually, tokenizer_config.json). A path that exists
// is used as is (a directory, or a tokenizer.json file's directory). When nothing is found the
// error names every place that was looked at.
Result<std::filesystem::path> resolve_model_dir(std::string_view path_or_id);

}  // namespace infera::tokenizer
