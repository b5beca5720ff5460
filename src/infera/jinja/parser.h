// Template text -> Program, with jinja2's grammar (jinja2/parser.py): the statements chat
// templates use (if/elif/else, for with else and loop filter, set and block set with namespace
// attributes, macro, call, filter, with, block, break/continue from jinja2.ext.loopcontrols,
// and transformers' `generation` tag) and the full expression grammar. Internal to the jinja
// module; a pure function of its input (errors carry the line and column).
#pragma once

#include <memory>
#include <string_view>

#include "infera/common/status.h"
#include "infera/jinja/ast.h"

namespace infera::jinja {

// Bounds nesting (parentheses, operators, blocks) so the parser and the interpreter, both
// recursive, never run out of stack on hostile input.
inline constexpr int kMaxParseDepth = 96;

Result<std::shared_ptr<const Program>> parse_program(std::string_view source);

}  // namespace infera::jinja
