// `infera tokenize --tokenizer PATH_OR_ID [--add-special-tokens]` (docs/contracts.md section 2,
// pinned): JSON lines in, JSON lines out, through the PromptEncoder the router uses.
//   in:  {"text": "..."}  or  {"messages": [...], "tools": [...], "add_generation_prompt": true,
//        "chat_template_kwargs": {...}}
//   out: {"ids": [...]}   plus "prompt": "<rendered text>" for messages; a line that fails
//        gives {"error": "..."} and the command goes on (exit status 1 at the end).
#pragma once

#include <cstdio>
#include <span>
#include <string>

namespace infera::tokenizer {

int run_tokenize_command(std::span<const std::string> args);

// The loop itself, on given streams (tests).
class PromptEncoder;
int tokenize_lines(const PromptEncoder& encoder, bool add_special_tokens, std::FILE* in,
                   std::FILE* out);

}  // namespace infera::tokenizer
