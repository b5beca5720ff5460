#include "infera/jinja/interpreter.h"

#include <boost/json/value.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "infera/jinja/builtin_args.h"
#include "infera/jinja/text.h"

namespace infera::jinja {

// --- Arena ------------------------------------------------------------------------------------

namespace {
constexpr size_t kFirstChunk = 8 << 10;
constexpr size_t kMaxRegularChunk = 4 << 20;
// C++ recursion through eval/exec, counted in frames. Bounds stack use whatever the template.
constexpr int kMaxEvalDepth = 1000;
}  // namespace

bool Arena::add_chunk(size_t min_bytes) {
  size_t size = chunks_.empty() ? kFirstChunk : std::min(chunks_.back().size * 2, kMaxRegularChunk);
  // Room to grow a large string in place several times (amortised linear concatenation).
  if (size < min_bytes) size = min_bytes > SIZE_MAX / 2 ? min_bytes : min_bytes * 2;
  if (reserved_ + size > limit_) size = min_bytes;
  if (size < min_bytes || reserved_ + size > limit_) return false;
  Chunk chunk{std::unique_ptr<char[]>(new (std::nothrow) char[size]), size};
  if (chunk.data == nullptr) return false;
  cur_ = chunk.data.get();
  end_ = cur_ + size;
  reserved_ += size;
  chunks_.push_back(std::move(chunk));
  return true;
}

void* Arena::allocate(size_t bytes, size_t align) {
  auto fits = [&]() -> char* {
    if (cur_ == nullptr) return nullptr;
    const auto p = reinterpret_cast<uintptr_t>(cur_);
    const uintptr_t aligned = (p + align - 1) & ~(static_cast<uintptr_t>(align) - 1);
    const auto room = static_cast<size_t>(reinterpret_cast<uintptr_t>(end_) - aligned);
    if (aligned > reinterpret_cast<uintptr_t>(end_) || room < bytes) return nullptr;
    char* out = reinterpret_cast<char*>(aligned);
    cur_ = out + bytes;
    return out;
  };
  if (char* p = fits()) return p;
  if (bytes > SIZE_MAX - align || !add_chunk(bytes + align)) return nullptr;
  return fits();
}

bool Arena::extend(const char* p, size_t old_bytes, size_t new_bytes) {
  if (p == nullptr || p + old_bytes != cur_ || new_bytes < old_bytes) return false;
  if (static_cast<size_t>(end_ - cur_) < new_bytes - old_bytes) return false;
  cur_ += new_bytes - old_bytes;
  return true;
}

// --- errors and bookkeeping -------------------------------------------------------------------

struct DepthGuard {
  explicit DepthGuard(Interpreter* in) : interpreter(in) { ++interpreter->depth_; }
  ~DepthGuard() { --interpreter->depth_; }
  Interpreter* interpreter;
};

Interpreter::Interpreter(const Program& program, const Limits& limits,
                         std::chrono::system_clock::time_point now)
    : program_(program), limits_(limits), now_(now), arena_(limits.max_memory_bytes) {}

bool Interpreter::fail(const Expr& at, std::string_view message) {
  if (status_.ok()) {
    std::string m = "template error";
    if (at.line != 0) m += " at line " + std::to_string(at.line);
    m += ": ";
    m += message;
    status_ = invalid_argument(std::move(m));
  }
  return false;
}

bool Interpreter::fail_limit(std::string_view message) {
  if (status_.ok())
    status_ = resource_exhausted("template render stopped: " + std::string(message));
  return false;
}

bool Interpreter::charge(const Expr& /*at*/, uint64_t units) {
  steps_ += units;
  if (steps_ > limits_.max_steps) {
    return fail_limit("more than " + std::to_string(limits_.max_steps) + " steps");
  }
  return true;
}

namespace {
std::string_view kind_object_name(Kind k) {
  switch (k) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool object";
    case Kind::kInt:
      return "int object";
    case Kind::kFloat:
      return "float object";
    case Kind::kString:
      return "str object";
    case Kind::kList:
      return "list object";
    case Kind::kDict:
      return "dict object";
    case Kind::kNamespace:
      return "jinja2.utils.Namespace object";
    case Kind::kMacro:
      return "jinja2.runtime.Macro object";
    case Kind::kLoop:
      return "jinja2.runtime.LoopContext object";
    default:
      return "object";
  }
}
}  // namespace

bool Interpreter::fail_undefined(const Expr& at, const Value& u) {
  const auto reason = static_cast<UndefReason>(u.sub);
  const auto owner = static_cast<Kind>(u.owner);
  std::string m;
  switch (reason) {
    case UndefReason::kName:
      m = "'" + std::string(u.sv()) + "' is undefined";
      break;
    case UndefReason::kAttribute:
      m = "'" + std::string(kind_object_name(owner)) + "' has no attribute '" +
          std::string(u.sv()) + "'";
      break;
    case UndefReason::kElement:
      m = std::string(kind_object_name(owner)) + " has no element " + std::string(u.sv());
      break;
    case UndefReason::kMessage:
    case UndefReason::kNotGiven:
      m = std::string(u.sv());
      break;
    case UndefReason::kUnsafe:
      m = "access to attribute '" + std::string(u.sv()) + "' of '" +
          std::string(kind_object_name(owner)).substr(0, kind_object_name(owner).size() - 7) +
          "' object is unsafe.";
      break;
  }
  return fail(at, m);
}

// --- arena values -----------------------------------------------------------------------------

bool Interpreter::new_string(const Expr& /*at*/, std::string_view s, Value* out) {
  if (s.empty()) {
    *out = Value::string({});
    return true;
  }
  char* p = arena_.allocate_array<char>(s.size());
  if (p == nullptr) {
    return fail_limit("memory limit of " + std::to_string(limits_.max_memory_bytes) +
                      " bytes exceeded");
  }
  std::memcpy(p, s.data(), s.size());
  *out = Value::string({p, s.size()});
  return true;
}

bool Interpreter::new_values(const Expr& /*at*/, size_t n, Value** out) {
  if (n == 0) {
    *out = nullptr;
    return true;
  }
  Value* p = arena_.allocate_array<Value>(n);
  if (p == nullptr) {
    return fail_limit("memory limit of " + std::to_string(limits_.max_memory_bytes) +
                      " bytes exceeded");
  }
  for (size_t i = 0; i < n; ++i) new (&p[i]) Value();
  *out = p;
  return true;
}

int Interpreter::value_depth(const Value& v) {
  return (v.kind == Kind::kList || v.kind == Kind::kDict) ? v.owner : 0;
}

bool Interpreter::new_list(const Expr& at, std::span<const Value> items, ListFlavor flavor,
                           Value* out) {
  int depth = 0;
  for (const Value& v : items) depth = std::max(depth, value_depth(v));
  if (depth + 1 > kMaxValueDepth) return fail(at, "value nested too deeply");
  Value* p = nullptr;
  if (!new_values(at, items.size(), &p)) return false;
  if (!items.empty())
    std::memcpy(static_cast<void*>(p), items.data(), items.size() * sizeof(Value));
  *out = Value::list(p, items.size(), flavor);
  out->owner = static_cast<uint8_t>(depth + 1);
  return true;
}

bool Interpreter::new_dict(const Expr& at, std::span<const DictEntry> entries, Value* out) {
  int depth = 0;
  for (const DictEntry& e : entries)
    depth = std::max({depth, value_depth(e.key), value_depth(e.value)});
  if (depth + 1 > kMaxValueDepth) return fail(at, "value nested too deeply");
  DictEntry* p = nullptr;
  if (!entries.empty()) {
    p = arena_.allocate_array<DictEntry>(entries.size());
    if (p == nullptr) {
      return fail_limit("memory limit of " + std::to_string(limits_.max_memory_bytes) +
                        " bytes exceeded");
    }
    std::memcpy(static_cast<void*>(p), entries.data(), entries.size() * sizeof(DictEntry));
  }
  *out = Value::dict(p, entries.size());
  out->owner = static_cast<uint8_t>(depth + 1);
  return true;
}

