// The evaluator (internal to the jinja module): jinja2's runtime semantics (scoping, Undefined,
// the immutable sandbox) with Python's value semantics. One Interpreter renders once, on one
// thread, and owns the Arena of that render. Code: interpreter.cc (statements, expressions),
// filters.cc (filters), methods.cc (str/dict/list/loop methods), builtins.cc (tests, globals),
// pyformat.cc (str/repr, json.dumps, formatting).
// Functions return false (or Flow::kError) after recording the first error in status_.
#pragma once

#include <boost/json/fwd.hpp>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"
#include "infera/jinja/ast.h"
#include "infera/jinja/builtins.h"
#include "infera/jinja/template.h"
#include "infera/jinja/value.h"

namespace infera::jinja {

// One top-level name of the render context, pointing at caller-owned JSON (exactly one of the
// pointers is set). The JSON must outlive the render: strings are viewed, not copied.
struct Binding {
  std::string_view name;
  const boost::json::value* value = nullptr;
  const boost::json::array* array = nullptr;
  const boost::json::object* object = nullptr;
};

// Lists and dicts deeper than this are refused (JSON input and values built by templates), so
// every recursive walk over values is bounded.
inline constexpr int kMaxValueDepth = 200;

struct Scope {
  struct Var {
    int32_t symbol;
    Value value;
  };
  Scope* parent = nullptr;
  Var* vars = nullptr;
  uint32_t size = 0;
  uint32_t capacity = 0;
};

struct MacroData {
  const MacroDef* def;
  Scope* scope;  // where it was defined: its body reads names from there
};

struct LoopData {
  const Value* items;
  size_t length;
  size_t index0 = 0;
  bool has_changed_value = false;
  Value changed_value;
};

struct KwArg {
  std::string_view name;
  Value value;
};

// jinja2's lazy filters (map, select, items, batch, unique, reverse, ...) return Python
// generators: nothing is evaluated until the value is iterated, and only once - a second
// iteration yields nothing. The filter call is kept here and run by Interpreter::iterate.
struct GeneratorData {
  const Expr* at;
  FilterId filter;
  std::string_view name;
  Value input;
  const Value* pos;
  size_t npos;
  const KwArg* kw;
  size_t nkw;
  bool consumed = false;
};

// Evaluated call arguments; small calls use the inline storage, larger ones the arena.
struct CallArgs {
  static constexpr size_t kInline = 6;
  Value pos_inline[kInline];
  KwArg kw_inline[kInline];
  Value* pos = pos_inline;
  KwArg* kw = kw_inline;
  size_t npos = 0;
  size_t nkw = 0;
  size_t pos_capacity = kInline;
  size_t kw_capacity = kInline;

  CallArgs() = default;
  CallArgs(const CallArgs&) = delete;
  CallArgs& operator=(const CallArgs&) = delete;
  std::span<const Value> positional() const { return {pos, npos}; }
  std::span<const KwArg> keywords() const { return {kw, nkw}; }
};

enum class Flow : uint8_t { kNormal, kBreak, kContinue, kError };

// json.dumps options. Python's defaults: separators (", ", ": "), or (",", ": ") with an indent.
struct JsonStyle {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // one level
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};

class Interpreter {
 public:
  Interpreter(const Program& program, const Limits& limits,
              std::chrono::system_clock::time_point now);
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  Result<std::string> render(std::span<const Binding> bindings);

  // --- used across the interpreter's files ---------------------------------------------------
  // Errors. `at` gives the position; every error message names its line.
  bool fail(const Expr& at, std::string_view message);
  bool fail_undefined(const Expr& at, const Value& undefined);
  bool fail_limit(std::string_view message);
  // Counts `units` of work against Limits::max_steps.
  bool charge(const Expr& at, uint64_t units);

  // Arena helpers.
  bool new_string(const Expr& at, std::string_view s, Value* out);
  bool new_values(const Expr& at, size_t n, Value** out);
  bool new_list(const Expr& at, std::span<const Value> items, ListFlavor flavor, Value* out);
  bool new_dict(const Expr& at, std::span<const DictEntry> entries, Value* out);

  // Python semantics (interpreter.cc).
  static bool truthy(const Value& v);
  static bool equals(const Value& a, const Value& b);
  // a < b; false with an error when the types do not order.
  bool less(const Expr& at, const Value& a, const Value& b, bool* result);
  bool contains(const Expr& at, const Value& container, const Value& item, bool* result);
  // a <op> b: Python's arithmetic, `%` formatting of strings, sequence concatenation and
  // repetition.
  bool binary(const Expr& at, BinOp op, const Value& a, const Value& b, Value* out);
  // Elements of an iterable: list items, dict keys, string characters, nothing for Undefined.
  bool iterate(const Expr& at, const Value& v, const Value** items, size_t* n);
  bool get_attr(const Expr& at, const Value& obj, std::string_view name, Value* out);
  bool get_attr(const Expr& at, const Value& obj, std::string_view name, uint8_t flags, Value* out);
  bool get_item(const Expr& at, const Value& obj, const Value& key, Value* out);
  bool length(const Expr& at, const Value& v, int64_t* n);
  bool call_value(const Expr& at, const Value& callee, const CallArgs& args, Value* out);
  static std::string_view type_name(const Value& v);
  static int value_depth(const Value& v);

