// The names of jinja2's filters and tests and of the methods the sandbox allows (resolved once,
// in the parser), jinja2's tests (jinja2/tests.py) and global functions, and transformers'
// raise_exception and strftime_now. The filters are in filters.cc, the methods in methods.cc.
#include "infera/jinja/builtins.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "infera/jinja/builtin_args.h"
#include "infera/jinja/interpreter.h"
#include "infera/jinja/text.h"

namespace infera::jinja {
namespace {

struct FilterName {
  std::string_view name;
  FilterId id;
};
constexpr FilterName kFilters[] = {
    {"abs", FilterId::kAbs},
    {"attr", FilterId::kAttr},
    {"batch", FilterId::kBatch},
    {"capitalize", FilterId::kCapitalize},
    {"center", FilterId::kCenter},
    {"count", FilterId::kCount},
    {"d", FilterId::kDefault},
    {"default", FilterId::kDefault},
    {"dictsort", FilterId::kDictsort},
    {"e", FilterId::kEscape},
    {"escape", FilterId::kEscape},
    {"first", FilterId::kFirst},
    {"float", FilterId::kFloat},
    {"format", FilterId::kFormat},
    {"groupby", FilterId::kGroupby},
    {"indent", FilterId::kIndent},
    {"int", FilterId::kInt},
    {"items", FilterId::kItems},
    {"join", FilterId::kJoin},
    {"last", FilterId::kLast},
    {"length", FilterId::kLength},
    {"list", FilterId::kList},
    {"lower", FilterId::kLower},
    {"map", FilterId::kMap},
    {"max", FilterId::kMax},
    {"min", FilterId::kMin},
    {"reject", FilterId::kReject},
    {"rejectattr", FilterId::kRejectattr},
    {"replace", FilterId::kReplace},
    {"reverse", FilterId::kReverse},
    {"round", FilterId::kRound},
    {"safe", FilterId::kSafe},
    {"select", FilterId::kSelect},
    {"selectattr", FilterId::kSelectattr},
    {"sort", FilterId::kSort},
    {"string", FilterId::kString},
    {"sum", FilterId::kSum},
    {"title", FilterId::kTitle},
    {"tojson", FilterId::kTojson},
    {"trim", FilterId::kTrim},
    {"unique", FilterId::kUnique},
    {"upper", FilterId::kUpper},
    {"wordcount", FilterId::kWordcount},
};

struct TestName {
  std::string_view name;
  TestId id;
};
constexpr TestName kTests[] = {
    {"!=", TestId::kNe},
    {"<", TestId::kLt},
    {"<=", TestId::kLe},
    {"==", TestId::kEq},
    {">", TestId::kGt},
    {">=", TestId::kGe},
    {"boolean", TestId::kBoolean},
    {"callable", TestId::kCallable},
    {"defined", TestId::kDefined},
    {"divisibleby", TestId::kDivisibleby},
    {"eq", TestId::kEq},
    {"equalto", TestId::kEq},
    {"escaped", TestId::kEscaped},
    {"even", TestId::kEven},
    {"false", TestId::kFalse},
    {"filter", TestId::kFilter},
    {"float", TestId::kFloat},
    {"ge", TestId::kGe},
    {"greaterthan", TestId::kGt},
    {"gt", TestId::kGt},
    {"in", TestId::kIn},
    {"integer", TestId::kInteger},
    {"iterable", TestId::kIterable},
    {"le", TestId::kLe},
    {"lessthan", TestId::kLt},
    {"lower", TestId::kLower},
    {"lt", TestId::kLt},
    {"mapping", TestId::kMapping},
    {"ne", TestId::kNe},
    {"none", TestId::kNone},
    {"number", TestId::kNumber},
    {"odd", TestId::kOdd},
    {"sameas", TestId::kSameas},
    {"sequence", TestId::kSequence},
    {"string", TestId::kString},
    {"test", TestId::kTest},
    {"true", TestId::kTrue},
    {"undefined", TestId::kUndefined},
    {"upper", TestId::kUpper},
};

// Methods the immutable sandbox allows, per type (sorted for binary search).
constexpr std::string_view kStrMethods[] = {
    "capitalize", "casefold",  "center",     "count",      "endswith",     "find",
    "format",     "index",     "isalnum",    "isalpha",    "isdecimal",    "isdigit",
    "islower",    "isnumeric", "isspace",    "istitle",    "isupper",      "join",
    "ljust",      "lower",     "lstrip",     "partition",  "removeprefix", "removesuffix",
    "replace",    "rfind",     "rindex",     "rjust",      "rpartition",   "rsplit",
    "rstrip",     "split",     "splitlines", "startswith", "strip",        "swapcase",
    "title",      "upper",     "zfill",
};
constexpr std::string_view kDictMethods[] = {"copy", "get", "items", "keys", "values"};
constexpr std::string_view kDictUnsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::string_view kListMethods[] = {"count", "index"};
constexpr std::string_view kListUnsafe[] = {"append", "clear",  "extend",  "insert",
                                            "pop",    "remove", "reverse", "sort"};
constexpr std::string_view kLoopMethods[] = {"changed", "cycle"};

template <size_t N>
bool in_sorted(const std::string_view (&table)[N], std::string_view name) {
  return std::binary_search(std::begin(table), std::end(table), name);
}

}  // namespace

FilterId find_filter(std::string_view name) {
  for (const FilterName& f : kFilters) {
    if (f.name == name) return f.id;
  }
  return FilterId::kUnknown;
}

TestId find_test(std::string_view name) {
  for (const TestName& t : kTests) {
    if (t.name == name) return t.id;
  }
  return TestId::kUnknown;
}

uint8_t attribute_flags(std::string_view name) {
  uint8_t f = 0;
  if (in_sorted(kStrMethods, name)) f |= kAttrStrMethod;
  if (in_sorted(kDictMethods, name)) f |= kAttrDictMethod;
  if (in_sorted(kDictUnsafe, name)) f |= kAttrDictUnsafe;
  if (in_sorted(kListMethods, name)) f |= kAttrListMethod;
  if (in_sorted(kListUnsafe, name)) f |= kAttrListUnsafe;
  if (in_sorted(kLoopMethods, name)) f |= kAttrLoopMethod;
  if (!name.empty() && name[0] == '_') f |= kAttrPrivate;
  return f;
}

bool Interpreter::has_method(const Value& obj, uint8_t flags) {
  switch (obj.kind) {
    case Kind::kString:
      return (flags & kAttrStrMethod) != 0;
    case Kind::kDict:
      return (flags & kAttrDictMethod) != 0;
    case Kind::kList:
      return obj.is_sequence() && (flags & kAttrListMethod) != 0;
    case Kind::kLoop:
      return (flags & kAttrLoopMethod) != 0;
    default:
      return false;
  }
}

bool Interpreter::is_unsafe_attribute(const Value& obj, uint8_t flags) {
  if (obj.kind == Kind::kDict) return (flags & kAttrDictUnsafe) != 0;
  if (obj.kind == Kind::kList && obj.flavor() == ListFlavor::kList)
    return (flags & kAttrListUnsafe) != 0;
  return false;
}

bool Interpreter::has_method(const Value& obj, std::string_view name) {
  return has_method(obj, attribute_flags(name));
}

bool bind_params(Interpreter* in, const Expr& at, std::string_view function, const CallArgs& args,
                 std::initializer_list<std::string_view> names, Value* slots,
                 size_t skip_positional) {
  const size_t n = names.size();
  for (size_t i = 0; i < n; ++i)
    slots[i] = Value::undefined(UndefReason::kNotGiven, "argument not given");
  const size_t npos = args.npos - std::min(args.npos, skip_positional);
  if (npos > n) {
    return in->fail(at, std::string(function) + "() takes at most " + std::to_string(n) +
                            " argument(s) (" + std::to_string(npos) + " given)");
  }
  for (size_t i = 0; i < npos; ++i) slots[i] = args.pos[skip_positional + i];
  for (size_t k = 0; k < args.nkw; ++k) {
    size_t i = 0;
    for (std::string_view name : names) {
      if (name == args.kw[k].name) break;
      ++i;
    }
    if (i == n) {
      return in->fail(at, std::string(function) + "() got an unexpected keyword argument '" +
                              std::string(args.kw[k].name) + "'");
    }
    if (i < npos) {
      return in->fail(at, std::string(function) + "() got multiple values for argument '" +
                              std::string(args.kw[k].name) + "'");
    }
    slots[i] = args.kw[k].value;
  }
  return true;
}

// --- tests ------------------------------------------------------------------------------------

namespace {

// jinja2's lower and upper tests: str(value).islower() / isupper().
bool all_cased_as(bool lower, const Value& v) {
  std::string s;
  Interpreter::to_str(v, &s);
  bool cased = false;
  bool ok = true;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = text::decode(s, &i);
    if (!text::is_cased(c)) continue;
    cased = true;
    if (lower ? !text::is_lower(c) : !text::is_upper(c)) ok = false;
  }
  return cased && ok;
}

// The tests that take no argument and look only at the value; false for the others, which
// apply_test runs itself.
bool value_test(TestId id, const Value& v) {
  switch (id) {
    case TestId::kBoolean:
      return v.kind == Kind::kBool;
    case TestId::kCallable:  // jinja2's Undefined defines __call__ (which raises), so it counts
      return v.kind == Kind::kMacro || v.kind == Kind::kFunction || v.kind == Kind::kMethod ||
             v.kind == Kind::kUndefined;
    case TestId::kDefined:
      return v.kind != Kind::kUndefined;
    case TestId::kUndefined:
      return v.kind == Kind::kUndefined;
    case TestId::kEscaped:
      return false;
    case TestId::kFalse:
      return v.kind == Kind::kBool && !v.b;
    case TestId::kTrue:
      return v.kind == Kind::kBool && v.b;
    case TestId::kFilter:
      return v.kind == Kind::kString && find_filter(v.sv()) != FilterId::kUnknown;
    case TestId::kTest:
      return v.kind == Kind::kString && find_test(v.sv()) != TestId::kUnknown;
    case TestId::kFloat:
      return v.kind == Kind::kFloat;
    case TestId::kInteger:
      return v.kind == Kind::kInt;
    case TestId::kNumber:
      return v.is_number();
    case TestId::kIterable:
      return v.kind == Kind::kString || v.kind == Kind::kList || v.kind == Kind::kDict ||
             v.kind == Kind::kUndefined || v.kind == Kind::kLoop;
    case TestId::kSequence:
      return v.kind == Kind::kString || v.is_sequence() || v.kind == Kind::kDict ||
             v.kind == Kind::kUndefined;
    case TestId::kMapping:
      return v.kind == Kind::kDict;
    case TestId::kNone:
      return v.kind == Kind::kNone;
    case TestId::kString:
      return v.kind == Kind::kString;
    case TestId::kLower:
    case TestId::kUpper:
      return all_cased_as(id == TestId::kLower, v);
    case TestId::kUnknown:
    case TestId::kDivisibleby:
    case TestId::kEven:
    case TestId::kOdd:
    case TestId::kEq:
    case TestId::kNe:
    case TestId::kLt:
    case TestId::kLe:
    case TestId::kGt:
    case TestId::kGe:
    case TestId::kIn:
    case TestId::kSameas:
      return false;
  }
  return false;
}

}  // namespace