bool Interpreter::concat_strings(const Expr& /*at*/, const Value& a, std::string_view b,
                                 Value* out) {
  if (b.empty()) {
    *out = a;
    return true;
  }
  const size_t n = a.size + b.size();
  if (n > limits_.max_memory_bytes) {
    return fail_limit("memory limit of " + std::to_string(limits_.max_memory_bytes) +
                      " bytes exceeded");
  }
  if (a.size > 0 && arena_.extend(a.str, a.size, n)) {
    std::memcpy(const_cast<char*>(a.str) + a.size, b.data(), b.size());
    *out = Value::string({a.str, n});
    return true;
  }
  char* p = arena_.allocate_array<char>(n);
  if (p == nullptr) {
    return fail_limit("memory limit of " + std::to_string(limits_.max_memory_bytes) +
                      " bytes exceeded");
  }
  if (a.size > 0) std::memcpy(p, a.str, a.size);
  std::memcpy(p + a.size, b.data(), b.size());
  *out = Value::string({p, n});
  return true;
}

// --- scopes -----------------------------------------------------------------------------------

Scope* Interpreter::new_scope(Scope* parent) {
  Scope* s = arena_.allocate_array<Scope>(1);
  if (s == nullptr) {
    fail_limit("memory limit of " + std::to_string(limits_.max_memory_bytes) + " bytes exceeded");
    return nullptr;
  }
  new (s) Scope();
  s->parent = parent;
  return s;
}

bool Interpreter::set_var(Scope* scope, int32_t symbol, const Value& v) {
  for (uint32_t i = 0; i < scope->size; ++i) {
    if (scope->vars[i].symbol == symbol) {
      scope->vars[i].value = v;
      return true;
    }
  }
  if (scope->size == scope->capacity) {
    const uint32_t cap = scope->capacity == 0 ? 4 : scope->capacity * 2;
    auto* vars = arena_.allocate_array<Scope::Var>(cap);
    if (vars == nullptr) {
      return fail_limit("memory limit of " + std::to_string(limits_.max_memory_bytes) +
                        " bytes exceeded");
    }
    if (scope->size > 0)
      std::memcpy(static_cast<void*>(vars), scope->vars, scope->size * sizeof(Scope::Var));
    scope->vars = vars;
    scope->capacity = cap;
  }
  scope->vars[scope->size].symbol = symbol;
  new (&scope->vars[scope->size].value) Value(v);
  ++scope->size;
  return true;
}

bool Interpreter::lookup(const Scope* scope, int32_t symbol, Value* out) const {
  for (const Scope* s = scope; s != nullptr; s = s->parent) {
    for (uint32_t i = 0; i < s->size; ++i) {
      if (s->vars[i].symbol == symbol) {
        *out = s->vars[i].value;
        return true;
      }
    }
  }
  const auto index = static_cast<size_t>(symbol);
  if (has_global_[index]) {
    *out = globals_[index];
    return true;
  }
  const std::string& name = program_.symbol_names[index];
  *out = Value::undefined(UndefReason::kName, name);
  return false;
}

// --- JSON input -------------------------------------------------------------------------------

bool Interpreter::from_json(const boost::json::value& j, Value* out, int depth) {
  static const Expr kInput;
  if (depth > kMaxValueDepth) return fail(kInput, "input JSON nested too deeply");
  switch (j.kind()) {
    case boost::json::kind::null:
      *out = Value::none();
      return true;
    case boost::json::kind::bool_:
      *out = Value::boolean(j.get_bool());
      return true;
    case boost::json::kind::int64:
      *out = Value::integer(j.get_int64());
      return true;
    case boost::json::kind::uint64: {
      const uint64_t u = j.get_uint64();
      *out = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? Value::integer(static_cast<int64_t>(u))
                 : Value::floating(static_cast<double>(u));
      return true;
    }
    case boost::json::kind::double_:
      *out = Value::floating(j.get_double());
      return true;
    case boost::json::kind::string: {
      const auto& s = j.get_string();
      *out = Value::string({s.data(), s.size()});
      return true;
    }
    case boost::json::kind::array: {
      const auto& a = j.get_array();
      const size_t size = a.size();  // items is null when it is 0
      Value* items = nullptr;
      if (!new_values(kInput, size, &items)) return false;
      int d = 0;
      for (size_t i = 0; i < size; ++i) {
        if (!from_json(a[i], &items[i], depth + 1)) return false;
        // items is null here only if new_values failed, and then it returned false (through
        // fail_limit, whose result the analyzer loses this deep in the recursion).
        // NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker)
        d = std::max(d, value_depth(items[i]));
      }
      *out = Value::list(items, size);
      out->owner = static_cast<uint8_t>(d + 1);
      return true;
    }
    case boost::json::kind::object: {
      const auto& o = j.get_object();
      const size_t size = o.size();  // entries is null when it is 0
      DictEntry* entries = size == 0 ? nullptr : arena_.allocate_array<DictEntry>(size);
      if (size != 0 && entries == nullptr) return fail_limit("memory limit exceeded by the input");
      int d = 0;
      for (size_t i = 0; i < size; ++i) {
        const boost::json::key_value_pair& kv = o.begin()[i];  // the pairs are contiguous
        new (&entries[i]) DictEntry();
        entries[i].key = Value::string({kv.key().data(), kv.key().size()});
        if (!from_json(kv.value(), &entries[i].value, depth + 1)) return false;
        d = std::max(d, value_depth(entries[i].value));
      }
      *out = Value::dict(entries, size);
      out->owner = static_cast<uint8_t>(d + 1);
      return true;
    }
  }
  return false;
}

// --- render -----------------------------------------------------------------------------------

Result<std::string> Interpreter::render(std::span<const Binding> bindings) {
  const size_t n = program_.symbol_names.size();
  globals_.assign(n, Value());
  has_global_.assign(n, false);
  for (const Binding& b : bindings) {
    const int32_t sym = program_.find_symbol(b.name);
    if (sym < 0) continue;  // the template never names it
    Value v;
    bool ok = true;
    if (b.value != nullptr) {
      ok = from_json(*b.value, &v, 0);
    } else if (b.array != nullptr) {
      const size_t size = b.array->size();  // items is null when it is 0
      Value* items = nullptr;
      static const Expr kInput;
      ok = new_values(kInput, size, &items);
      int d = 0;
      for (size_t i = 0; ok && i < size; ++i) {
        ok = from_json((*b.array)[i], &items[i], 1);
        if (ok) d = std::max(d, value_depth(items[i]));
      }
      v = Value::list(items, size);
      v.owner = static_cast<uint8_t>(d + 1);
    } else if (b.object != nullptr) {
      static const Expr kInput;
      std::vector<DictEntry> entries;
      entries.reserve(b.object->size());
      for (const auto& kv : *b.object) {
        DictEntry e;
        e.key = Value::string({kv.key().data(), kv.key().size()});
        ok = from_json(kv.value(), &e.value, 1);
        if (!ok) break;
        entries.push_back(e);
      }
      if (ok) ok = new_dict(kInput, entries, &v);
    }
    if (!ok) return status_;
    globals_[static_cast<size_t>(sym)] = v;
    has_global_[static_cast<size_t>(sym)] = true;
  }
  const std::pair<int32_t, FunctionId> functions[] = {
      {kSymRange, FunctionId::kRange},
      {kSymNamespace, FunctionId::kNamespace},
      {kSymDict, FunctionId::kDict},
      {kSymRaiseException, FunctionId::kRaiseException},
      {kSymStrftimeNow, FunctionId::kStrftimeNow},
  };
  for (const auto& [sym, id] : functions) {
    if (has_global_[static_cast<size_t>(sym)]) continue;
    Value f;
    f.kind = Kind::kFunction;
    f.sub = static_cast<uint8_t>(id);
    globals_[static_cast<size_t>(sym)] = f;
    has_global_[static_cast<size_t>(sym)] = true;
  }

  std::string result;
  out_ = &result;
  Scope* root = new_scope(nullptr);
  if (root == nullptr) return status_;
  if (exec_body(program_.root, root) == Flow::kError) return status_;
  return result;
}

// --- output -----------------------------------------------------------------------------------

