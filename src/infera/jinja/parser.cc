#include "infera/jinja/parser.h"

#include <string>
#include <vector>

#include "infera/jinja/builtins.h"
#include "infera/jinja/lexer.h"

namespace infera::jinja {

Program::Program() {
  for (std::string_view name : {"loop", "varargs", "kwargs", "caller", "range", "namespace", "dict",
                                "raise_exception", "strftime_now"}) {
    intern(name);
  }
}

int32_t Program::intern(std::string_view name) {
  const auto it = symbols.find(std::string(name));
  if (it != symbols.end()) return it->second;
  const auto id = static_cast<int32_t>(symbol_names.size());
  symbol_names.emplace_back(name);
  symbols.emplace(std::string(name), id);
  return id;
}

int32_t Program::find_symbol(std::string_view name) const {
  const auto it = symbols.find(std::string(name));
  return it == symbols.end() ? -1 : it->second;
}

namespace {

// Each parse_* function returns null (or false) after recording the first error in status_;
// callers propagate with the TRY macros below.
#define JINJA_TRY(expr)     \
  do {                      \
    if (!(expr)) return {}; \
  } while (false)

class Parser {
 public:
  Parser(Program* program, std::vector<Token> tokens)
      : program_(program), tokens_(std::move(tokens)) {}

  Status run() {
    const bool ok = parse_body({}, &program_->root);
    if (ok && cur().type != Tok::kEof) fail(cur(), "unexpected '" + describe(cur()) + "'");
    return status_;
  }

 private:
  // --- token stream -------------------------------------------------------------------------
  const Token& cur() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[pos_ + 1 < tokens_.size() ? pos_ + 1 : pos_]; }
  void next() {
    if (cur().type != Tok::kEof) ++pos_;
  }
  bool is_name(const Token& t, std::string_view name) const {
    return t.type == Tok::kName && t.text == name;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(cur(), name)) return false;
    next();
    return true;
  }
  bool skip(Tok type) {
    if (cur().type != type) return false;
    next();
    return true;
  }

  std::nullptr_t fail(const Token& at, const std::string& message) {
    if (status_.ok()) {
      status_ = invalid_argument("template syntax error at line " + std::to_string(at.line) +
                                 ", column " + std::to_string(at.column) + ": " + message);
    }
    return nullptr;
  }
  bool failed() const { return !status_.ok(); }

  static std::string token_name(Tok type) {
    switch (type) {
      case Tok::kVariableEnd:
        return "end of print statement";
      case Tok::kBlockEnd:
        return "end of statement block";
      case Tok::kName:
        return "name";
      case Tok::kRParen:
        return ")";
      case Tok::kRBracket:
        return "]";
      case Tok::kRBrace:
        return "}";
      case Tok::kLParen:
        return "(";
      case Tok::kColon:
        return ":";
      case Tok::kComma:
        return ",";
      case Tok::kAssign:
        return "=";
      default:
        return "token";
    }
  }

  bool expect(Tok type) {
    if (cur().type == type) {
      next();
      return true;
    }
    if (cur().type == Tok::kEof) {
      fail(cur(), "unexpected end of template, expected '" + token_name(type) + "'.");
      return false;
    }
    fail(cur(), "expected token '" + token_name(type) + "', got '" + describe(cur()) + "'");
    return false;
  }
  bool expect_name(std::string_view name) {
    if (is_name(cur(), name)) {
      next();
      return true;
    }
    fail(cur(), "expected token '" + std::string(name) + "', got '" + describe(cur()) + "'");
    return false;
  }
  const Token* expect_any_name() {
    if (cur().type != Tok::kName) {
      fail(cur(), "expected token 'name', got '" + describe(cur()) + "'");
      return nullptr;
    }
    const Token* t = &cur();
    next();
    return t;
  }