bool Interpreter::apply_test(const Expr& at, TestId id, std::string_view name, const Value& input,
                             const CallArgs& args, bool* out) {
  Value p[1];
  auto one = [&](std::string_view param) { return bind_params(this, at, name, args, {param}, p); };
  auto none = [&]() { return bind_params(this, at, name, args, {}, nullptr); };
  // jinja2: odd is `value % 2 == 1`, even `value % 2 == 0`, divisibleby `value % num == 0`.
  auto modulo_is = [&](const Value& divisor, int64_t remainder) {
    Value r;
    if (!binary(at, BinOp::kMod, input, divisor, &r)) return false;
    *out = equals(r, Value::integer(remainder));
    return true;
  };
  switch (id) {
    case TestId::kUnknown:
      return fail(at, "No test named '" + std::string(name) + "'.");
    case TestId::kDivisibleby:
      if (!one("num")) return false;
      return modulo_is(p[0], 0);
    case TestId::kEven:
      return none() && modulo_is(Value::integer(2), 0);
    case TestId::kOdd:
      return none() && modulo_is(Value::integer(2), 1);
    case TestId::kEq:
    case TestId::kNe:
    case TestId::kLt:
    case TestId::kLe:
    case TestId::kGt:
    case TestId::kGe: {
      if (!one("other")) return false;
      static constexpr CmpOp kOps[] = {CmpOp::kEq, CmpOp::kNe, CmpOp::kLt,
                                       CmpOp::kLe, CmpOp::kGt, CmpOp::kGe};
      const TestId order[] = {TestId::kEq, TestId::kNe, TestId::kLt,
                              TestId::kLe, TestId::kGt, TestId::kGe};
      size_t k = 0;
      while (order[k] != id) ++k;
      return compare(at, kOps[k], input, p[0], out);
    }
    case TestId::kIn:
      if (!one("seq")) return false;
      return contains(at, p[0], input, out);
    case TestId::kSameas:
      if (!one("other")) return false;
      if (input.kind != p[0].kind) {
        *out = false;
      } else if (input.kind == Kind::kList || input.kind == Kind::kDict) {
        *out = input.items == p[0].items && input.size == p[0].size;
      } else {
        *out = equals(input, p[0]);
      }
      return true;
    default:
      *out = value_test(id, input);
      return none();
  }
}