bool Interpreter::write_text(std::string_view s) {
  if (out_->size() + s.size() > limits_.max_output_bytes) {
    return fail_limit("output larger than " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out_->append(s);
  return true;
}

bool Interpreter::write(const Expr& /*at*/, std::string_view s) {
  return write_text(s);
}

bool Interpreter::write_value(const Expr& at, const Value& v) {
  if (v.kind == Kind::kString) return write(at, v.sv());
  if (v.kind == Kind::kUndefined) return true;  // jinja2 Undefined prints as ''
  to_str(v, out_);
  if (out_->size() > limits_.max_output_bytes) {
    return fail_limit("output larger than " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  return true;
}

bool Interpreter::capture(const Body& body, Scope* scope, Value* out) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  const Flow flow = exec_body(body, scope);
  out_ = saved;
  if (flow == Flow::kError) return false;
  static const Expr kCapture;
  return new_string(kCapture, buffer, out);
}

// --- statements -------------------------------------------------------------------------------

namespace {
Expr position_of(const Stmt& s) {
  Expr e;
  e.line = s.line;
  e.column = s.column;
  return e;
}
}  // namespace

Flow Interpreter::exec_body(const Body& body, Scope* scope) {
  for (const Stmt* s : body) {
    const Flow flow = exec(*s, scope);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Flow Interpreter::exec(const Stmt& s, Scope* scope) {
  if (++steps_ > limits_.max_steps) {
    fail_limit("more than " + std::to_string(limits_.max_steps) + " steps");
    return Flow::kError;
  }
  DepthGuard guard(this);
  if (depth_ > kMaxEvalDepth) {
    fail_limit("template nesting deeper than " + std::to_string(kMaxEvalDepth));
    return Flow::kError;
  }
  auto ok = [](bool b) { return b ? Flow::kNormal : Flow::kError; };
  switch (s.kind) {
    case StmtKind::kText:
      return ok(write_text(s.text));
    case StmtKind::kPrint: {
      Value v;
      if (!eval(*s.expr, scope, &v)) return Flow::kError;
      return ok(write_value(*s.expr, v));
    }
    case StmtKind::kIf:
      for (const Branch& branch : s.branches) {
        Value c;
        if (!eval(*branch.condition, scope, &c)) return Flow::kError;
        if (truthy(c)) return exec_body(branch.body, scope);
      }
      return exec_body(s.else_body, scope);
    case StmtKind::kFor:
      return exec_for(s, scope);
    case StmtKind::kSet: {
      Value v;
      if (!eval(*s.expr, scope, &v)) return Flow::kError;
      return ok(assign(*s.expr, s.target, v, scope));
    }
    case StmtKind::kSetBlock: {  // the body has its own scope: its assignments stay inside
      Value v;
      Scope* inner = new_scope(scope);
      if (inner == nullptr || !capture(s.body, inner, &v)) return Flow::kError;
      if (s.expr != nullptr && !eval_filter_chain(*s.expr, scope, v, &v)) return Flow::kError;
      return ok(assign(position_of(s), s.target, v, scope));
    }
    case StmtKind::kMacro: {
      auto* m = arena_.allocate_array<MacroData>(1);
      if (m == nullptr) return ok(fail_limit("memory limit exceeded"));
      m->def = s.macro;
      m->scope = scope;
      Value v;
      v.kind = Kind::kMacro;
      v.macro = m;
      return ok(set_var(scope, s.symbol, v));
    }
    case StmtKind::kCallBlock: {
      auto* m = arena_.allocate_array<MacroData>(1);
      if (m == nullptr) return ok(fail_limit("memory limit exceeded"));
      m->def = s.macro;
      m->scope = scope;
      KwArg caller;
      caller.name = "caller";
      caller.value.kind = Kind::kMacro;
      caller.value.macro = m;
      Value v;
      if (!eval_call(*s.expr, scope, &caller, &v)) return Flow::kError;
      return ok(write_value(*s.expr, v));
    }
    case StmtKind::kFilterBlock: {
      Value v;
      Scope* inner = new_scope(scope);
      if (inner == nullptr || !capture(s.body, inner, &v)) return Flow::kError;
      if (!eval_filter_chain(*s.expr, scope, v, &v)) return Flow::kError;
      return ok(write_value(*s.expr, v));
    }
    case StmtKind::kWith: {
      std::vector<Value> values(s.with_values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        if (!eval(*s.with_values[i], scope, &values[i])) return Flow::kError;
      }
      Scope* inner = new_scope(scope);
      if (inner == nullptr) return Flow::kError;
      for (size_t i = 0; i < values.size(); ++i) {
        if (!assign(*s.with_values[i], s.with_targets[i], values[i], inner)) return Flow::kError;
      }
      return exec_body(s.body, inner);
    }
    case StmtKind::kScope: {
      Scope* inner = new_scope(scope);
      if (inner == nullptr) return Flow::kError;
      return exec_body(s.body, inner);
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kError;
}

bool Interpreter::assign(const Expr& at, const Target& target, const Value& v, Scope* scope) {
  switch (target.kind) {
    case Target::Kind::kName:
      return set_var(scope, target.symbol, v);
    case Target::Kind::kAttribute: {
      Value ns;
      lookup(scope, target.symbol, &ns);
      if (ns.kind != Kind::kNamespace)
        return fail(at, "cannot assign attribute on non-namespace object");
      NamespaceData* data = ns.ns;
      for (size_t i = 0; i < data->size; ++i) {
        if (data->entries[i].key.sv() == target.attribute) {
          data->entries[i].value = v;
          return true;
        }
      }
      if (data->size == data->capacity) {
        const size_t cap = data->capacity == 0 ? 4 : data->capacity * 2;
        auto* entries = arena_.allocate_array<DictEntry>(cap);
        if (entries == nullptr) return fail_limit("memory limit exceeded");
        if (data->size > 0) {
          std::memcpy(static_cast<void*>(entries), data->entries, data->size * sizeof(DictEntry));
        }
        data->entries = entries;
        data->capacity = cap;
      }
      new (&data->entries[data->size]) DictEntry();
      data->entries[data->size].key = Value::string(target.attribute);
      data->entries[data->size].value = v;
      ++data->size;
      return true;
    }
    case Target::Kind::kTuple: {
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, v, &items, &n)) return false;
      const size_t want = target.items.size();
      if (n > want)
        return fail(at, "too many values to unpack (expected " + std::to_string(want) + ")");
      if (n < want) {
        return fail(at, "not enough values to unpack (expected " + std::to_string(want) + ", got " +
                            std::to_string(n) + ")");
      }
      for (size_t i = 0; i < n; ++i) {
        if (!assign(at, target.items[i], items[i], scope)) return false;
      }
      return true;
    }
  }
  return false;
}

Flow Interpreter::exec_for(const Stmt& s, Scope* scope) {
  Value seq;
  if (!eval(*s.expr, scope, &seq)) return Flow::kError;
  const Value* items = nullptr;
  size_t n = 0;
  if (!iterate(*s.expr, seq, &items, &n)) return Flow::kError;
  // One scope reused by every iteration: each starts empty, as jinja2's loop frame does.
  Scope* iteration = new_scope(scope);
  if (iteration == nullptr) return Flow::kError;
  if (s.loop_filter != nullptr && n > 0) {
    Value* kept = nullptr;
    if (!new_values(*s.expr, n, &kept)) return Flow::kError;
    size_t m = 0;
    for (size_t i = 0; i < n; ++i) {
      iteration->size = 0;
      if (!assign(*s.expr, s.target, items[i], iteration)) return Flow::kError;
      Value keep;
      if (!eval(*s.loop_filter, iteration, &keep)) return Flow::kError;
      if (truthy(keep)) kept[m++] = items[i];
    }
    items = kept;
    n = m;
  }
  if (n == 0) {
    iteration->size = 0;
    return exec_body(s.else_body, iteration);
  }
  auto* loop = arena_.allocate_array<LoopData>(1);
  if (loop == nullptr) {
    fail_limit("memory limit exceeded");
    return Flow::kError;
  }
  new (loop) LoopData{items, n};
  Value loop_value;
  loop_value.kind = Kind::kLoop;
  loop_value.loop = loop;
  for (size_t i = 0; i < n; ++i) {
    loop->index0 = i;
    iteration->size = 0;
    if (!assign(*s.expr, s.target, items[i], iteration)) return Flow::kError;
    if (!set_var(iteration, kSymLoop, loop_value)) return Flow::kError;
    const Flow flow = exec_body(s.body, iteration);
    if (flow == Flow::kBreak) break;
    if (flow == Flow::kError) return Flow::kError;
  }
  return Flow::kNormal;
}

// --- expressions ------------------------------------------------------------------------------

namespace {
// -v and +v.
bool unary(Interpreter& in, const Expr& e, bool negate, const Value& v, Value* out) {
  switch (v.kind) {
    case Kind::kUndefined:
      return in.fail_undefined(e, v);
    case Kind::kBool:
      *out = Value::integer(negate ? -static_cast<int64_t>(v.b) : static_cast<int64_t>(v.b));
      return true;
    case Kind::kInt:
      if (negate && v.i == std::numeric_limits<int64_t>::min()) {
        return in.fail(e, "integer overflow (infera supports 64-bit integers)");
      }
      *out = Value::integer(negate ? -v.i : v.i);
      return true;
    case Kind::kFloat:
      *out = Value::floating(negate ? -v.f : v.f);
      return true;
    default:
      return in.fail(e, std::string("bad operand type for unary ") + (negate ? "-" : "+") + ": '" +
                            std::string(Interpreter::type_name(v)) + "'");
  }
}
}  // namespace

bool Interpreter::eval(const Expr& e, Scope* scope, Value* out) {
  if (++steps_ > limits_.max_steps) {
    return fail_limit("more than " + std::to_string(limits_.max_steps) + " steps");
  }
  DepthGuard guard(this);
  if (depth_ > kMaxEvalDepth) {
    return fail_limit("template nesting deeper than " + std::to_string(kMaxEvalDepth));
  }
  switch (e.kind) {
    case ExprKind::kLiteral:
      *out = e.literal;
      return true;
    case ExprKind::kName:
      lookup(scope, e.symbol, out);
      return true;
    case ExprKind::kList:
    case ExprKind::kTuple:
      return eval_list(e, scope, out);
    case ExprKind::kDict:
      return eval_dict(e, scope, out);
    case ExprKind::kGetAttr: {
      Value obj;
      if (!eval(*e.a, scope, &obj)) return false;
      return get_attr(e, obj, e.name, e.flags, out);
    }
    case ExprKind::kGetItem: {
      Value obj;
      if (!eval(*e.a, scope, &obj)) return false;
      if (e.b->kind == ExprKind::kSlice) return slice(e, obj, *e.b, scope, out);
      Value key;
      if (!eval(*e.b, scope, &key)) return false;
      return get_item(e, obj, key, out);
    }
    case ExprKind::kSlice:
      return fail(e, "slice outside of a subscript");
    case ExprKind::kCall:
      return eval_call(e, scope, nullptr, out);
    case ExprKind::kFilter: {
      Value input;
      if (e.a != nullptr && !eval(*e.a, scope, &input)) return false;
      CallArgs args;
      if (!eval_args(e, scope, &args)) return false;
      return apply_filter(e, static_cast<FilterId>(e.op), e.name, input, args, out);
    }
    case ExprKind::kTest: {
      Value input;
      if (!eval(*e.a, scope, &input)) return false;
      CallArgs args;
      if (!eval_args(e, scope, &args)) return false;
      bool result = false;
      if (!apply_test(e, static_cast<TestId>(e.op), e.name, input, args, &result)) return false;
      *out = Value::boolean(result);
      return true;
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      Value v;
      if (!eval(*e.a, scope, &v)) return false;
      return unary(*this, e, e.kind == ExprKind::kNeg, v, out);
    }
    case ExprKind::kNot: {
      Value v;
      if (!eval(*e.a, scope, &v)) return false;
      *out = Value::boolean(!truthy(v));
      return true;
    }
    case ExprKind::kBinary: {
      Value a;
      Value b;
      if (!eval(*e.a, scope, &a) || !eval(*e.b, scope, &b)) return false;
      return binary(e, static_cast<BinOp>(e.op), a, b, out);
    }
    case ExprKind::kConcat:
      return eval_concat(e, scope, out);
    case ExprKind::kAnd: {
      if (!eval(*e.a, scope, out)) return false;
      if (!truthy(*out)) return true;
      return eval(*e.b, scope, out);
    }
    case ExprKind::kOr: {
      if (!eval(*e.a, scope, out)) return false;
      if (truthy(*out)) return true;
      return eval(*e.b, scope, out);
    }
    case ExprKind::kCompare:
      return eval_compare(e, scope, out);
    case ExprKind::kCondExpr: {
      Value c;
      if (!eval(*e.b, scope, &c)) return false;
      if (truthy(c)) return eval(*e.a, scope, out);
      if (e.c != nullptr) return eval(*e.c, scope, out);
      *out = Value::undefined(
          UndefReason::kMessage,
          "the inline if-expression evaluated to false and no else section was defined.");
      return true;
    }
  }
  return fail(e, "unknown expression");
}

bool Interpreter::eval_list(const Expr& e, Scope* scope, Value* out) {
  const size_t n = e.args.size();
  Value* items = nullptr;
  if (!new_values(e, n, &items)) return false;
  int depth = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!eval(*e.args[i], scope, &items[i])) return false;
    depth = std::max(depth, value_depth(items[i]));
  }
  if (depth + 1 > kMaxValueDepth) return fail(e, "value nested too deeply");
  *out = Value::list(items, n, e.kind == ExprKind::kTuple ? ListFlavor::kTuple : ListFlavor::kList);
  out->owner = static_cast<uint8_t>(depth + 1);
  return true;
}

bool Interpreter::eval_dict(const Expr& e, Scope* scope, Value* out) {
  std::vector<DictEntry> entries;
  entries.reserve(e.args.size() / 2);
  for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
    DictEntry entry;
    if (!eval(*e.args[i], scope, &entry.key) || !eval(*e.args[i + 1], scope, &entry.value)) {
      return false;
    }
    if (entry.key.kind == Kind::kList || entry.key.kind == Kind::kDict ||
        entry.key.kind == Kind::kUndefined || entry.key.kind == Kind::kNamespace) {
      if (!(entry.key.kind == Kind::kList && entry.key.flavor() == ListFlavor::kTuple)) {
        return fail(e, "unhashable type: '" + std::string(type_name(entry.key)) + "'");
      }
    }
    bool replaced = false;  // a repeated key keeps its first position, takes the last value
    for (DictEntry& existing : entries) {
      if (equals(existing.key, entry.key)) {
        existing.value = entry.value;
        replaced = true;
        break;
      }
    }
    if (!replaced) entries.push_back(entry);
  }
  return new_dict(e, entries, out);
}

bool Interpreter::eval_concat(const Expr& e, Scope* scope, Value* out) {
  Value acc;
  std::string scratch;
  for (size_t i = 0; i < e.args.size(); ++i) {
    Value part;
    if (!eval(*e.args[i], scope, &part)) return false;
    std::string_view piece;
    if (part.kind == Kind::kString) {
      piece = part.sv();
    } else {
      scratch.clear();
      to_str(part, &scratch);
      piece = scratch;
    }
    if (i == 0) {
      if (part.kind == Kind::kString) {
        acc = part;
      } else if (!new_string(e, piece, &acc)) {
        return false;
      }
    } else if (!concat_strings(e, acc, piece, &acc)) {
      return false;
    }
  }
  *out = acc;
  return true;
}

bool Interpreter::eval_compare(const Expr& e, Scope* scope, Value* out) {
  Value left;
  if (!eval(*e.args[0], scope, &left)) return false;
  for (size_t i = 0; i < e.cmp_ops.size(); ++i) {
    Value right;
    if (!eval(*e.args[i + 1], scope, &right)) return false;
    bool r = false;
    if (!compare(e, e.cmp_ops[i], left, right, &r)) return false;
    if (!r) {
      *out = Value::boolean(false);
      return true;
    }
    left = right;
  }
  *out = Value::boolean(true);
  return true;
}

bool Interpreter::eval_filter_chain(const Expr& e, Scope* scope, const Value& input, Value* out) {
  Value base = input;
  if (e.a != nullptr && !eval_filter_chain(*e.a, scope, input, &base)) return false;
  CallArgs args;
  if (!eval_args(e, scope, &args)) return false;
  return apply_filter(e, static_cast<FilterId>(e.op), e.name, base, args, out);
}

namespace {
bool grow(Interpreter* in, const Expr& at, Value** data, size_t n, size_t* capacity) {
  const size_t cap = *capacity * 2;
  Value* bigger = nullptr;
  if (!in->new_values(at, cap, &bigger)) return false;
  std::memcpy(static_cast<void*>(bigger), *data, n * sizeof(Value));
  *data = bigger;
  *capacity = cap;
  return true;
}
bool grow_kw(Interpreter* in, KwArg** data, size_t n, size_t* capacity) {
  const size_t cap = *capacity * 2;
  auto* bigger = in->arena().allocate_array<KwArg>(cap);
  if (bigger == nullptr) return in->fail_limit("memory limit exceeded");
  std::memcpy(static_cast<void*>(bigger), *data, n * sizeof(KwArg));
  *data = bigger;
  *capacity = cap;
  return true;
}
}  // namespace

bool Interpreter::eval_args(const Expr& e, Scope* scope, CallArgs* args) {
  for (const Expr* a : e.args) {
    if (args->npos == args->pos_capacity &&
        !grow(this, e, &args->pos, args->npos, &args->pos_capacity)) {
      return false;
    }
    if (!eval(*a, scope, &args->pos[args->npos])) return false;
    ++args->npos;
  }
  if (e.star_args != nullptr) {
    Value v;
    if (!eval(*e.star_args, scope, &v)) return false;
    const Value* items = nullptr;
    size_t n = 0;
    if (!iterate(e, v, &items, &n)) return false;
    for (size_t i = 0; i < n; ++i) {
      if (args->npos == args->pos_capacity &&
          !grow(this, e, &args->pos, args->npos, &args->pos_capacity)) {
        return false;
      }
      args->pos[args->npos++] = items[i];
    }
  }
  auto add_kw = [&](std::string_view name, const Value& v) {
    for (size_t i = 0; i < args->nkw; ++i) {
      if (args->kw[i].name == name) {
        return fail(e, "got multiple values for keyword argument '" + std::string(name) + "'");
      }
    }
    if (args->nkw == args->kw_capacity &&
        !grow_kw(this, &args->kw, args->nkw, &args->kw_capacity)) {
      return false;
    }
    args->kw[args->nkw].name = name;
    args->kw[args->nkw].value = v;
    ++args->nkw;
    return true;
  };
  for (const Keyword& k : e.kwargs) {
    Value v;
    if (!eval(*k.value, scope, &v)) return false;
    if (!add_kw(k.name, v)) return false;
  }
  if (e.star_kwargs != nullptr) {
    Value v;
    if (!eval(*e.star_kwargs, scope, &v)) return false;
    if (v.kind != Kind::kDict) return fail(e, "argument after ** must be a mapping");
    for (size_t i = 0; i < v.size; ++i) {
      if (v.entries[i].key.kind != Kind::kString) return fail(e, "keywords must be strings");
      if (!add_kw(v.entries[i].key.sv(), v.entries[i].value)) return false;
    }
  }
  return true;
}

bool Interpreter::eval_call(const Expr& e, Scope* scope, const KwArg* extra, Value* out) {
  const Expr& callee = *e.a;
  Value fn;
  Value self;
  bool method = false;
  if (callee.kind == ExprKind::kGetAttr) {
    if (!eval(*callee.a, scope, &self)) return false;
    if (self.kind == Kind::kUndefined) return fail_undefined(callee, self);
    method = has_method(self, callee.flags);
    if (!method && !get_attr(callee, self, callee.name, callee.flags, &fn)) return false;
  } else if (!eval(callee, scope, &fn)) {
    return false;
  }
  CallArgs args;
  if (!eval_args(e, scope, &args)) return false;
  if (extra != nullptr) {
    if (args.nkw == args.kw_capacity && !grow_kw(this, &args.kw, args.nkw, &args.kw_capacity))
      return false;
    args.kw[args.nkw++] = *extra;
  }
  if (method) return call_method(e, self, callee.name, args, out);
  return call_value(e, fn, args, out);
}

bool Interpreter::call_value(const Expr& at, const Value& callee, const CallArgs& args,
                             Value* out) {
  switch (callee.kind) {
    case Kind::kMacro:
      return invoke_macro(at, *callee.macro, args, out);
    case Kind::kFunction:
      return call_function(at, static_cast<FunctionId>(callee.sub), args, out);
    case Kind::kMethod:
      return call_method(at, callee.method->self, callee.method->name, args, out);
    case Kind::kUndefined:
      return fail_undefined(at, callee);
    default:
      return fail(at, "'" + std::string(type_name(callee)) + "' object is not callable");
  }
}

bool Interpreter::invoke_macro(const Expr& at, const MacroData& macro, const CallArgs& args,
                               Value* out) {
  const MacroDef& def = *macro.def;
  if (++macro_depth_ > limits_.max_call_depth) {
    --macro_depth_;
    return fail_limit("macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
  }
  struct Exit {
    int* depth;
    ~Exit() { --*depth; }
  } exit{&macro_depth_};

  Scope* scope = new_scope(macro.scope);
  if (scope == nullptr) return false;
  const size_t nparams = def.params.size();
  const size_t npos = std::min(args.npos, nparams);
  for (size_t i = 0; i < npos; ++i) {
    if (!set_var(scope, def.params[i], args.pos[i])) return false;
  }
  std::vector<bool> used(args.nkw, false);
  for (size_t i = npos; i < nparams; ++i) {
    bool found = false;
    for (size_t k = 0; k < args.nkw; ++k) {
      if (!used[k] && args.kw[k].name == def.param_names[i]) {
        used[k] = true;
        found = true;
        if (!set_var(scope, def.params[i], args.kw[k].value)) return false;
        break;
      }
    }
    if (found) continue;
    Value v;
    if (def.defaults[i] != nullptr) {
      if (!eval(*def.defaults[i], scope, &v)) return false;
    } else {
      v = Value::undefined(UndefReason::kName, def.param_names[i]);
    }
    if (!set_var(scope, def.params[i], v)) return false;
  }
  if (def.uses_caller) {
    Value caller = Value::undefined(UndefReason::kMessage, "No caller defined");
    for (size_t k = 0; k < args.nkw; ++k) {
      if (!used[k] && args.kw[k].name == "caller") {
        used[k] = true;
        caller = args.kw[k].value;
      }
    }
    if (!set_var(scope, kSymCaller, caller)) return false;
  }
  std::vector<DictEntry> extra_kw;
  for (size_t k = 0; k < args.nkw; ++k) {
    if (used[k]) continue;
    if (!def.uses_kwargs) {
      if (args.kw[k].name == "caller") {
        return fail(at,
                    "macro '" + std::string(def.name) +
                        "' was invoked with two values for the special caller argument. This is "
                        "most likely a bug.");
      }
      return fail(at, "macro '" + std::string(def.name) + "' takes no keyword argument '" +
                          std::string(args.kw[k].name) + "'");
    }
    DictEntry e;
    e.key = Value::string(args.kw[k].name);
    e.value = args.kw[k].value;
    extra_kw.push_back(e);
  }
  if (def.uses_kwargs) {
    Value kw;
    if (!new_dict(at, extra_kw, &kw) || !set_var(scope, kSymKwargs, kw)) return false;
  }
  if (def.uses_varargs) {
    Value rest;
    const std::span<const Value> extra =
        args.npos > nparams ? std::span<const Value>(args.pos + nparams, args.npos - nparams)
                            : std::span<const Value>();
    if (!new_list(at, extra, ListFlavor::kTuple, &rest) || !set_var(scope, kSymVarargs, rest)) {
      return false;
    }
  } else if (args.npos > nparams) {
    return fail(at, "macro '" + std::string(def.name) + "' takes not more than " +
                        std::to_string(nparams) + " argument(s)");
  }
  return capture(def.body, scope, out);
}

// --- Python semantics -------------------------------------------------------------------------

std::string_view Interpreter::type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      switch (v.flavor()) {
        case ListFlavor::kList:
          return "list";
        case ListFlavor::kTuple:
          return "tuple";
        case ListFlavor::kGenerator:
          return "generator";
        case ListFlavor::kDictItems:
          return "dict_items";
        case ListFlavor::kDictKeys:
          return "dict_keys";
        case ListFlavor::kDictValues:
          return "dict_values";
      }
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kMacro:
      return "Macro";
    case Kind::kFunction:
    case Kind::kMethod:
      return "builtin_function_or_method";
    case Kind::kLoop:
      return "LoopContext";
  }
  return "object";
}

bool Interpreter::truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.b;
    case Kind::kInt:
      return v.i != 0;
    case Kind::kFloat:
      return v.f != 0.0;
    case Kind::kString:
    case Kind::kDict:
      return v.size != 0;
    case Kind::kList:
      return v.flavor() == ListFlavor::kGenerator || v.size != 0;  // a generator is always true
    default:
      return true;
  }
}

