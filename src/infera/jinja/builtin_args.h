// What the builtins' files share (internal to the jinja module): binding Python-style call
// arguments to a builtin's parameters, Python's reading of numbers and optional arguments, and
// short names for the Interpreter's static Python semantics. Used by builtins.cc (tests,
// globals), filters.cc and methods.cc, on the thread of the render they serve.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "infera/jinja/interpreter.h"
#include "infera/jinja/text.h"
#include "infera/jinja/value.h"

namespace infera::jinja {

inline bool truthy(const Value& v) {
  return Interpreter::truthy(v);
}
inline bool equals(const Value& a, const Value& b) {
  return Interpreter::equals(a, b);
}
inline std::string_view type_name(const Value& v) {
  return Interpreter::type_name(v);
}

inline bool is_intlike(const Value& v) {
  return v.kind == Kind::kInt || v.kind == Kind::kBool;
}
inline int64_t as_int(const Value& v) {
  return v.kind == Kind::kBool ? static_cast<int64_t>(v.b) : v.i;
}
inline double as_float(const Value& v) {
  return v.kind == Kind::kFloat ? v.f : static_cast<double>(as_int(v));
}

// Whether an optional builtin argument was passed (an explicitly passed Undefined counts).
inline bool given(const Value& v) {
  return !(v.kind == Kind::kUndefined && static_cast<UndefReason>(v.sub) == UndefReason::kNotGiven);
}

// Binds Python-style call arguments to named parameters; a parameter not given stays Undefined
// (kNotGiven). Errors name `function` as Python's TypeErrors do.
bool bind_params(Interpreter* in, const Expr& at, std::string_view function, const CallArgs& args,
                 std::initializer_list<std::string_view> names, Value* slots,
                 size_t skip_positional = 0);

// str.strip / lstrip / rstrip with an optional set of characters: anything but a str strips
// whitespace.
inline std::string_view strip_chars(std::string_view s, const Value& chars, bool left, bool right) {
  if (chars.kind != Kind::kString) return text::strip_space(s, left, right);
  return text::strip_chars(s, chars.sv(), left, right);
}

}  // namespace infera::jinja
