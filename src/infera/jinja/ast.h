// The parsed form of a template (internal to the jinja module): statements and expressions as
// jinja2's parser builds them (jinja2/nodes.py), owned by one immutable Program. A Program is
// built once by the parser and then only read, by any number of threads at once.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "infera/jinja/value.h"

namespace infera::jinja {

enum class ExprKind : uint8_t {
  kLiteral,   // literal
  kName,      // symbol
  kList,      // args
  kTuple,     // args
  kDict,      // args: key, value, key, value, ...
  kGetAttr,   // a.name
  kGetItem,   // a[b]
  kSlice,     // a, b, c: start, stop, step (each may be null); only as the b of kGetItem
  kCall,      // a(args, kwargs, *star_args, **star_kwargs)
  kFilter,    // a | name(args, kwargs); a is null inside a filter block or block set
  kTest,      // a is name(args, kwargs)
  kNeg,       // -a
  kPos,       // +a
  kNot,       // not a
  kBinary,    // a op b (BinOp)
  kConcat,    // args joined with ~
  kAnd,       // a and b
  kOr,        // a or b
  kCompare,   // args[0] cmp_ops[0] args[1] cmp_ops[1] args[2] ...
  kCondExpr,  // a if b else c (c may be null)
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
struct Keyword {
  std::string_view name;
  const Expr* value;
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  uint8_t op = 0;       // BinOp for kBinary; FilterId / TestId
  uint8_t flags = 0;    // AttributeFlags of `name` for kGetAttr
  int32_t symbol = -1;  // kName
  uint32_t line = 0;
  uint32_t column = 0;
  Value literal;          // kLiteral
  std::string_view name;  // kName, kGetAttr attribute, kFilter / kTest name
  const Expr* a = nullptr;
  const Expr* b = nullptr;
  const Expr* c = nullptr;
  std::vector<const Expr*> args;
  std::vector<Keyword> kwargs;
  std::vector<CmpOp> cmp_ops;
  const Expr* star_args = nullptr;
  const Expr* star_kwargs = nullptr;
};

// An assignment target: a name, a namespace attribute (`ns.x`) or a tuple of targets.
struct Target {
  enum class Kind : uint8_t { kName, kAttribute, kTuple } kind = Kind::kName;
  int32_t symbol = -1;         // kName, and the namespace variable of kAttribute
  std::string_view attribute;  // kAttribute
  std::vector<Target> items;   // kTuple
};

struct Stmt;
using Body = std::vector<const Stmt*>;

struct MacroDef {
  std::string_view name;
  std::vector<int32_t> params;  // symbols
  std::vector<std::string_view> param_names;
  std::vector<const Expr*> defaults;  // one per param, null when it has none
  Body body;
  bool uses_varargs = false;  // the body reads `varargs`: extra positional arguments allowed
  bool uses_kwargs = false;   // the body reads `kwargs`: extra keyword arguments allowed
  bool uses_caller = false;   // the body reads `caller`
};

enum class StmtKind : uint8_t {
  kText,         // text
  kPrint,        // {{ expr }}
  kIf,           // branches (condition, body) in order; else_body
  kFor,          // target in expr [if loop_filter]: body, else_body
  kSet,          // target = expr
  kSetBlock,     // target = rendered body, through expr (a filter chain) when not null
  kMacro,        // macro, assigned to symbol
  kCallBlock,    // expr (a kCall) with caller = macro
  kFilterBlock,  // body rendered, then expr (a filter chain)
  kWith,         // with_targets = with_values, then body in a new scope
  kScope,        // body in a new scope: {% block %}, and {% generation %} (transformers'
                 // AssistantTracker makes it a call block, whose body has its own scope)
  kBreak,
  kContinue,
};

struct Branch {
  const Expr* condition;
  Body body;
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  uint32_t line = 0;
  uint32_t column = 0;
  std::string_view text;
  const Expr* expr = nullptr;
  const Expr* loop_filter = nullptr;
  Target target;
  std::vector<Branch> branches;
  Body body;
  Body else_body;
  const MacroDef* macro = nullptr;
  int32_t symbol = -1;
  std::vector<Target> with_targets;
  std::vector<const Expr*> with_values;
};

// Symbols the interpreter knows by number.
enum WellKnownSymbol : int32_t {
  kSymLoop,
  kSymVarargs,
  kSymKwargs,
  kSymCaller,
  kSymRange,
  kSymNamespace,
  kSymDict,
  kSymRaiseException,
  kSymStrftimeNow,
  kWellKnownSymbols,
};

// Everything a parsed template owns. Nodes live in deques so their addresses never change.
struct Program {
  std::string source;  // newline-normalised template text; text statements point into it
  std::deque<std::string> strings;  // decoded string literals
  std::deque<Expr> exprs;
  std::deque<Stmt> stmts;
  std::deque<MacroDef> macros;
  std::vector<std::string> symbol_names;
  std::unordered_map<std::string, int32_t> symbols;
  Body root;

  Program();
  int32_t intern(std::string_view name);
  int32_t find_symbol(std::string_view name) const;
};

}  // namespace infera::jinja