bool Interpreter::equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (is_intlike(a) && is_intlike(b)) return as_int(a) == as_int(b);
    return as_float(a) == as_float(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.sv() == b.sv();
    case Kind::kList:
      if (a.flavor() != b.flavor()) return false;
      if (a.flavor() == ListFlavor::kGenerator) return a.gen == b.gen;
      if (a.size != b.size) return false;
      for (size_t i = 0; i < a.size; ++i) {
        if (!equals(a.items[i], b.items[i])) return false;
      }
      return true;
    case Kind::kDict:
      if (a.size != b.size) return false;
      for (size_t i = 0; i < a.size; ++i) {
        bool found = false;
        for (size_t j = 0; j < b.size; ++j) {
          if (equals(a.entries[i].key, b.entries[j].key)) {
            if (!equals(a.entries[i].value, b.entries[j].value)) return false;
            found = true;
            break;
          }
        }
        if (!found) return false;
      }
      return true;
    case Kind::kNamespace:
      return a.ns == b.ns;
    case Kind::kMacro:
      return a.macro == b.macro;
    case Kind::kFunction:
      return a.sub == b.sub;
    case Kind::kMethod:
      return a.method == b.method;
    case Kind::kLoop:
      return a.loop == b.loop;
    default:
      return false;
  }
}

