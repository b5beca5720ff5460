// Template text -> tokens, with jinja2's lexer rules (jinja2/lexer.py) for the environment
// transformers renders chat templates with: trim_blocks and lstrip_blocks on, `-`/`+` whitespace
// control, comments and raw blocks dropped or passed through, newlines normalised to "\n" and one
// trailing newline removed (keep_trailing_newline=False). Internal to the jinja module; pure
// function of its input.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "infera/common/status.h"
#include "infera/jinja/ast.h"

namespace infera::jinja {

enum class Tok : uint8_t {
  kText,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kMod,
  kPow,
  kTilde,
  kLBracket,
  kRBracket,
  kLParen,
  kRParen,
  kLBrace,
  kRBrace,
  kEq,
  kNe,
  kGt,
  kGe,
  kLt,
  kLe,
  kAssign,
  kDot,
  kColon,
  kPipe,
  kComma,
  kSemicolon,
  kEof,
};

struct Token {
  Tok type = Tok::kEof;
  uint32_t line = 1;
  uint32_t column = 1;
  std::string_view text;  // kText, kName, kString (decoded); the source spelling otherwise
  int64_t integer = 0;
  double real = 0;
};

// How jinja2 names a token in error messages ("end of print statement", "'x'").
std::string describe(const Token& token);

// Tokenizes program->source (already set by the caller, see normalize_source). Decoded string
// literals are stored in program->strings. Errors carry the line and column.
Result<std::vector<Token>> tokenize(Program* program);

// jinja2's newline handling: "\r\n" and "\r" become "\n"; one trailing "\n" is dropped.
std::string normalize_source(std::string_view source);

}  // namespace infera::jinja