  // Nesting guard for recursive descent.
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : parser(p) { ++parser->depth_; }
    ~DepthGuard() { --parser->depth_; }
    Parser* parser;
  };
  bool check_depth() {
    if (depth_ > kMaxParseDepth) {
      fail(cur(),
           "template nested too deeply (more than " + std::to_string(kMaxParseDepth) + " levels)");
      return false;
    }
    return true;
  }

  // --- nodes --------------------------------------------------------------------------------
  Expr* new_expr(ExprKind kind, const Token& at) {
    Expr& e = program_->exprs.emplace_back();
    e.kind = kind;
    e.line = at.line;
    e.column = at.column;
    return &e;
  }
  Stmt* new_stmt(StmtKind kind, const Token& at) {
    Stmt& s = program_->stmts.emplace_back();
    s.kind = kind;
    s.line = at.line;
    s.column = at.column;
    return &s;
  }
  Expr* name_expr(const Token& at, std::string_view name) {
    Expr* e = new_expr(ExprKind::kName, at);
    e->name = name;
    e->symbol = program_->intern(name);
    if (!macro_stack_.empty()) {
      MacroDef* m = macro_stack_.back();
      if (e->symbol == kSymVarargs) m->uses_varargs = true;
      if (e->symbol == kSymKwargs) m->uses_kwargs = true;
      if (e->symbol == kSymCaller) m->uses_caller = true;
    }
    return e;
  }

  // --- template structure -------------------------------------------------------------------
  // Parses statements until a block tag whose name is in `end_names` (left current) or EOF.
  bool parse_body(std::initializer_list<std::string_view> end_names, Body* body) {
    DepthGuard guard(this);
    if (!check_depth()) return false;
    for (;;) {
      const Token& t = cur();
      switch (t.type) {
        case Tok::kEof:
          if (end_names.size() != 0) {
            std::string expected;
            for (std::string_view n : end_names) {
              if (!expected.empty()) expected += " or ";
              expected += "'" + std::string(n) + "'";
            }
            fail(t, "Unexpected end of template. Jinja was looking for the following tags: " +
                        expected + ". The innermost block that needs to be closed is '" +
                        std::string(tag_stack_.empty() ? "" : tag_stack_.back()) + "'.");
            return false;
          }
          return true;
        case Tok::kText: {
          Stmt* s = new_stmt(StmtKind::kText, t);
          s->text = t.text;
          body->push_back(s);
          next();
          break;
        }
        case Tok::kVariableBegin: {
          Stmt* s = new_stmt(StmtKind::kPrint, t);
          next();
          s->expr = parse_tuple(/*simplified=*/false, /*with_condexpr=*/true, {}, false);
          JINJA_TRY(s->expr);
          JINJA_TRY(expect(Tok::kVariableEnd));
          body->push_back(s);
          break;
        }
        case Tok::kBlockBegin: {
          next();
          for (std::string_view n : end_names) {
            if (is_name(cur(), n)) return true;
          }
          JINJA_TRY(parse_statement(body));
          JINJA_TRY(expect(Tok::kBlockEnd));
          break;
        }
        default:
          fail(t, "unexpected '" + describe(t) + "'");
          return false;
      }
    }
  }

  // jinja2 parse_statements: optional ':', the block end, then a body up to an end tag.
  // On return the current token is the end tag's name (consumed when drop_needle).
  bool parse_statements(std::initializer_list<std::string_view> end_names, Body* body,
                        bool drop_needle) {
    skip(Tok::kColon);
    JINJA_TRY(expect(Tok::kBlockEnd));
    JINJA_TRY(parse_body(end_names, body));
    if (drop_needle) next();
    return true;
  }

  bool parse_statement(Body* body) {
    const Token& t = cur();
    if (t.type != Tok::kName) {
      fail(t, "tag name expected");
      return false;
    }
    const std::string_view tag = t.text;
    tag_stack_.push_back(tag);
    const bool ok = parse_tag(tag, body);
    tag_stack_.pop_back();
    return ok;
  }

  bool parse_tag(std::string_view tag, Body* body) {
    const Token& t = cur();
    if (tag == "if") return parse_if(body);
    if (tag == "for") return parse_for(body);
    if (tag == "set") return parse_set(body);
    if (tag == "macro") return parse_macro(body);
    if (tag == "call") return parse_call_block(body);
    if (tag == "filter") return parse_filter_block(body);
    if (tag == "with") return parse_with(body);
    if (tag == "block") return parse_block(body);
    if (tag == "print") {
      next();
      Stmt* s = new_stmt(StmtKind::kPrint, t);
      s->expr = parse_tuple(false, true, {}, false);
      JINJA_TRY(s->expr);
      body->push_back(s);
      return true;
    }
    if (tag == "generation") {  // transformers' AssistantTracker: renders its body
      next();
      Stmt* s = new_stmt(StmtKind::kScope, t);
      JINJA_TRY(parse_statements({"endgeneration"}, &s->body, true));
      body->push_back(s);
      return true;
    }
    if (tag == "break" || tag == "continue") {  // jinja2.ext.loopcontrols
      if (loop_depth_ == 0) {
        fail(t, "'" + std::string(tag) + "' outside loop");
        return false;
      }
      next();
      body->push_back(new_stmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, t));
      return true;
    }
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends") {
      fail(t, "'" + std::string(tag) + "' is not supported: chat templates have no loader");
      return false;
    }
    fail(t, "Encountered unknown tag '" + std::string(tag) + "'.");
    return false;
  }

  bool parse_if(Body* body) {
    const Token& t = cur();
    next();
    Stmt* s = new_stmt(StmtKind::kIf, t);
    for (;;) {
      Branch branch;
      branch.condition = parse_tuple(false, /*with_condexpr=*/false, {}, false);
      JINJA_TRY(branch.condition);
      JINJA_TRY(parse_statements({"elif", "else", "endif"}, &branch.body, false));
      s->branches.push_back(std::move(branch));
      const std::string_view which = cur().text;
      next();
      if (which == "elif") continue;
      if (which == "else") JINJA_TRY(parse_statements({"endif"}, &s->else_body, true));
      break;
    }
    body->push_back(s);
    return true;
  }

  bool parse_for(Body* body) {
    const Token& t = cur();
    next();
    Stmt* s = new_stmt(StmtKind::kFor, t);
    JINJA_TRY(parse_assign_target(&s->target, /*with_namespace=*/false, {"in"}));
    JINJA_TRY(expect_name("in"));
    s->expr = parse_tuple(false, /*with_condexpr=*/false, {"recursive"}, false);
    JINJA_TRY(s->expr);
    if (skip_name("if")) {
      s->loop_filter = parse_expression(true);
      JINJA_TRY(s->loop_filter);
    }
    if (is_name(cur(), "recursive")) {
      fail(cur(), "recursive for loops are not supported");
      return false;
    }
    ++loop_depth_;
    const bool ok = parse_statements({"endfor", "else"}, &s->body, false);
    --loop_depth_;
    JINJA_TRY(ok);
    const std::string_view which = cur().text;
    next();
    if (which == "else") JINJA_TRY(parse_statements({"endfor"}, &s->else_body, true));
    body->push_back(s);
    return true;
  }

  bool parse_set(Body* body) {
    const Token& t = cur();
    next();
    Target target;
    JINJA_TRY(parse_assign_target(&target, /*with_namespace=*/true, {}));
    if (skip(Tok::kAssign)) {
      Stmt* s = new_stmt(StmtKind::kSet, t);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      JINJA_TRY(s->expr);
      body->push_back(s);
      return true;
    }
    Stmt* s = new_stmt(StmtKind::kSetBlock, t);
    s->target = std::move(target);
    if (cur().type == Tok::kPipe) {
      s->expr = parse_filter(nullptr, false);
      JINJA_TRY(s->expr);
    }
    JINJA_TRY(parse_statements({"endset"}, &s->body, true));
    body->push_back(s);
    return true;
  }

  bool parse_signature(MacroDef* m) {
    JINJA_TRY(expect(Tok::kLParen));
    while (cur().type != Tok::kRParen) {
      if (!m->params.empty()) JINJA_TRY(expect(Tok::kComma));
      const Token* name = expect_any_name();
      JINJA_TRY(name);
      m->params.push_back(program_->intern(name->text));
      m->param_names.push_back(name->text);
      if (skip(Tok::kAssign)) {
        const Expr* d = parse_expression(true);
        JINJA_TRY(d);
        m->defaults.push_back(d);
      } else {
        for (const Expr* d : m->defaults) {
          if (d != nullptr) {
            fail(*name, "non-default argument follows default argument");
            return false;
          }
        }
        m->defaults.push_back(nullptr);
      }
    }
    return expect(Tok::kRParen);
  }

  bool parse_macro_body(MacroDef* m, std::string_view end_tag) {
    macro_stack_.push_back(m);
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    const bool ok = parse_statements({end_tag}, &m->body, true);
    loop_depth_ = saved_loops;
    macro_stack_.pop_back();
    return ok;
  }

  bool parse_macro(Body* body) {
    const Token& t = cur();
    next();
    const Token* name = expect_any_name();
    JINJA_TRY(name);
    MacroDef* m = &program_->macros.emplace_back();
    m->name = name->text;
    // Defaults are evaluated inside the macro: names they read count as the macro's.
    macro_stack_.push_back(m);
    const bool sig_ok = parse_signature(m);
    macro_stack_.pop_back();
    JINJA_TRY(sig_ok);
    JINJA_TRY(parse_macro_body(m, "endmacro"));
    Stmt* s = new_stmt(StmtKind::kMacro, t);
    s->macro = m;
    s->symbol = program_->intern(m->name);
    body->push_back(s);
    return true;
  }

  bool parse_call_block(Body* body) {
    const Token& t = cur();
    next();
    MacroDef* m = &program_->macros.emplace_back();
    m->name = "caller";
    if (cur().type == Tok::kLParen) {
      macro_stack_.push_back(m);
      const bool sig_ok = parse_signature(m);
      macro_stack_.pop_back();
      JINJA_TRY(sig_ok);
    }
    const Expr* call = parse_expression(true);
    JINJA_TRY(call);
    if (call->kind != ExprKind::kCall) {
      fail(t, "expected call");
      return false;
    }
    JINJA_TRY(parse_macro_body(m, "endcall"));
    Stmt* s = new_stmt(StmtKind::kCallBlock, t);
    s->expr = call;
    s->macro = m;
    body->push_back(s);
    return true;
  }

  bool parse_filter_block(Body* body) {
    const Token& t = cur();
    next();
    Stmt* s = new_stmt(StmtKind::kFilterBlock, t);
    s->expr = parse_filter(nullptr, /*start_inline=*/true);
    JINJA_TRY(s->expr);
    JINJA_TRY(parse_statements({"endfilter"}, &s->body, true));
    body->push_back(s);
    return true;
  }

  bool parse_with(Body* body) {
    const Token& t = cur();
    next();
    Stmt* s = new_stmt(StmtKind::kWith, t);
    while (cur().type != Tok::kBlockEnd) {
      if (!s->with_targets.empty()) JINJA_TRY(expect(Tok::kComma));
      Target target;
      JINJA_TRY(parse_assign_target(&target, false, {}));
      JINJA_TRY(expect(Tok::kAssign));
      const Expr* value = parse_expression(true);
      JINJA_TRY(value);
      s->with_targets.push_back(std::move(target));
      s->with_values.push_back(value);
    }
    JINJA_TRY(parse_statements({"endwith"}, &s->body, true));
    body->push_back(s);
    return true;
  }

  bool parse_block(Body* body) {
    const Token& t = cur();
    next();
    const Token* name = expect_any_name();
    JINJA_TRY(name);
    skip_name("scoped");
    skip_name("required");
    Stmt* s = new_stmt(StmtKind::kScope, t);
    JINJA_TRY(parse_statements({"endblock"}, &s->body, true));
    skip_name(name->text);
    body->push_back(s);
    return true;
  }

  // A name, `ns.attr` (with_namespace) or a tuple of names, possibly parenthesised.
  bool parse_assign_target(Target* target, bool with_namespace,
                           std::initializer_list<std::string_view> extra_end) {
    const Token& t = cur();
    if (with_namespace && t.type == Tok::kName && look().type == Tok::kDot) {
      next();
      next();
      const Token* attr = expect_any_name();
      JINJA_TRY(attr);
      target->kind = Target::Kind::kAttribute;
      target->symbol = program_->intern(t.text);
      target->attribute = attr->text;
      return true;
    }
    const Expr* e = parse_tuple(/*simplified=*/true, true, extra_end, false);
    JINJA_TRY(e);
    return to_target(e, t, target);
  }

  bool to_target(const Expr* e, const Token& at, Target* target) {
    if (e->kind == ExprKind::kName) {
      target->kind = Target::Kind::kName;
      target->symbol = e->symbol;
      return true;
    }
    if (e->kind == ExprKind::kTuple) {
      target->kind = Target::Kind::kTuple;
      for (const Expr* item : e->args) {
        Target sub;
        JINJA_TRY(to_target(item, at, &sub));
        target->items.push_back(std::move(sub));
      }
      return true;
    }
    fail(at,
         e->kind == ExprKind::kLiteral ? "can't assign to 'const'" : "can't assign to expression");
    return false;
  }

  // --- expressions --------------------------------------------------------------------------
  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const Tok type = cur().type;
    if (type == Tok::kVariableEnd || type == Tok::kBlockEnd || type == Tok::kRParen) return true;
    for (std::string_view n : extra_end) {
      if (is_name(cur(), n)) return true;
    }
    return false;
  }

  const Expr* parse_tuple(bool simplified, bool with_condexpr,
                          std::initializer_list<std::string_view> extra_end, bool explicit_parens) {
    const Token& start = cur();
    std::vector<const Expr*> items;
    bool is_tuple = false;
    for (;;) {
      if (!items.empty()) JINJA_TRY(expect(Tok::kComma));
      if (is_tuple_end(extra_end)) break;
      const Expr* e = nullptr;
      if (simplified) {
        e = parse_primary();
      } else {
        e = parse_expression(with_condexpr);
      }
      JINJA_TRY(e);
      items.push_back(e);
      if (cur().type == Tok::kComma) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return items[0];
      if (!explicit_parens)
        return fail(cur(), "Expected an expression, got '" + describe(cur()) + "'");
    }
    Expr* e = new_expr(ExprKind::kTuple, start);
    e->args = std::move(items);
    return e;
  }

  const Expr* parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    if (!check_depth()) return nullptr;
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  const Expr* parse_condexpr() {
    const Token& start = cur();
    const Expr* expr1 = parse_or();
    JINJA_TRY(expr1);
    while (skip_name("if")) {
      const Expr* expr2 = parse_or();
      JINJA_TRY(expr2);
      const Expr* expr3 = nullptr;
      if (skip_name("else")) {
        DepthGuard guard(this);
        if (!check_depth()) return nullptr;
        expr3 = parse_condexpr();
        JINJA_TRY(expr3);
      }
      Expr* e = new_expr(ExprKind::kCondExpr, start);
      e->a = expr1;
      e->b = expr2;
      e->c = expr3;
      expr1 = e;
    }
    return expr1;
  }

  const Expr* parse_or() {
    const Token& start = cur();
    const Expr* left = parse_and();
    JINJA_TRY(left);
    while (skip_name("or")) {
      const Expr* right = parse_and();
      JINJA_TRY(right);
      Expr* e = new_expr(ExprKind::kOr, start);
      e->a = left;
      e->b = right;
      left = e;
    }
    return left;
  }

  const Expr* parse_and() {
    const Token& start = cur();
    const Expr* left = parse_not();
    JINJA_TRY(left);
    while (skip_name("and")) {
      const Expr* right = parse_not();
      JINJA_TRY(right);
      Expr* e = new_expr(ExprKind::kAnd, start);
      e->a = left;
      e->b = right;
      left = e;
    }
    return left;
  }

  const Expr* parse_not() {
    if (is_name(cur(), "not")) {
      const Token& t = cur();
      next();
      DepthGuard guard(this);
      if (!check_depth()) return nullptr;
      const Expr* operand = parse_not();
      JINJA_TRY(operand);
      Expr* e = new_expr(ExprKind::kNot, t);
      e->a = operand;
      return e;
    }
    return parse_compare();
  }

  const Expr* parse_compare() {
    const Token& start = cur();
    const Expr* first = parse_math1();
    JINJA_TRY(first);
    std::vector<const Expr*> operands{first};
    std::vector<CmpOp> ops;
    for (;;) {
      CmpOp op;
      switch (cur().type) {
        case Tok::kEq:
          op = CmpOp::kEq;
          break;
        case Tok::kNe:
          op = CmpOp::kNe;
          break;
        case Tok::kLt:
          op = CmpOp::kLt;
          break;
        case Tok::kLe:
          op = CmpOp::kLe;
          break;
        case Tok::kGt:
          op = CmpOp::kGt;
          break;
        case Tok::kGe:
          op = CmpOp::kGe;
          break;
        default:
          if (is_name(cur(), "in")) {
            op = CmpOp::kIn;
          } else if (is_name(cur(), "not") && is_name(look(), "in")) {
            op = CmpOp::kNotIn;
            next();
          } else {
            goto done;
          }
      }
      next();
      {
        const Expr* operand = parse_math1();
        JINJA_TRY(operand);
        ops.push_back(op);
        operands.push_back(operand);
      }
    }
  done:
    if (ops.empty()) return first;
    Expr* e = new_expr(ExprKind::kCompare, start);
    e->args = std::move(operands);
    e->cmp_ops = std::move(ops);
    return e;
  }

  const Expr* binary(const Token& at, BinOp op, const Expr* a, const Expr* b) {
    Expr* e = new_expr(ExprKind::kBinary, at);
    e->op = static_cast<uint8_t>(op);
    e->a = a;
    e->b = b;
    return e;
  }

  const Expr* parse_math1() {
    const Expr* left = parse_concat();
    JINJA_TRY(left);
    while (cur().type == Tok::kAdd || cur().type == Tok::kSub) {
      const Token& t = cur();
      const BinOp op = t.type == Tok::kAdd ? BinOp::kAdd : BinOp::kSub;
      next();
      const Expr* right = parse_concat();
      JINJA_TRY(right);
      left = binary(t, op, left, right);
    }
    return left;
  }

  const Expr* parse_concat() {
    const Token& start = cur();
    const Expr* first = parse_math2();
    JINJA_TRY(first);
    if (cur().type != Tok::kTilde) return first;
    Expr* e = new_expr(ExprKind::kConcat, start);
    e->args.push_back(first);
    while (skip(Tok::kTilde)) {
      const Expr* part = parse_math2();
      JINJA_TRY(part);
      e->args.push_back(part);
    }
    return e;
  }

  const Expr* parse_math2() {
    const Expr* left = parse_pow();
    JINJA_TRY(left);
    for (;;) {
      const Token& t = cur();
      BinOp op;
      switch (t.type) {
        case Tok::kMul:
          op = BinOp::kMul;
          break;
        case Tok::kDiv:
          op = BinOp::kDiv;
          break;
        case Tok::kFloorDiv:
          op = BinOp::kFloorDiv;
          break;
        case Tok::kMod:
          op = BinOp::kMod;
          break;
        default:
          return left;
      }
      next();
      const Expr* right = parse_pow();
      JINJA_TRY(right);
      left = binary(t, op, left, right);
    }
  }

  const Expr* parse_pow() {
    const Expr* left = parse_unary(true);
    JINJA_TRY(left);
    while (cur().type == Tok::kPow) {
      const Token& t = cur();
      next();
      const Expr* right = parse_unary(true);
      JINJA_TRY(right);
      left = binary(t, BinOp::kPow, left, right);
    }
    return left;
  }

  const Expr* parse_unary(bool with_filter) {
    DepthGuard guard(this);
    if (!check_depth()) return nullptr;
    const Token& t = cur();
    const Expr* node = nullptr;
    if (t.type == Tok::kSub || t.type == Tok::kAdd) {
      next();
      const Expr* operand = parse_unary(false);
      JINJA_TRY(operand);
      Expr* e = new_expr(t.type == Tok::kSub ? ExprKind::kNeg : ExprKind::kPos, t);
      e->a = operand;
      node = e;
    } else {
      node = parse_primary();
      JINJA_TRY(node);
    }
    node = parse_postfix(node);
    JINJA_TRY(node);
    if (with_filter) node = parse_filter_expr(node);
    return node;
  }

  const Expr* parse_primary() {
    DepthGuard guard(this);
    if (!check_depth()) return nullptr;
    const Token& t = cur();
    switch (t.type) {
      case Tok::kName: {
        next();
        Expr* e = nullptr;
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          e = new_expr(ExprKind::kLiteral, t);
          e->literal = Value::boolean(t.text[0] == 't' || t.text[0] == 'T');
        } else if (t.text == "none" || t.text == "None") {
          e = new_expr(ExprKind::kLiteral, t);
          e->literal = Value::none();
        } else {
          e = name_expr(t, t.text);
        }
        return e;
      }
      case Tok::kString: {
        next();
        Expr* e = new_expr(ExprKind::kLiteral, t);
        if (cur().type != Tok::kString) {
          e->literal = Value::string(t.text);
          return e;
        }
        std::string joined(t.text);  // adjacent literals concatenate, as in Python
        while (cur().type == Tok::kString) {
          joined += cur().text;
          next();
        }
        program_->strings.push_back(std::move(joined));
        e->literal = Value::string(program_->strings.back());
        return e;
      }
      case Tok::kInteger: {
        next();
        Expr* e = new_expr(ExprKind::kLiteral, t);
        e->literal = Value::integer(t.integer);
        return e;
      }
      case Tok::kFloat: {
        next();
        Expr* e = new_expr(ExprKind::kLiteral, t);
        e->literal = Value::floating(t.real);
        return e;
      }
      case Tok::kLParen: {
        next();
        const Expr* e = parse_tuple(false, true, {}, /*explicit_parens=*/true);
        JINJA_TRY(e);
        JINJA_TRY(expect(Tok::kRParen));
        return e;
      }
      case Tok::kLBracket: {
        next();
        Expr* e = new_expr(ExprKind::kList, t);
        while (cur().type != Tok::kRBracket) {
          if (!e->args.empty()) JINJA_TRY(expect(Tok::kComma));
          if (cur().type == Tok::kRBracket) break;
          const Expr* item = parse_expression(true);
          JINJA_TRY(item);
          e->args.push_back(item);
        }
        JINJA_TRY(expect(Tok::kRBracket));
        return e;
      }
      case Tok::kLBrace: {
        next();
        Expr* e = new_expr(ExprKind::kDict, t);
        while (cur().type != Tok::kRBrace) {
          if (!e->args.empty()) JINJA_TRY(expect(Tok::kComma));
          if (cur().type == Tok::kRBrace) break;
          const Expr* key = parse_expression(true);
          JINJA_TRY(key);
          JINJA_TRY(expect(Tok::kColon));
          const Expr* value = parse_expression(true);
          JINJA_TRY(value);
          e->args.push_back(key);
          e->args.push_back(value);
        }
        JINJA_TRY(expect(Tok::kRBrace));
        return e;
      }
      case Tok::kEof:
        return fail(t, "unexpected end of template");
      default:
        return fail(t, "unexpected '" + describe(t) + "'");
    }
  }

  const Expr* parse_postfix(const Expr* node) {
    for (;;) {
      const Tok type = cur().type;
      if (type == Tok::kDot || type == Tok::kLBracket) {
        node = parse_subscript(node);
      } else if (type == Tok::kLParen) {
        node = parse_call(node);
      } else {
        return node;
      }
      JINJA_TRY(node);
    }
  }

  const Expr* parse_filter_expr(const Expr* node) {
    for (;;) {
      if (cur().type == Tok::kPipe) {
        node = parse_filter(node, false);
      } else if (is_name(cur(), "is")) {
        node = parse_test(node);
      } else if (cur().type == Tok::kLParen) {
        node = parse_call(node);
      } else {
        return node;
      }
      JINJA_TRY(node);
    }
  }

  const Expr* parse_subscript(const Expr* node) {
    const Token& t = cur();
    next();
    if (t.type == Tok::kDot) {
      const Token& attr = cur();
      next();
      if (attr.type == Tok::kName) {
        Expr* e = new_expr(ExprKind::kGetAttr, attr);
        e->a = node;
        e->name = attr.text;
        e->flags = attribute_flags(attr.text);
        return e;
      }
      if (attr.type != Tok::kInteger) return fail(attr, "expected name or number");
      Expr* key = new_expr(ExprKind::kLiteral, attr);
      key->literal = Value::integer(attr.integer);
      Expr* e = new_expr(ExprKind::kGetItem, attr);
      e->a = node;
      e->b = key;
      return e;
    }
    std::vector<const Expr*> args;
    while (cur().type != Tok::kRBracket) {
      if (!args.empty()) JINJA_TRY(expect(Tok::kComma));
      const Expr* arg = parse_subscribed();
      JINJA_TRY(arg);
      args.push_back(arg);
    }
    JINJA_TRY(expect(Tok::kRBracket));
    Expr* e = new_expr(ExprKind::kGetItem, t);
    e->a = node;
    if (args.size() == 1) {
      e->b = args[0];
    } else {
      Expr* tuple = new_expr(ExprKind::kTuple, t);
      tuple->args = std::move(args);
      e->b = tuple;
    }
    return e;
  }

  const Expr* parse_subscribed() {
    const Token& t = cur();
    const Expr* start = nullptr;
    if (cur().type == Tok::kColon) {
      next();
    } else {
      start = parse_expression(true);
      JINJA_TRY(start);
      if (cur().type != Tok::kColon) return start;
      next();
    }
    Expr* slice = new_expr(ExprKind::kSlice, t);
    slice->a = start;
    if (cur().type != Tok::kColon && cur().type != Tok::kRBracket && cur().type != Tok::kComma) {
      slice->b = parse_expression(true);
      JINJA_TRY(slice->b);
    }
    if (cur().type == Tok::kColon) {
      next();
      if (cur().type != Tok::kRBracket && cur().type != Tok::kComma) {
        slice->c = parse_expression(true);
        JINJA_TRY(slice->c);
      }
    }
    return slice;
  }

  // `(args, name=value, *args, **kwargs)` into e.
  bool parse_call_args(Expr* e) {
    const Token& open = cur();
    JINJA_TRY(expect(Tok::kLParen));
    bool require_comma = false;
    auto invalid = [&]() {
      fail(open, "invalid syntax for function call expression");
      return false;
    };
    while (cur().type != Tok::kRParen) {
      if (require_comma) {
        JINJA_TRY(expect(Tok::kComma));
        if (cur().type == Tok::kRParen) break;
      }
      if (cur().type == Tok::kMul) {
        if (e->star_args != nullptr || e->star_kwargs != nullptr) return invalid();
        next();
        e->star_args = parse_expression(true);
        JINJA_TRY(e->star_args);
      } else if (cur().type == Tok::kPow) {
        if (e->star_kwargs != nullptr) return invalid();
        next();
        e->star_kwargs = parse_expression(true);
        JINJA_TRY(e->star_kwargs);
      } else if (cur().type == Tok::kName && look().type == Tok::kAssign) {
        if (e->star_kwargs != nullptr) return invalid();
        const std::string_view key = cur().text;
        next();
        next();
        const Expr* value = parse_expression(true);
        JINJA_TRY(value);
        e->kwargs.push_back({key, value});
      } else {
        if (e->star_args != nullptr || e->star_kwargs != nullptr || !e->kwargs.empty())
          return invalid();
        const Expr* arg = parse_expression(true);
        JINJA_TRY(arg);
        e->args.push_back(arg);
      }
      require_comma = true;
    }
    return expect(Tok::kRParen);
  }

  const Expr* parse_call(const Expr* node) {
    Expr* e = new_expr(ExprKind::kCall, cur());
    e->a = node;
    JINJA_TRY(parse_call_args(e));
    return e;
  }

  // `| name(args)` chains; with start_inline the first filter has no leading pipe
  // ({% filter name %}). A null node stands for the block's rendered body.
  const Expr* parse_filter(const Expr* node, bool start_inline) {
    while (cur().type == Tok::kPipe || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const Token* name = expect_any_name();
      JINJA_TRY(name);
      if (cur().type == Tok::kDot) return fail(cur(), "dotted filter names are not supported");
      Expr* e = new_expr(ExprKind::kFilter, *name);
      e->a = node;
      e->name = name->text;
      e->op = static_cast<uint8_t>(find_filter(name->text));
      if (cur().type == Tok::kLParen) JINJA_TRY(parse_call_args(e));
      node = e;
    }
    return node;
  }

  const Expr* parse_test(const Expr* node) {
    const Token& is = cur();
    next();
    const bool negated = skip_name("not");
    const Token* name = expect_any_name();
    JINJA_TRY(name);
    if (cur().type == Tok::kDot) return fail(cur(), "dotted test names are not supported");
    Expr* e = new_expr(ExprKind::kTest, *name);
    e->a = node;
    e->name = name->text;
    e->op = static_cast<uint8_t>(find_test(name->text));
    const Tok type = cur().type;
    if (type == Tok::kLParen) {
      JINJA_TRY(parse_call_args(e));
    } else if ((type == Tok::kName || type == Tok::kString || type == Tok::kInteger ||
                type == Tok::kFloat || type == Tok::kLBracket || type == Tok::kLBrace) &&
               !is_name(cur(), "else") && !is_name(cur(), "or") && !is_name(cur(), "and")) {
      if (is_name(cur(), "is")) return fail(cur(), "You cannot chain multiple tests with is");
      const Expr* arg = parse_primary();
      JINJA_TRY(arg);
      arg = parse_postfix(arg);
      JINJA_TRY(arg);
      e->args.push_back(arg);
    }
    if (!negated) return e;
    Expr* n = new_expr(ExprKind::kNot, is);
    n->a = e;
    return n;
  }

  Program* program_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macro_stack_;
  std::vector<std::string_view> tag_stack_;
  Status status_;
};

#undef JINJA_TRY

}  // namespace

Result<std::shared_ptr<const Program>> parse_program(std::string_view source) {
  auto program = std::make_shared<Program>();
  program->source = normalize_source(source);
  INFERA_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(program.get()));
  Parser parser(program.get(), std::move(tokens));
  INFERA_RETURN_IF_ERROR(parser.run());
  return std::shared_ptr<const Program>(std::move(program));
}

}  // namespace infera::jinja