namespace {
template <typename T>
bool apply_order(CmpOp op, const T& a, const T& b) {
  switch (op) {
    case CmpOp::kLt:
      return a < b;
    case CmpOp::kLe:
      return a <= b;
    case CmpOp::kGt:
      return a > b;
    case CmpOp::kGe:
      return a >= b;
    default:
      return false;
  }
}
std::string_view op_text(CmpOp op) {
  switch (op) {
    case CmpOp::kLt:
      return "<";
    case CmpOp::kLe:
      return "<=";
    case CmpOp::kGt:
      return ">";
    case CmpOp::kGe:
      return ">=";
    default:
      return "?";
  }
}
}  // namespace

bool Interpreter::compare(const Expr& at, CmpOp op, const Value& a, const Value& b, bool* out) {
  switch (op) {
    case CmpOp::kEq:
      *out = equals(a, b);
      return true;
    case CmpOp::kNe:
      *out = !equals(a, b);
      return true;
    case CmpOp::kIn:
      return contains(at, b, a, out);
    case CmpOp::kNotIn:
      if (!contains(at, b, a, out)) return false;
      *out = !*out;
      return true;
    default:
      break;
  }
  if (a.kind == Kind::kUndefined) return fail_undefined(at, a);
  if (b.kind == Kind::kUndefined) return fail_undefined(at, b);
  if (a.is_number() && b.is_number()) {
    *out = (is_intlike(a) && is_intlike(b)) ? apply_order(op, as_int(a), as_int(b))
                                            : apply_order(op, as_float(a), as_float(b));
    return true;
  }
  if (a.kind == Kind::kString && b.kind == Kind::kString) {
    *out = apply_order(op, a.sv().compare(b.sv()), 0);
    return true;
  }
  if (a.is_sequence() && b.is_sequence() && a.flavor() == b.flavor()) {
    const size_t n = std::min(a.size, b.size);
    for (size_t i = 0; i < n; ++i) {
      if (!equals(a.items[i], b.items[i])) return compare(at, op, a.items[i], b.items[i], out);
    }
    *out = apply_order(op, a.size, b.size);
    return true;
  }
  return fail(at, "'" + std::string(op_text(op)) + "' not supported between instances of '" +
                      std::string(type_name(a)) + "' and '" + std::string(type_name(b)) + "'");
}