  // Conversions (pyformat.cc). str() and repr() never fail; cycles through namespaces print "...".
  static void to_str(const Value& v, std::string* out, int depth = 0);
  static void to_repr(const Value& v, std::string* out, int depth = 0);
  static void float_repr(double x, std::string* out);
  static void string_repr(std::string_view s, std::string* out);
  bool str_value(const Expr& at, const Value& v, Value* out);  // str(v) as a Value
  // json.dumps(v, ensure_ascii, indent, separators, sort_keys).
  bool to_json(const Expr& at, const Value& v, const JsonStyle& style, std::string* out,
               int level = 0);
  bool percent_format(const Expr& at, std::string_view format, const Value& args, Value* out);
  bool str_format(const Expr& at, std::string_view format, const CallArgs& args, Value* out);

  // Builtins (builtins.cc).
  bool apply_filter(const Expr& at, FilterId id, std::string_view name, const Value& input,
                    const CallArgs& args, Value* out);
  bool apply_test(const Expr& at, TestId id, std::string_view name, const Value& input,
                  const CallArgs& args, bool* out);
  bool call_function(const Expr& at, FunctionId id, const CallArgs& args, Value* out);
  bool make_generator(const Expr& at, FilterId id, std::string_view name, const Value& input,
                      const CallArgs& args, Value* out);
  bool run_generator(GeneratorData& gen, const Value** items, size_t* n);
  // True when `name` (with its AttributeFlags) is a method of obj's type; then call_method
  // may be used.
  static bool has_method(const Value& obj, std::string_view name);
  static bool has_method(const Value& obj, uint8_t attribute_flags);
  static bool is_unsafe_attribute(const Value& obj, uint8_t attribute_flags);
  bool call_method(const Expr& at, const Value& obj, std::string_view name, const CallArgs& args,
                   Value* out);

  Arena& arena() { return arena_; }
  const Limits& limits() const { return limits_; }

 private:
  // Statements.
  Flow exec_body(const Body& body, Scope* scope);
  Flow exec(const Stmt& s, Scope* scope);
  Flow exec_for(const Stmt& s, Scope* scope);
  bool capture(const Body& body, Scope* scope, Value* out);
  bool assign(const Expr& at, const Target& target, const Value& v, Scope* scope);
  bool write(const Expr& at, std::string_view s);
  bool write_text(std::string_view s);
  bool write_value(const Expr& at, const Value& v);

  // Expressions.
  bool eval(const Expr& e, Scope* scope, Value* out);
  bool eval_call(const Expr& e, Scope* scope, const KwArg* extra, Value* out);
  bool eval_args(const Expr& e, Scope* scope, CallArgs* args);
  bool eval_list(const Expr& e, Scope* scope, Value* out);  // [a, b] and (a, b)
  bool eval_dict(const Expr& e, Scope* scope, Value* out);
  bool eval_concat(const Expr& e, Scope* scope, Value* out);   // a ~ b ~ c
  bool eval_compare(const Expr& e, Scope* scope, Value* out);  // a < b <= c
  bool eval_filter_chain(const Expr& e, Scope* scope, const Value& input, Value* out);
  bool compare(const Expr& at, CmpOp op, const Value& a, const Value& b, bool* out);
  bool slice(const Expr& at, const Value& obj, const Expr& slice, Scope* scope, Value* out);
  bool concat_strings(const Expr& at, const Value& a, std::string_view b, Value* out);
  bool invoke_macro(const Expr& at, const MacroData& macro, const CallArgs& args, Value* out);

  // Scopes and names.
  Scope* new_scope(Scope* parent);
  bool set_var(Scope* scope, int32_t symbol, const Value& v);
  bool lookup(const Scope* scope, int32_t symbol, Value* out) const;
  bool from_json(const boost::json::value& j, Value* out, int depth);

  const Program& program_;
  Limits limits_;
  std::chrono::system_clock::time_point now_;
  Arena arena_;
  Status status_;
  uint64_t steps_ = 0;
  int depth_ = 0;        // C++ recursion through exec/eval/macro calls
  int macro_depth_ = 0;  // nested macro calls (Limits::max_call_depth)
  bool eager_ = false;   // running a generator: lazy filters compute their items now
  std::string* out_ = nullptr;
  std::vector<Value> globals_;  // by symbol: context values, then global functions
  std::vector<bool> has_global_;

  friend struct DepthGuard;
};

}  // namespace infera::jinja