// --- global functions -------------------------------------------------------------------------

namespace {

bool make_range(Interpreter& in, const Expr& at, const CallArgs& args, Value* out) {
  if (args.nkw > 0) return in.fail(at, "range() takes no keyword arguments");
  if (args.npos < 1 || args.npos > 3) {
    return in.fail(at, "range expected at most 3 arguments, got " + std::to_string(args.npos));
  }
  for (size_t i = 0; i < args.npos; ++i) {
    if (!is_intlike(args.pos[i])) {
      if (args.pos[i].kind == Kind::kUndefined) return in.fail_undefined(at, args.pos[i]);
      return in.fail(at, "'" + std::string(type_name(args.pos[i])) +
                             "' object cannot be interpreted as an integer");
    }
  }
  const int64_t start = args.npos == 1 ? 0 : as_int(args.pos[0]);
  const int64_t stop = args.npos == 1 ? as_int(args.pos[0]) : as_int(args.pos[1]);
  const int64_t step = args.npos == 3 ? as_int(args.pos[2]) : 1;
  if (step == 0) return in.fail(at, "range() arg 3 must not be zero");
  // Ranges past the sandbox's MAX_RANGE are refused (jinja2.sandbox.safe_range).
  constexpr int64_t kMaxRange = 100000;
  // Differences and magnitudes in uint64_t cannot overflow for any int64_t inputs.
  const bool up = step > 0;
  const uint64_t span =
      up ? (stop > start ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) : 0)
         : (start > stop ? static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) : 0);
  const uint64_t mag =
      up ? static_cast<uint64_t>(step) : static_cast<uint64_t>(0) - static_cast<uint64_t>(step);
  const uint64_t count64 = span == 0 ? 0 : (span - 1) / mag + 1;
  if (count64 > static_cast<uint64_t>(kMaxRange)) {
    return in.fail(at, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  const auto count = static_cast<size_t>(count64);
  if (!in.charge(at, count)) return false;
  Value* items = nullptr;
  if (!in.new_values(at, count, &items)) return false;
  for (size_t i = 0; i < count; ++i)
    items[i] = Value::integer(start + static_cast<int64_t>(i) * step);
  *out = Value::list(items, count);
  out->owner = 1;
  return true;
}

// The entries of dict(init, **kwargs) and namespace(init, **kwargs): init a mapping or an
// iterable of pairs; a repeated key keeps its first position and takes the last value.
bool collect_entries(Interpreter& in, const Expr& at, const CallArgs& args,
                     std::vector<DictEntry>* entries) {
  auto put = [&](const Value& k, const Value& v) {
    for (DictEntry& e : *entries) {
      if (equals(e.key, k)) {
        e.value = v;
        return;
      }
    }
    entries->push_back({k, v});
  };
  if (args.npos > 1) return in.fail(at, "expected at most 1 positional argument");
  if (args.npos == 1) {
    const Value& init = args.pos[0];
    if (init.kind == Kind::kDict) {
      for (size_t i = 0; i < init.size; ++i) put(init.entries[i].key, init.entries[i].value);
    } else {
      const Value* items = nullptr;
      size_t n = 0;
      if (!in.iterate(at, init, &items, &n)) return false;
      for (size_t i = 0; i < n; ++i) {
        if (!items[i].is_sequence() || items[i].size != 2) {
          return in.fail(at, "dictionary update sequence element #" + std::to_string(i) +
                                 " has the wrong length or type");
        }
        put(items[i].items[0], items[i].items[1]);
      }
    }
  }
  for (size_t k = 0; k < args.nkw; ++k) put(Value::string(args.kw[k].name), args.kw[k].value);
  return true;
}

bool make_namespace(Interpreter& in, const Expr& at, const std::vector<DictEntry>& entries,
                    Value* out) {
  auto* ns = in.arena().allocate_array<NamespaceData>(1);
  if (ns == nullptr) return in.fail_limit("memory limit exceeded");
  new (ns) NamespaceData();
  for (const DictEntry& e : entries) {
    if (e.key.kind != Kind::kString)
      return in.fail(at, "namespace attribute names must be strings");
  }
  if (!entries.empty()) {
    ns->entries = in.arena().allocate_array<DictEntry>(entries.size());
    if (ns->entries == nullptr) return in.fail_limit("memory limit exceeded");
    std::memcpy(static_cast<void*>(ns->entries), entries.data(),
                entries.size() * sizeof(DictEntry));
    ns->size = ns->capacity = entries.size();
  }
  out->kind = Kind::kNamespace;
  out->ns = ns;
  out->size = 0;
  return true;
}

// transformers: datetime.now().strftime(format) - local time.
bool strftime_now(Interpreter& in, const Expr& at, const CallArgs& args,
                  std::chrono::system_clock::time_point now, Value* out) {
  if (args.npos + args.nkw != 1) return in.fail(at, "strftime_now() takes exactly one argument");
  const Value& format = args.npos == 1 ? args.pos[0] : args.kw[0].value;
  if (format.kind != Kind::kString) return in.fail(at, "strftime() argument 1 must be str");
  if (format.size > 4096) return in.fail(at, "strftime format too long");
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  // A trailing marker tells an empty result from a buffer that is too small.
  const std::string fmt = std::string(format.sv()) + "\x01";
  std::string buffer(256 + fmt.size() * 8, '\0');
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"  // the template supplies the format, by design
  const size_t n = std::strftime(buffer.data(), buffer.size(), fmt.c_str(), &tm);
#pragma GCC diagnostic pop
  if (n == 0) return in.fail(at, "strftime result too long");
  buffer.resize(n - 1);
  return in.new_string(at, buffer, out);
}

}  // namespace

bool Interpreter::call_function(const Expr& at, FunctionId id, const CallArgs& args, Value* out) {
  switch (id) {
    case FunctionId::kRange:
      return make_range(*this, at, args, out);
    case FunctionId::kNamespace:
    case FunctionId::kDict: {
      std::vector<DictEntry> entries;
      if (!collect_entries(*this, at, args, &entries)) return false;
      if (id == FunctionId::kDict) return new_dict(at, entries, out);
      return make_namespace(*this, at, entries, out);
    }
    case FunctionId::kRaiseException: {
      // transformers: raise jinja2.exceptions.TemplateError(message); the message is the error.
      if (args.npos + args.nkw != 1)
        return fail(at, "raise_exception() takes exactly one argument");
      std::string message;
      to_str(args.npos == 1 ? args.pos[0] : args.kw[0].value, &message);
      if (status_.ok()) status_ = invalid_argument(std::move(message));
      return false;
    }
    case FunctionId::kStrftimeNow:
      return strftime_now(*this, at, args, now_, out);
  }
  return fail(at, "unknown function");
}

}  // namespace infera::jinja