bool Interpreter::less(const Expr& at, const Value& a, const Value& b, bool* result) {
  return compare(at, CmpOp::kLt, a, b, result);
}

bool Interpreter::contains(const Expr& at, const Value& container, const Value& item,
                           bool* result) {
  switch (container.kind) {
    case Kind::kString:
      if (item.kind != Kind::kString) {
        return fail(at, "'in <string>' requires string as left operand, not " +
                            std::string(type_name(item)));
      }
      if (!charge(at, container.size / 64)) return false;
      *result = container.sv().find(item.sv()) != std::string_view::npos;
      return true;
    case Kind::kList: {
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, container, &items, &n)) return false;
      *result = false;
      for (size_t i = 0; i < n && !*result; ++i) *result = equals(items[i], item);
      return true;
    }
    case Kind::kDict:
      if ((item.kind == Kind::kList && item.flavor() != ListFlavor::kTuple) ||
          item.kind == Kind::kDict) {
        return fail(at, "unhashable type: '" + std::string(type_name(item)) + "'");
      }
      if (!charge(at, container.size)) return false;
      *result = false;
      for (size_t i = 0; i < container.size && !*result; ++i) {
        *result = equals(container.entries[i].key, item);
      }
      return true;
    case Kind::kUndefined:
      *result = false;  // iterating an Undefined yields nothing
      return true;
    default:
      return fail(at,
                  "argument of type '" + std::string(type_name(container)) + "' is not iterable");
  }
}

bool Interpreter::iterate(const Expr& at, const Value& v, const Value** items, size_t* n) {
  switch (v.kind) {
    case Kind::kList:
      if (v.flavor() == ListFlavor::kGenerator) return run_generator(*v.gen, items, n);
      *items = v.items;
      *n = v.size;
      return charge(at, v.size);
    case Kind::kDict: {
      Value* keys = nullptr;
      if (!new_values(at, v.size, &keys)) return false;
      for (size_t i = 0; i < v.size; ++i) keys[i] = v.entries[i].key;
      *items = keys;
      *n = v.size;
      return charge(at, v.size);
    }
    case Kind::kString: {
      const std::string_view s = v.sv();
      const size_t count = text::length(s);
      Value* chars = nullptr;
      if (!new_values(at, count, &chars)) return false;
      size_t i = 0;
      for (size_t k = 0; k < count; ++k) {
        const size_t start = i;
        text::decode(s, &i);
        chars[k] = Value::string(s.substr(start, i - start));
      }
      *items = chars;
      *n = count;
      return charge(at, count);
    }
    case Kind::kUndefined:
      *items = nullptr;
      *n = 0;
      return true;
    default:
      return fail(at, "'" + std::string(type_name(v)) + "' object is not iterable");
  }
}

bool Interpreter::length(const Expr& at, const Value& v, int64_t* n) {
  switch (v.kind) {
    case Kind::kString:
      *n = static_cast<int64_t>(text::length(v.sv()));
      return charge(at, v.size / 64);
    case Kind::kList:
      if (v.flavor() == ListFlavor::kGenerator)
        return fail(at, "object of type 'generator' has no len()");
      *n = static_cast<int64_t>(v.size);
      return true;
    case Kind::kDict:
      *n = static_cast<int64_t>(v.size);
      return true;
    case Kind::kUndefined:
      *n = 0;
      return true;
    case Kind::kLoop:
      *n = static_cast<int64_t>(v.loop->length);
      return true;
    default:
      return fail(at, "object of type '" + std::string(type_name(v)) + "' has no len()");
  }
}

// --- attribute and item access ----------------------------------------------------------------

namespace {
Value unsafe(std::string_view name, Kind owner) {
  return Value::undefined(UndefReason::kUnsafe, name, owner);
}
}  // namespace

bool Interpreter::get_attr(const Expr& at, const Value& obj, std::string_view name, Value* out) {
  return get_attr(at, obj, name, attribute_flags(name), out);
}

bool Interpreter::get_attr(const Expr& at, const Value& obj, std::string_view name, uint8_t flags,
                           Value* out) {
  if (obj.kind == Kind::kUndefined) return fail_undefined(at, obj);
  if ((flags & kAttrPrivate) != 0) {  // the sandbox hides private and dunder attributes
    *out = Value::undefined(UndefReason::kAttribute, name, obj.kind);
    return true;
  }
  if (has_method(obj, flags)) {
    auto* m = arena_.allocate_array<MethodData>(1);
    if (m == nullptr) return fail_limit("memory limit exceeded");
    new (m) MethodData{obj, name};
    out->kind = Kind::kMethod;
    out->method = m;
    out->size = 0;
    return true;
  }
  if (is_unsafe_attribute(obj, flags)) {
    *out = unsafe(name, obj.kind);
    return true;
  }
  switch (obj.kind) {
    case Kind::kDict:
      for (size_t i = 0; i < obj.size; ++i) {
        const Value& k = obj.entries[i].key;
        if (k.kind == Kind::kString && k.sv() == name) {
          *out = obj.entries[i].value;
          return true;
        }
      }
      break;
    case Kind::kNamespace:
      for (size_t i = 0; i < obj.ns->size; ++i) {
        if (obj.ns->entries[i].key.sv() == name) {
          *out = obj.ns->entries[i].value;
          return true;
        }
      }
      break;
    case Kind::kList:
      // groupby() yields _GroupTuple(grouper, list): a tuple with two named fields.
      if (obj.flavor() == ListFlavor::kTuple && obj.size == 2 &&
          (name == "grouper" || name == "list")) {
        *out = obj.items[name == "grouper" ? 0 : 1];
        return true;
      }
      break;
    case Kind::kLoop: {
      const LoopData& l = *obj.loop;
      const auto len = static_cast<int64_t>(l.length);
      const auto i0 = static_cast<int64_t>(l.index0);
      if (name == "index") {
        *out = Value::integer(i0 + 1);
      } else if (name == "index0") {
        *out = Value::integer(i0);
      } else if (name == "revindex") {
        *out = Value::integer(len - i0);
      } else if (name == "revindex0") {
        *out = Value::integer(len - i0 - 1);
      } else if (name == "first") {
        *out = Value::boolean(i0 == 0);
      } else if (name == "last") {
        *out = Value::boolean(i0 == len - 1);
      } else if (name == "length") {
        *out = Value::integer(len);
      } else if (name == "depth") {
        *out = Value::integer(1);
      } else if (name == "depth0") {
        *out = Value::integer(0);
      } else if (name == "previtem") {
        *out = i0 > 0 ? l.items[i0 - 1]
                      : Value::undefined(UndefReason::kMessage, "there is no previous item");
      } else if (name == "nextitem") {
        *out = i0 + 1 < len ? l.items[i0 + 1]
                            : Value::undefined(UndefReason::kMessage, "there is no next item");
      } else {
        break;
      }
      return true;
    }
    default:
      break;
  }
  *out = Value::undefined(UndefReason::kAttribute, name, obj.kind);
  return true;
}

bool Interpreter::get_item(const Expr& at, const Value& obj, const Value& key, Value* out) {
  if (obj.kind == Kind::kUndefined) return fail_undefined(at, obj);
  const bool int_key = is_intlike(key);
  switch (obj.kind) {
    case Kind::kList:
      if (obj.is_sequence() && int_key) {
        int64_t i = as_int(key);
        const auto n = static_cast<int64_t>(obj.size);
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          *out = obj.items[i];
          return true;
        }
      }
      break;
    case Kind::kDict:
      for (size_t i = 0; i < obj.size; ++i) {
        if (equals(obj.entries[i].key, key)) {
          *out = obj.entries[i].value;
          return true;
        }
      }
      break;
    case Kind::kString:
      if (int_key) {
        if (!charge(at, obj.size / 64)) return false;
        const std::string_view s = obj.sv();
        int64_t i = as_int(key);
        const bool ascii = text::is_ascii(s);
        const auto n = static_cast<int64_t>(ascii ? s.size() : text::length(s));
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          const size_t start =
              ascii ? static_cast<size_t>(i) : text::byte_offset(s, static_cast<size_t>(i));
          size_t end = start;
          text::decode(s, &end);
          *out = Value::string(s.substr(start, end - start));
          return true;
        }
      }
      break;
    default:
      break;
  }
  // jinja2's getitem falls back to the attribute of a string key, then to Undefined.
  if (key.kind == Kind::kString) {
    if (obj.kind == Kind::kDict) {
      if (has_method(obj, key.sv()) || is_unsafe_attribute(obj, attribute_flags(key.sv()))) {
        return get_attr(at, obj, key.sv(), out);
      }
      *out = Value::undefined(UndefReason::kAttribute, key.sv(), obj.kind);
      return true;
    }
    return get_attr(at, obj, key.sv(), out);
  }
  std::string r;
  to_repr(key, &r);
  Value text_value;
  if (!new_string(at, r, &text_value)) return false;
  *out = Value::undefined(UndefReason::kElement, text_value.sv(), obj.kind);
  return true;
}

namespace {
// CPython's PySlice_AdjustIndices: clamps start/stop for a sequence of `length` items.
int64_t adjust_slice(int64_t length, int64_t* start, int64_t* stop, int64_t step) {
  if (*start < 0) {
    *start += length;
    if (*start < 0) *start = step < 0 ? -1 : 0;
  } else if (*start >= length) {
    *start = step < 0 ? length - 1 : length;
  }
  if (*stop < 0) {
    *stop += length;
    if (*stop < 0) *stop = step < 0 ? -1 : 0;
  } else if (*stop >= length) {
    *stop = step < 0 ? length - 1 : length;
  }
  if (step < 0) {
    if (*stop < *start) return (*start - *stop - 1) / (-step) + 1;
  } else if (*start < *stop) {
    return (*stop - *start - 1) / step + 1;
  }
  return 0;
}
}  // namespace

bool Interpreter::slice(const Expr& at, const Value& obj, const Expr& sl, Scope* scope,
                        Value* out) {
  Value parts[3];
  const Expr* exprs[3] = {sl.a, sl.b, sl.c};
  bool present[3] = {false, false, false};
  bool type_error = false;
  for (int i = 0; i < 3; ++i) {
    if (exprs[i] == nullptr) continue;
    if (!eval(*exprs[i], scope, &parts[i])) return false;
    if (parts[i].kind == Kind::kNone) continue;
    if (!is_intlike(parts[i])) type_error = true;
    present[i] = true;
  }
  // jinja2 compiles `a[x:y]` to a plain Python subscript (not environment.getitem), so a
  // value that cannot be sliced is an error rather than Undefined.
  if (obj.kind == Kind::kUndefined) return fail_undefined(at, obj);
  if (obj.kind == Kind::kDict) return fail(at, "unhashable type: 'slice'");
  if (!obj.is_sequence() && obj.kind != Kind::kString) {
    return fail(at, "'" + std::string(type_name(obj)) + "' object is not subscriptable");
  }
  if (type_error)
    return fail(at, "slice indices must be integers or None or have an __index__ method");
  const int64_t step = present[2] ? as_int(parts[2]) : 1;
  if (step == 0) return fail(at, "slice step cannot be zero");
  const std::string_view s = obj.kind == Kind::kString ? obj.sv() : std::string_view();
  const bool ascii = obj.kind == Kind::kString && text::is_ascii(s);
  const auto length = static_cast<int64_t>(
      obj.kind == Kind::kString ? (ascii ? s.size() : text::length(s)) : obj.size);
  int64_t start = present[0] ? as_int(parts[0]) : (step < 0 ? length - 1 : 0);
  int64_t stop = present[1] ? as_int(parts[1]) : (step < 0 ? -length - 1 : length);
  const int64_t count = adjust_slice(length, &start, &stop, step);
  if (!charge(at, static_cast<uint64_t>(count) + s.size() / 64)) return false;
  if (obj.kind != Kind::kString) {
    if (step == 1) {  // a view: lists are immutable
      *out = Value::list(obj.items + start, static_cast<size_t>(count), obj.flavor());
      out->owner = obj.owner;
      return true;
    }
    Value* items = nullptr;
    if (!new_values(at, static_cast<size_t>(count), &items)) return false;
    for (int64_t k = 0; k < count; ++k) items[k] = obj.items[start + k * step];
    *out = Value::list(items, static_cast<size_t>(count), obj.flavor());
    out->owner = obj.owner;
    return true;
  }
  if (step == 1) {
    if (count == 0) {
      *out = Value::string({});
      return true;
    }
    const size_t b =
        ascii ? static_cast<size_t>(start) : text::byte_offset(s, static_cast<size_t>(start));
    const size_t e = ascii ? static_cast<size_t>(start + count)
                           : b + text::byte_offset(s.substr(b), static_cast<size_t>(count));
    *out = Value::string(s.substr(b, e - b));
    return true;
  }
  // Any other step: collect code point boundaries, then pick.
  std::vector<size_t> offsets;
  offsets.reserve(static_cast<size_t>(length) + 1);
  for (size_t i = 0; i < s.size();) {
    offsets.push_back(i);
    text::decode(s, &i);
  }
  offsets.push_back(s.size());
  std::string buffer;
  for (int64_t k = 0; k < count; ++k) {
    const auto idx = static_cast<size_t>(start + k * step);
    buffer.append(s.substr(offsets[idx], offsets[idx + 1] - offsets[idx]));
  }
  return new_string(at, buffer, out);
}

// --- arithmetic -------------------------------------------------------------------------------

namespace {

bool unsupported_operands(Interpreter& in, const Expr& at, BinOp op, const Value& a,
                          const Value& b) {
  static constexpr std::string_view kOpText[] = {"+", "-", "*", "/", "//", "%", "** or pow()"};
  return in.fail(at, "unsupported operand type(s) for " +
                         std::string(kOpText[static_cast<int>(op)]) + ": '" +
                         std::string(Interpreter::type_name(a)) + "' and '" +
                         std::string(Interpreter::type_name(b)) + "'");
}

// a + b when they are not both numbers nor both strings: list + list, tuple + tuple, or
// Python's TypeError.
bool add_sequences(Interpreter& in, const Expr& at, const Value& a, const Value& b, Value* out) {
  if (a.is_sequence() && b.is_sequence() && a.flavor() == b.flavor()) {
    if (!in.charge(at, a.size + b.size)) return false;
    std::vector<Value> items(a.items, a.items + a.size);
    items.insert(items.end(), b.items, b.items + b.size);
    return in.new_list(at, items, a.flavor(), out);
  }
  const std::string b_type(Interpreter::type_name(b));
  if (a.kind == Kind::kString) {
    return in.fail(at, "can only concatenate str (not \"" + b_type + "\") to str");
  }
  if (a.is_sequence()) {
    const std::string a_type(Interpreter::type_name(a));
    return in.fail(at, "can only concatenate " + a_type + " (not \"" + b_type + "\") to " + a_type);
  }
  return unsupported_operands(in, at, BinOp::kAdd, a, b);
}

// a * b when they are not both numbers: str, list or tuple times an int (either order), or
// Python's TypeError.
bool repeat_sequence(Interpreter& in, const Expr& at, const Value& a, const Value& b, Value* out) {
  const Value* seq = nullptr;
  int64_t times = 0;
  if ((a.kind == Kind::kString || a.is_sequence()) && is_intlike(b)) {
    seq = &a;
    times = as_int(b);
  } else if ((b.kind == Kind::kString || b.is_sequence()) && is_intlike(a)) {
    seq = &b;
    times = as_int(a);
  } else {
    if (a.kind == Kind::kString || b.kind == Kind::kString || a.is_sequence() || b.is_sequence()) {
      const Value& other = (a.kind == Kind::kString || a.is_sequence()) ? b : a;
      return in.fail(at, "can't multiply sequence by non-int of type '" +
                             std::string(Interpreter::type_name(other)) + "'");
    }
    return unsupported_operands(in, at, BinOp::kMul, a, b);
  }
  // An empty sequence repeated is empty however many times: no loop (a template's `'' * 2**62`
  // would otherwise spin, charging no work).
  if (times < 0 || seq->size == 0) times = 0;
  const size_t max_memory_bytes = in.limits().max_memory_bytes;
  const size_t unit = seq->kind == Kind::kString ? seq->size : seq->size * sizeof(Value);
  if (unit != 0 && static_cast<uint64_t>(times) > max_memory_bytes / unit) {
    return in.fail_limit("memory limit of " + std::to_string(max_memory_bytes) + " bytes exceeded");
  }
  const auto total = static_cast<size_t>(times) * seq->size;
  if (!in.charge(at, seq->kind == Kind::kString ? total / 64 : total)) return false;
  if (seq->kind == Kind::kString) {
    std::string buffer;
    buffer.reserve(total);
    for (int64_t i = 0; i < times; ++i) buffer.append(seq->sv());
    return in.new_string(at, buffer, out);
  }
  std::vector<Value> items;
  items.reserve(total);
  for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq->items, seq->items + seq->size);
  return in.new_list(at, items, seq->flavor(), out);
}

// CPython's float_divmod: x // y and x % y of floats, y != 0.
void float_divmod(double x, double y, double* floordiv, double* mod) {
  double m = std::fmod(x, y);
  double div = (x - m) / y;
  if (m != 0.0) {
    if ((y < 0) != (m < 0)) {
      m += y;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, y);
  }
  double q = 0.0;
  if (div != 0.0) {
    q = std::floor(div);
    if (div - q > 0.5) q += 1.0;
  } else {
    q = std::copysign(0.0, x / y);
  }
  *floordiv = q;
  *mod = m;
}

// base ** exp for exp >= 0, by squaring; false on overflow.
bool int_pow(int64_t base, int64_t exp, int64_t* out) {
  int64_t r = 1;
  while (exp > 0) {
    if ((exp & 1) != 0 && __builtin_mul_overflow(r, base, &r)) return false;
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return false;
  }
  *out = r;
  return true;
}

}  // namespace

bool Interpreter::binary(const Expr& at, BinOp op, const Value& a, const Value& b, Value* out) {
  if (a.kind == Kind::kUndefined) return fail_undefined(at, a);
  if (b.kind == Kind::kUndefined) return fail_undefined(at, b);
  auto unsupported = [&]() { return unsupported_operands(*this, at, op, a, b); };
  auto overflow = [&]() { return fail(at, "integer overflow (infera supports 64-bit integers)"); };
  const bool nums = a.is_number() && b.is_number();
  const bool ints = is_intlike(a) && is_intlike(b);
  switch (op) {
    case BinOp::kAdd:
      if (ints) {
        int64_t r = 0;
        if (__builtin_add_overflow(as_int(a), as_int(b), &r)) return overflow();
        *out = Value::integer(r);
        return true;
      }
      if (nums) {
        *out = Value::floating(as_float(a) + as_float(b));
        return true;
      }
      if (a.kind == Kind::kString && b.kind == Kind::kString)
        return concat_strings(at, a, b.sv(), out);
      return add_sequences(*this, at, a, b, out);
    case BinOp::kSub:
      if (ints) {
        int64_t r = 0;
        if (__builtin_sub_overflow(as_int(a), as_int(b), &r)) return overflow();
        *out = Value::integer(r);
        return true;
      }
      if (nums) {
        *out = Value::floating(as_float(a) - as_float(b));
        return true;
      }
      return unsupported();
    case BinOp::kMul:
      if (ints) {
        int64_t r = 0;
        if (__builtin_mul_overflow(as_int(a), as_int(b), &r)) return overflow();
        *out = Value::integer(r);
        return true;
      }
      if (nums) {
        *out = Value::floating(as_float(a) * as_float(b));
        return true;
      }
      return repeat_sequence(*this, at, a, b, out);
    case BinOp::kDiv:
      if (!nums) return unsupported();
      if (as_float(b) == 0.0) return fail(at, "division by zero");
      *out = Value::floating(as_float(a) / as_float(b));
      return true;
    case BinOp::kFloorDiv:
    case BinOp::kMod: {
      if (op == BinOp::kMod && a.kind == Kind::kString) return percent_format(at, a.sv(), b, out);
      if (!nums) return unsupported();
      if (ints) {
        const int64_t x = as_int(a);
        const int64_t y = as_int(b);
        if (y == 0) {
          return fail(at, op == BinOp::kMod ? "integer modulo by zero"
                                            : "integer division or modulo by zero");
        }
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          if (op == BinOp::kMod) {
            *out = Value::integer(0);
            return true;
          }
          return overflow();
        }
        int64_t q = x / y;
        int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors toward negative infinity
          q -= 1;
          r += y;
        }
        *out = Value::integer(op == BinOp::kMod ? r : q);
        return true;
      }
      const double x = as_float(a);
      const double y = as_float(b);
      if (y == 0.0)
        return fail(at, op == BinOp::kMod ? "float modulo" : "float floor division by zero");
      double floordiv = 0.0;
      double mod = 0.0;
      float_divmod(x, y, &floordiv, &mod);
      *out = Value::floating(op == BinOp::kMod ? mod : floordiv);
      return true;
    }
    case BinOp::kPow: {
      if (!nums) return unsupported();
      if (ints && as_int(b) >= 0) {
        int64_t r = 0;
        if (!int_pow(as_int(a), as_int(b), &r)) return overflow();
        *out = Value::integer(r);
        return true;
      }
      const double x = as_float(a);
      const double y = as_float(b);
      if (x == 0.0 && y < 0) return fail(at, "0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y))
        return fail(at, "a negative number to a fractional power is complex");
      *out = Value::floating(std::pow(x, y));
      return true;
    }
  }
  return unsupported();
}

}  // namespace infera::jinja
