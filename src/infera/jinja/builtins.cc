// jinja2's filters and tests (jinja2/filters.py, jinja2/tests.py), Python's str / dict / list
// methods that the sandbox allows, jinja2's global functions and transformers' additions
// (tojson, raise_exception, strftime_now).
#include "infera/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

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

bool is_intlike(const Value& v) {
  return v.kind == Kind::kInt || v.kind == Kind::kBool;
}
int64_t as_int(const Value& v) {
  return v.kind == Kind::kBool ? static_cast<int64_t>(v.b) : v.i;
}
double as_float(const Value& v) {
  return v.kind == Kind::kFloat ? v.f : static_cast<double>(as_int(v));
}

// Whether an optional builtin argument was passed (an explicitly passed Undefined counts).
bool given(const Value& v) {
  return !(v.kind == Kind::kUndefined && static_cast<UndefReason>(v.sub) == UndefReason::kNotGiven);
}

// str.strip / lstrip / rstrip with an optional set of characters.
std::string_view strip_chars(std::string_view s, const Value& chars, bool left, bool right) {
  if (chars.kind != Kind::kString) return text::strip_space(s, left, right);
  const std::string_view set = chars.sv();
  if (text::is_ascii(set)) {  // byte scans: a non-ASCII byte is never in an ASCII set
    auto in_ascii_set = [&](char c) {
      return static_cast<unsigned char>(c) < 0x80 && set.find(c) != std::string_view::npos;
    };
    size_t begin = 0;
    size_t end = s.size();
    while (left && begin < end && in_ascii_set(s[begin])) ++begin;
    while (right && end > begin && in_ascii_set(s[end - 1])) --end;
    return s.substr(begin, end - begin);
  }
  auto in_set = [&](char32_t c) {
    for (size_t i = 0; i < set.size();) {
      if (text::decode(set, &i) == c) return true;
    }
    return false;
  };
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      size_t j = begin;
      if (!in_set(text::decode(s, &j))) break;
      begin = j;
    }
  }
  if (right) {
    size_t last = begin;
    for (size_t i = begin; i < end;) {
      if (!in_set(text::decode(s, &i))) last = i;
    }
    end = last;
  }
  return s.substr(begin, end - begin);
}

// Python str.splitlines.
std::vector<std::string_view> split_lines(std::string_view s, bool keepends) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < s.size()) {
    const size_t at = i;
    const char32_t c = text::decode(s, &i);
    if (!text::is_line_break(c)) continue;
    size_t end = i;
    if (c == '\r' && i < s.size() && s[i] == '\n') end = ++i;
    lines.push_back(s.substr(start, (keepends ? end : at) - start));
    start = i;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

// Code point index -> byte offset with Python slice clamping (negative from the end).
size_t clamp_index(std::string_view s, const Value& index, bool is_end) {
  if (!is_intlike(index)) return is_end ? s.size() : 0;
  const bool ascii = text::is_ascii(s);
  const auto n = static_cast<int64_t>(ascii ? s.size() : text::length(s));
  int64_t i = as_int(index);
  if (i < 0) i = std::max<int64_t>(0, i + n);
  if (i > n) i = n;
  return ascii ? static_cast<size_t>(i) : text::byte_offset(s, static_cast<size_t>(i));
}

int64_t char_index(std::string_view s, size_t byte_pos) {
  return static_cast<int64_t>(text::length(s.substr(0, byte_pos)));
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

namespace {

// Binds Python-style call arguments to named parameters; a parameter not given stays Undefined.
bool bind_params(Interpreter* in, const Expr& at, std::string_view function, const CallArgs& args,
                 std::initializer_list<std::string_view> names, Value* slots,
                 size_t skip_positional = 0) {
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

// The arguments after the first `skip` positional ones, sharing storage with `args`
// (map and select pass them on to a filter or test).
void rest_of(const CallArgs& args, size_t skip, CallArgs* rest) {
  const size_t k = std::min(skip, args.npos);
  rest->pos = args.pos + k;
  rest->npos = args.npos - k;
  rest->pos_capacity = rest->npos;
  rest->kw = args.kw;
  rest->nkw = args.nkw;
  rest->kw_capacity = args.nkw;
}

// Python's int(str, base): optional sign, whitespace, underscores between digits, a prefix
// matching the base (or any prefix with base 0).
bool parse_python_int(std::string_view s, int base, int64_t* out) {
  s = text::strip_space(s, true, true);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.size() >= 2 && s[0] == '0') {
    const char p = static_cast<char>(s[1] | 0x20);
    const int prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefix_base != 0 && (base == 0 || base == prefix_base)) {
      base = prefix_base;
      s.remove_prefix(2);
      if (!s.empty() && s[0] == '_') s.remove_prefix(1);
    }
  }
  if (base == 0) {
    if (s.size() > 1 && s[0] == '0') {
      for (char c : s) {
        if (c != '0' && c != '_') return false;
      }
    }
    base = 10;
  }
  if (base < 2 || base > 36 || s.empty()) return false;
  int64_t v = 0;
  bool prev_digit = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (!prev_digit || i + 1 == s.size()) return false;
      prev_digit = false;
      continue;
    }
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
    if (d < 0 || d >= base) return false;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
    prev_digit = true;
  }
  *out = negative ? -v : v;
  return true;
}

// Python's float(str): decimal or scientific, inf/nan, underscores between digits.
bool parse_python_float(std::string_view s, double* out) {
  s = text::strip_space(s, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        return false;
      }
      continue;
    }
    clean.push_back(s[i]);
  }
  const std::string lower = text::lower(clean);
  std::string_view body = lower;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == "inf" || body == "infinity") {
    *out = negative ? -HUGE_VAL : HUGE_VAL;
    return true;
  }
  if (body == "nan") {
    *out = std::nan("");
    return true;
  }
  if (body.empty()) return false;
  bool digits = false;
  for (char c : body) {
    if (std::isdigit(static_cast<unsigned char>(c))) digits = true;
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' ||
          c == '-')) {
      return false;
    }
  }
  if (!digits) return false;
  char* end = nullptr;
  const double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return false;
  *out = v;
  return true;
}

// markupsafe.escape.
std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

bool title_separator(char32_t c) {
  return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
}

// jinja2's do_title: the text split on runs of [-\s({[<]; each other run becomes
// run[0].upper() + run[1:].lower().
std::string jinja_title(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    const char32_t c = text::decode(s, &j);
    if (title_separator(c)) {
      out.append(s.substr(i, j - i));
      i = j;
      continue;
    }
    size_t end = j;
    while (end < s.size()) {
      size_t k = end;
      if (title_separator(text::decode(s, &k))) break;
      end = k;
    }
    text::append_upper(&out, c);
    out += text::lower(s.substr(j, end - j));
    i = end;
  }
  return out;
}

// CPython's pad() for center: the odd column goes left when the width is odd.
std::string python_center(std::string_view s, size_t width, std::string_view fill) {
  const size_t len = text::length(s);
  if (len >= width) return std::string(s);
  const size_t marg = width - len;
  const size_t left = marg / 2 + (marg & width & 1);
  std::string out;
  for (size_t i = 0; i < left; ++i) out.append(fill);
  out.append(s);
  for (size_t i = 0; i < marg - left; ++i) out.append(fill);
  return out;
}

// jinja2 make_attrgetter: "a.b.0" looked up part by part with environment.getitem; an
// Undefined part is replaced by `fallback` (when given) before the next part is looked up.
bool attr_get(Interpreter* in, const Expr& at, const Value& item, const Value& attribute,
              Value* out, const Value* fallback = nullptr) {
  if (attribute.kind != Kind::kString) return in->get_item(at, item, attribute, out);
  std::string_view path = attribute.sv();
  Value cur = item;
  for (;;) {
    const size_t dot = path.find('.');
    const std::string_view part = path.substr(0, dot);
    Value key = Value::string(part);
    if (!part.empty() && part.size() < 18 &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      key = Value::integer(std::stoll(std::string(part)));
    }
    if (!in->get_item(at, cur, key, &cur)) return false;
    if (fallback != nullptr && cur.kind == Kind::kUndefined) cur = *fallback;
    if (dot == std::string_view::npos) break;
    path = path.substr(dot + 1);
  }
  *out = cur;
  return true;
}

}  // namespace

namespace {
bool lazy_filter(FilterId id, const Value& input) {
  switch (id) {
    case FilterId::kMap:
    case FilterId::kSelect:
    case FilterId::kReject:
    case FilterId::kSelectattr:
    case FilterId::kRejectattr:
    case FilterId::kItems:
    case FilterId::kBatch:
    case FilterId::kUnique:
      return true;
    case FilterId::kReverse:  // reversed() of a sequence, mapping or Undefined is an iterator
      return input.kind == Kind::kDict || input.kind == Kind::kUndefined ||
             (input.kind == Kind::kList && input.flavor() != ListFlavor::kGenerator);
    default:
      return false;
  }
}
}  // namespace

bool Interpreter::make_generator(const Expr& at, FilterId id, std::string_view name,
                                 const Value& input, const CallArgs& args, Value* out) {
  auto* g = arena_.allocate_array<GeneratorData>(1);
  Value* pos = args.npos > 0 ? arena_.allocate_array<Value>(args.npos) : nullptr;
  auto* kw = args.nkw > 0 ? arena_.allocate_array<KwArg>(args.nkw) : nullptr;
  if (g == nullptr || (args.npos > 0 && pos == nullptr) || (args.nkw > 0 && kw == nullptr)) {
    return fail_limit("memory limit exceeded");
  }
  for (size_t i = 0; i < args.npos; ++i) new (&pos[i]) Value(args.pos[i]);
  for (size_t i = 0; i < args.nkw; ++i) new (&kw[i]) KwArg(args.kw[i]);
  new (g) GeneratorData{&at, id, name, input, pos, args.npos, kw, args.nkw};
  *out = Value::list(nullptr, 0, ListFlavor::kGenerator);
  out->gen = g;
  out->owner = static_cast<uint8_t>(std::min(kMaxValueDepth, value_depth(input) + 1));
  return true;
}

bool Interpreter::run_generator(GeneratorData& g, const Value** items, size_t* n) {
  *items = nullptr;
  *n = 0;
  if (g.consumed) return true;  // a Python generator runs once
  g.consumed = true;
  CallArgs args;
  args.pos = const_cast<Value*>(g.pos);
  args.npos = args.pos_capacity = g.npos;
  args.kw = const_cast<KwArg*>(g.kw);
  args.nkw = args.kw_capacity = g.nkw;
  const bool saved = eager_;
  eager_ = true;
  Value result;
  const bool ok = apply_filter(*g.at, g.filter, g.name, g.input, args, &result);
  eager_ = saved;
  if (!ok) return false;
  *items = result.items;
  *n = result.size;
  return true;
}

bool Interpreter::apply_filter(const Expr& at, FilterId id, std::string_view name,
                               const Value& input, const CallArgs& args, Value* out) {
  if (!eager_ && lazy_filter(id, input)) return make_generator(at, id, name, input, args, out);
  // String filters are linear in their input: count it as work (64 bytes per step).
  if (input.kind == Kind::kString && !charge(at, input.size / 64)) return false;
  auto bind = [&](std::initializer_list<std::string_view> names, Value* slots) {
    return bind_params(this, at, name, args, names, slots);
  };
  auto no_args = [&]() { return bind({}, nullptr); };
  auto as_text = [&](Value* s) { return str_value(at, input, s); };
  // Sort key: lower-cased strings unless case_sensitive (jinja2 ignore_case).
  auto fold = [&](const Value& v, bool case_sensitive, Value* key) {
    if (v.kind == Kind::kString && !case_sensitive) return new_string(at, text::lower(v.sv()), key);
    *key = v;
    return true;
  };
  auto stable_sort_by = [&](std::vector<Value>& keys, std::vector<size_t>& order, bool reverse) {
    bool failed = false;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (failed) return false;
      bool r = false;
      if (!(reverse ? less(at, keys[b], keys[a], &r) : less(at, keys[a], keys[b], &r))) {
        failed = true;
        return false;
      }
      return r;
    });
    return !failed && charge(at, keys.size() * 4);
  };
  switch (id) {
    case FilterId::kUnknown:
      return fail(at, "No filter named '" + std::string(name) + "'.");

    case FilterId::kAbs: {
      if (!no_args()) return false;
      if (input.kind == Kind::kUndefined) return fail_undefined(at, input);
      if (input.kind == Kind::kFloat) {
        *out = Value::floating(std::fabs(input.f));
      } else if (is_intlike(input)) {
        const int64_t x = as_int(input);
        if (x == INT64_MIN) return fail(at, "integer overflow (infera supports 64-bit integers)");
        *out = Value::integer(x < 0 ? -x : x);
      } else {
        return fail(at, "bad operand type for abs(): '" + std::string(type_name(input)) + "'");
      }
      return true;
    }

    case FilterId::kAttr: {
      Value p[1];
      if (!bind({"name"}, p)) return false;
      if (input.kind == Kind::kUndefined) return fail_undefined(at, input);
      if (p[0].kind == Kind::kString && has_method(input, p[0].sv()))
        return get_attr(at, input, p[0].sv(), out);
      if (input.kind == Kind::kNamespace || input.kind == Kind::kLoop) {
        if (p[0].kind == Kind::kString) return get_attr(at, input, p[0].sv(), out);
      }
      *out = Value::undefined(UndefReason::kAttribute, p[0].kind == Kind::kString ? p[0].sv() : "?",
                              input.kind);
      return true;
    }

    case FilterId::kBatch: {
      Value p[2];
      if (!bind({"linecount", "fill_with"}, p)) return false;
      if (!is_intlike(p[0]) || as_int(p[0]) <= 0)
        return fail(at, "batch() needs a positive integer size");
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      const auto size = static_cast<size_t>(as_int(p[0]));
      std::vector<Value> batches;
      std::vector<Value> tmp;
      for (size_t i = 0; i < n; i += size) {
        tmp.assign(items + i, items + std::min(n, i + size));
        if (tmp.size() < size && given(p[1]) && p[1].kind != Kind::kNone) tmp.resize(size, p[1]);
        Value b;
        if (!new_list(at, tmp, ListFlavor::kList, &b)) return false;
        batches.push_back(b);
      }
      return new_list(at, batches, ListFlavor::kList, out);
    }

    case FilterId::kCapitalize: {
      Value s;
      if (!no_args() || !as_text(&s)) return false;
      return new_string(at, text::capitalize(s.sv()), out);
    }

    case FilterId::kCenter: {
      Value p[1];
      Value s;
      if (!bind({"width"}, p) || !as_text(&s)) return false;
      const int64_t width = given(p[0]) ? (is_intlike(p[0]) ? as_int(p[0]) : -1) : 80;
      if (width < 0 || static_cast<uint64_t>(width) > limits_.max_output_bytes) {
        return fail(at, "center() width must be a non-negative integer within the output limit");
      }
      return new_string(at, python_center(s.sv(), static_cast<size_t>(width), " "), out);
    }

    case FilterId::kCount:
    case FilterId::kLength: {
      int64_t n = 0;
      if (!no_args() || !length(at, input, &n)) return false;
      *out = Value::integer(n);
      return true;
    }

    case FilterId::kDefault: {
      Value p[2];
      if (!bind({"default_value", "boolean"}, p)) return false;
      const bool replace = input.kind == Kind::kUndefined || (truthy(p[1]) && !truthy(input));
      *out = replace ? (given(p[0]) ? p[0] : Value::string({})) : input;
      return true;
    }

    case FilterId::kDictsort: {
      Value p[3];
      if (!bind({"case_sensitive", "by", "reverse"}, p)) return false;
      if (input.kind != Kind::kDict) {
        if (input.kind == Kind::kUndefined) return fail_undefined(at, input);
        return fail(at, "dictsort requires a mapping, not " + std::string(type_name(input)));
      }
      int pos = 0;
      if (given(p[1])) {
        if (p[1].kind == Kind::kString && p[1].sv() == "value") {
          pos = 1;
        } else if (!(p[1].kind == Kind::kString && p[1].sv() == "key")) {
          return fail(at, "You can only sort by either \"key\" or \"value\"");
        }
      }
      std::vector<Value> keys(input.size);
      std::vector<size_t> order(input.size);
      for (size_t i = 0; i < input.size; ++i) {
        order[i] = i;
        const Value& k = pos == 0 ? input.entries[i].key : input.entries[i].value;
        if (!fold(k, truthy(p[0]), &keys[i])) return false;
      }
      if (!stable_sort_by(keys, order, truthy(p[2]))) return false;
      std::vector<Value> pairs;
      for (size_t i : order) {
        Value pair;
        const Value kv[2] = {input.entries[i].key, input.entries[i].value};
        if (!new_list(at, kv, ListFlavor::kTuple, &pair)) return false;
        pairs.push_back(pair);
      }
      return new_list(at, pairs, ListFlavor::kList, out);
    }

    case FilterId::kEscape: {
      Value s;
      if (!no_args() || !as_text(&s)) return false;
      return new_string(at, html_escape(s.sv()), out);
    }

    case FilterId::kFirst:
    case FilterId::kLast: {
      if (!no_args()) return false;
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      if (n == 0) {
        *out = Value::undefined(UndefReason::kMessage, id == FilterId::kFirst
                                                           ? "No first item, sequence was empty."
                                                           : "No last item, sequence was empty.");
        return true;
      }
      *out = id == FilterId::kFirst ? items[0] : items[n - 1];
      return true;
    }

    case FilterId::kFloat: {
      Value p[1];
      if (!bind({"default"}, p)) return false;
      const Value fallback = given(p[0]) ? p[0] : Value::floating(0.0);
      if (input.kind == Kind::kUndefined) return fail_undefined(at, input);
      if (input.is_number()) {
        *out = Value::floating(as_float(input));
        return true;
      }
      double v = 0;
      if (input.kind == Kind::kString && parse_python_float(input.sv(), &v)) {
        *out = Value::floating(v);
        return true;
      }
      *out = fallback;
      return true;
    }

    case FilterId::kFormat: {
      Value s;
      if (!as_text(&s)) return false;
      if (args.npos > 0 && args.nkw > 0) {
        return fail(at, "can't handle positional and keyword arguments at the same time");
      }
      Value values;
      if (args.nkw > 0) {
        std::vector<DictEntry> entries;
        for (size_t k = 0; k < args.nkw; ++k)
          entries.push_back({Value::string(args.kw[k].name), args.kw[k].value});
        if (!new_dict(at, entries, &values)) return false;
      } else if (!new_list(at, args.positional(), ListFlavor::kTuple, &values)) {
        return false;
      }
      return percent_format(at, s.sv(), values, out);
    }

    case FilterId::kGroupby: {
      Value p[3];
      if (!bind({"attribute", "default", "case_sensitive"}, p)) return false;
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      const bool use_default = given(p[1]) && p[1].kind != Kind::kNone;
      std::vector<Value> keys(n);
      std::vector<Value> real_keys(n);
      std::vector<size_t> order(n);
      for (size_t i = 0; i < n; ++i) {
        order[i] = i;
        if (!attr_get(this, at, items[i], p[0], &real_keys[i], use_default ? &p[1] : nullptr))
          return false;
        if (!fold(real_keys[i], truthy(p[2]), &keys[i])) return false;
      }
      if (!stable_sort_by(keys, order, false)) return false;
      std::vector<Value> groups;
      for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && equals(keys[order[j]], keys[order[i]])) ++j;
        std::vector<Value> members;
        for (size_t k = i; k < j; ++k) members.push_back(items[order[k]]);
        Value pair[2];
        pair[0] = real_keys[order[i]];  // the first member's own key, not the folded one
        if (!new_list(at, members, ListFlavor::kList, &pair[1])) return false;
        Value group;
        if (!new_list(at, pair, ListFlavor::kTuple, &group)) return false;
        groups.push_back(group);
        i = j;
      }
      return new_list(at, groups, ListFlavor::kList, out);
    }

    case FilterId::kIndent: {
      Value p[3];
      if (!bind({"width", "first", "blank"}, p)) return false;
      if (input.kind == Kind::kUndefined) return fail_undefined(at, input);
      if (input.kind != Kind::kString) {  // jinja2 does `s += "\n"` first
        return fail(at, "indent requires a string, not " + std::string(type_name(input)));
      }
      const Value s = input;
      std::string indention;
      if (p[0].kind == Kind::kString) {
        indention = std::string(p[0].sv());
      } else {
        const int64_t w = given(p[0]) ? (is_intlike(p[0]) ? as_int(p[0]) : 0) : 4;
        if (w > 1000) return fail(at, "indent width too large");
        indention.assign(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
      }
      std::string value(s.sv());
      value.push_back('\n');  // jinja2: "this quirk is necessary for splitlines method"
      const std::vector<std::string_view> lines = split_lines(value, false);
      std::string rv;
      if (truthy(p[2])) {
        for (size_t i = 0; i < lines.size(); ++i) {
          if (i > 0) rv += "\n" + indention;
          rv.append(lines[i]);
        }
      } else {
        rv.append(lines.empty() ? std::string_view() : lines[0]);
        if (lines.size() > 1) {
          rv.push_back('\n');
          for (size_t i = 1; i < lines.size(); ++i) {
            if (i > 1) rv.push_back('\n');
            if (!lines[i].empty()) rv += indention;
            rv.append(lines[i]);
          }
        }
      }
      if (truthy(p[1])) rv = indention + rv;
      if (!charge(at, rv.size() / 64)) return false;
      return new_string(at, rv, out);
    }

    case FilterId::kInt: {
      Value p[2];
      if (!bind({"default", "base"}, p)) return false;
      const Value fallback = given(p[0]) ? p[0] : Value::integer(0);
      const int base = given(p[1]) && is_intlike(p[1]) ? static_cast<int>(as_int(p[1])) : 10;
      if (input.kind == Kind::kUndefined) return fail_undefined(at, input);
      if (is_intlike(input)) {
        *out = Value::integer(as_int(input));
        return true;
      }
      if (input.kind == Kind::kFloat) {
        if (std::isinf(input.f)) return fail(at, "cannot convert float infinity to integer");
        if (std::isnan(input.f)) {
          *out = fallback;
          return true;
        }
        if (std::fabs(input.f) >= 9.2e18)
          return fail(at, "integer overflow (infera supports 64-bit integers)");
        *out = Value::integer(static_cast<int64_t>(input.f));
        return true;
      }
      if (input.kind == Kind::kString) {
        int64_t v = 0;
        if (parse_python_int(input.sv(), base, &v)) {
          *out = Value::integer(v);
          return true;
        }
        double f = 0;  // "42.23"|int gives 42
        if (parse_python_float(input.sv(), &f) && std::isfinite(f) && std::fabs(f) < 9.2e18) {
          *out = Value::integer(static_cast<int64_t>(f));
          return true;
        }
      }
      *out = fallback;
      return true;
    }

    case FilterId::kItems: {
      if (!no_args()) return false;
      if (input.kind == Kind::kUndefined) {
        *out = Value::list(nullptr, 0);
        return true;
      }
      if (input.kind != Kind::kDict) return fail(at, "Can only get item pairs from a mapping.");
      std::vector<Value> pairs(input.size);
      for (size_t i = 0; i < input.size; ++i) {
        const Value kv[2] = {input.entries[i].key, input.entries[i].value};
        if (!new_list(at, kv, ListFlavor::kTuple, &pairs[i])) return false;
      }
      return new_list(at, pairs, ListFlavor::kList, out);
    }

    case FilterId::kJoin: {
      Value p[2];
      if (!bind({"d", "attribute"}, p)) return false;
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      Value sep;
      if (given(p[0])) {
        if (!str_value(at, p[0], &sep)) return false;
      } else {
        sep = Value::string({});
      }
      std::string result;
      for (size_t i = 0; i < n; ++i) {
        if (i > 0) result.append(sep.sv());
        Value item = items[i];
        if (given(p[1]) && p[1].kind != Kind::kNone && !attr_get(this, at, item, p[1], &item))
          return false;
        to_str(item, &result);
        if (result.size() > limits_.max_output_bytes) return fail_limit("joined string too large");
      }
      if (!charge(at, result.size() / 64)) return false;
      return new_string(at, result, out);
    }

    case FilterId::kList: {
      if (!no_args()) return false;
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      return new_list(at, {items, n}, ListFlavor::kList, out);
    }

    case FilterId::kLower:
    case FilterId::kUpper: {
      Value s;
      if (!no_args() || !as_text(&s)) return false;
      if (!charge(at, s.size / 64)) return false;
      return new_string(at, id == FilterId::kLower ? text::lower(s.sv()) : text::upper(s.sv()),
                        out);
    }

    case FilterId::kMap: {
      if (!truthy(input)) {
        *out = Value::list(nullptr, 0);
        return true;
      }
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      std::vector<Value> mapped(n);
      if (args.npos == 0 && args.nkw > 0) {
        Value attribute;
        Value fallback;
        bool has_attribute = false;
        for (size_t k = 0; k < args.nkw; ++k) {
          if (args.kw[k].name == "attribute") {
            attribute = args.kw[k].value;
            has_attribute = true;
          } else if (args.kw[k].name == "default") {
            fallback = args.kw[k].value;
          } else {
            return fail(at, "Unexpected keyword argument '" + std::string(args.kw[k].name) + "'");
          }
        }
        if (!has_attribute) return fail(at, "map requires a filter argument");
        const bool use_fallback = given(fallback) && fallback.kind != Kind::kNone;
        for (size_t i = 0; i < n; ++i) {
          if (!attr_get(this, at, items[i], attribute, &mapped[i],
                        use_fallback ? &fallback : nullptr)) {
            return false;
          }
        }
      } else {
        if (args.npos == 0) return fail(at, "map requires a filter argument");
        if (args.pos[0].kind != Kind::kString)
          return fail(at, "map: the filter name must be a string");
        const std::string_view filter = args.pos[0].sv();
        const FilterId fid = find_filter(filter);
        CallArgs rest;
        rest_of(args, 1, &rest);
        for (size_t i = 0; i < n; ++i) {
          if (!apply_filter(at, fid, filter, items[i], rest, &mapped[i])) return false;
        }
      }
      return new_list(at, mapped, ListFlavor::kList, out);
    }

    case FilterId::kMax:
    case FilterId::kMin: {
      Value p[2];
      if (!bind({"case_sensitive", "attribute"}, p)) return false;
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      if (n == 0) {
        *out = Value::undefined(UndefReason::kMessage, "No aggregated item, sequence was empty.");
        return true;
      }
      size_t best = 0;
      Value best_key;
      for (size_t i = 0; i < n; ++i) {
        Value key = items[i];
        if (given(p[1]) && p[1].kind != Kind::kNone && !attr_get(this, at, key, p[1], &key))
          return false;
        if (!fold(key, truthy(p[0]), &key)) return false;
        if (i == 0) {
          best_key = key;
          continue;
        }
        bool better = false;
        if (!(id == FilterId::kMax ? less(at, best_key, key, &better)
                                   : less(at, key, best_key, &better))) {
          return false;
        }
        if (better) {
          best = i;
          best_key = key;
        }
      }
      *out = items[best];
      return charge(at, n);
    }

    case FilterId::kSelect:
    case FilterId::kReject:
    case FilterId::kSelectattr:
    case FilterId::kRejectattr: {
      if (!truthy(input)) {
        *out = Value::list(nullptr, 0);
        return true;
      }
      const bool by_attr = id == FilterId::kSelectattr || id == FilterId::kRejectattr;
      const bool keep_if = id == FilterId::kSelect || id == FilterId::kSelectattr;
      const size_t off = by_attr ? 1 : 0;
      if (by_attr && args.npos == 0) return fail(at, "Missing parameter for attribute name");
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      const bool has_test = args.npos > off;
      std::string_view test_name;
      TestId tid = TestId::kUnknown;
      if (has_test) {
        if (args.pos[off].kind != Kind::kString) return fail(at, "the test name must be a string");
        test_name = args.pos[off].sv();
        tid = find_test(test_name);
      }
      CallArgs rest;
      rest_of(args, off + 1, &rest);
      std::vector<Value> kept;
      for (size_t i = 0; i < n; ++i) {
        Value subject = items[i];
        if (by_attr && !attr_get(this, at, subject, args.pos[0], &subject)) return false;
        bool pass = false;
        if (has_test) {
          if (!apply_test(at, tid, test_name, subject, rest, &pass)) return false;
        } else {
          pass = truthy(subject);
        }
        if (pass == keep_if) kept.push_back(items[i]);
      }
      return new_list(at, kept, ListFlavor::kList, out);
    }

    case FilterId::kReplace: {
      Value p[3];
      Value s;
      if (!bind({"old", "new", "count"}, p) || !as_text(&s)) return false;
      Value old_s;
      Value new_s;
      if (!str_value(at, p[0], &old_s) || !str_value(at, p[1], &new_s)) return false;
      Value count = given(p[2]) ? p[2] : Value::integer(-1);
      if (p[2].kind == Kind::kNone) count = Value::integer(-1);
      CallArgs margs;
      margs.pos[0] = old_s;
      margs.pos[1] = new_s;
      margs.pos[2] = count;
      margs.npos = 3;
      return call_method(at, s, "replace", margs, out);
    }

    case FilterId::kReverse: {
      if (!no_args()) return false;
      if (input.kind == Kind::kString) {
        std::vector<std::string_view> chars;
        const std::string_view s = input.sv();
        for (size_t i = 0; i < s.size();) {
          const size_t start = i;
          text::decode(s, &i);
          chars.push_back(s.substr(start, i - start));
        }
        std::string r;
        r.reserve(s.size());
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) r.append(*it);
        return new_string(at, r, out);
      }
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      std::vector<Value> r(items, items + n);
      std::reverse(r.begin(), r.end());
      return new_list(at, r, ListFlavor::kList, out);
    }

    case FilterId::kRound: {
      Value p[2];
      if (!bind({"precision", "method"}, p)) return false;
      if (input.kind == Kind::kUndefined) return fail_undefined(at, input);
      const int64_t precision = given(p[0]) ? (is_intlike(p[0]) ? as_int(p[0]) : 0) : 0;
      std::string_view method = "common";
      if (given(p[1])) {
        if (p[1].kind != Kind::kString ||
            (p[1].sv() != "common" && p[1].sv() != "ceil" && p[1].sv() != "floor")) {
          return fail(at, "method must be common, ceil or floor");
        }
        method = p[1].sv();
      }
      if (!input.is_number()) {
        return fail(at,
                    "type " + std::string(type_name(input)) + " doesn't define __round__ method");
      }
      if (precision < -300 || precision > 300) return fail(at, "round() precision out of range");
      if (method == "common") {
        if (is_intlike(input)) {  // Python's round(int, n) stays an int
          *out = Value::integer(as_int(input));
          return true;
        }
        const double x = input.f;
        if (!std::isfinite(x)) {
          *out = input;
          return true;
        }
        if (precision >= 0) {
          // Correctly rounded, half to even on the exact binary value, as CPython's round().
          char buf[400];
          std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
          *out = Value::floating(std::strtod(buf, nullptr));
        } else {
          const double scale = std::pow(10.0, static_cast<double>(-precision));
          *out = Value::floating(std::nearbyint(x / scale) * scale);
        }
        return true;
      }
      const double scale = std::pow(10.0, static_cast<double>(precision));
      const double x = as_float(input) * scale;
      *out = Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
      return true;
    }

    case FilterId::kSafe:
    case FilterId::kString:
      if (!no_args()) return false;
      return str_value(at, input, out);

    case FilterId::kSort: {
      Value p[3];
      if (!bind({"reverse", "case_sensitive", "attribute"}, p)) return false;
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      std::vector<Value> keys(n);
      std::vector<size_t> order(n);
      // jinja2 make_multi_attrgetter: "a,b" sorts by [item.a, item.b], compared as lists.
      std::vector<Value> attributes;
      if (given(p[2]) && p[2].kind == Kind::kString) {
        std::string_view rest = p[2].sv();
        for (;;) {
          const size_t comma = rest.find(',');
          attributes.push_back(Value::string(rest.substr(0, comma)));
          if (comma == std::string_view::npos) break;
          rest = rest.substr(comma + 1);
        }
      } else if (given(p[2]) && p[2].kind != Kind::kNone) {
        attributes.push_back(p[2]);
      }
      for (size_t i = 0; i < n; ++i) {
        order[i] = i;
        if (attributes.empty()) {
          if (!fold(items[i], truthy(p[1]), &keys[i])) return false;
          continue;
        }
        std::vector<Value> parts(attributes.size());
        for (size_t a = 0; a < attributes.size(); ++a) {
          if (!attr_get(this, at, items[i], attributes[a], &parts[a]) ||
              !fold(parts[a], truthy(p[1]), &parts[a])) {
            return false;
          }
        }
        if (!new_list(at, parts, ListFlavor::kList, &keys[i])) return false;
      }
      if (!stable_sort_by(keys, order, truthy(p[0]))) return false;
      std::vector<Value> sorted;
      sorted.reserve(n);
      for (size_t i : order) sorted.push_back(items[i]);
      return new_list(at, sorted, ListFlavor::kList, out);
    }

    case FilterId::kSum: {
      Value p[2];
      if (!bind({"attribute", "start"}, p)) return false;
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      Value total = given(p[1]) ? p[1] : Value::integer(0);
      for (size_t i = 0; i < n; ++i) {
        Value item = items[i];
        if (given(p[0]) && p[0].kind != Kind::kNone && !attr_get(this, at, item, p[0], &item))
          return false;
        if (!binary(at, BinOp::kAdd, total, item, &total)) return false;
      }
      *out = total;
      return true;
    }

    case FilterId::kTitle: {
      Value s;
      if (!no_args() || !as_text(&s)) return false;
      return new_string(at, jinja_title(s.sv()), out);
    }

    case FilterId::kTojson: {
      // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
      Value p[4];
      if (!bind({"ensure_ascii", "indent", "separators", "sort_keys"}, p)) return false;
      JsonStyle style;
      style.ensure_ascii = truthy(p[0]);
      style.sort_keys = truthy(p[3]);
      if (given(p[1]) && p[1].kind != Kind::kNone) {
        style.has_indent = true;
        style.item_sep = ",";
        if (p[1].kind == Kind::kString) {
          style.indent = std::string(p[1].sv());
        } else if (is_intlike(p[1])) {
          const int64_t w = as_int(p[1]);
          if (w > 1000) return fail(at, "tojson indent too large");
          style.indent.assign(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
        } else {
          return fail(at, "can't multiply sequence by non-int of type '" +
                              std::string(type_name(p[1])) + "'");
        }
      }
      if (given(p[2]) && p[2].kind != Kind::kNone) {
        if (!p[2].is_sequence() || p[2].size != 2 || p[2].items[0].kind != Kind::kString ||
            p[2].items[1].kind != Kind::kString) {
          return fail(at, "tojson separators must be a pair of strings");
        }
        style.item_sep = std::string(p[2].items[0].sv());
        style.key_sep = std::string(p[2].items[1].sv());
      }
      std::string json;
      if (!to_json(at, input, style, &json)) return false;
      return new_string(at, json, out);
    }

    case FilterId::kTrim: {
      Value p[1];
      Value s;
      if (!bind({"chars"}, p) || !as_text(&s)) return false;
      *out = Value::string(strip_chars(s.sv(), p[0], true, true));
      return true;
    }

    case FilterId::kUnique: {
      Value p[2];
      if (!bind({"case_sensitive", "attribute"}, p)) return false;
      const Value* items = nullptr;
      size_t n = 0;
      if (!iterate(at, input, &items, &n)) return false;
      std::vector<Value> seen;
      std::vector<Value> kept;
      for (size_t i = 0; i < n; ++i) {
        Value key = items[i];
        if (given(p[1]) && p[1].kind != Kind::kNone && !attr_get(this, at, key, p[1], &key))
          return false;
        if (!fold(key, truthy(p[0]), &key)) return false;
        if (!charge(at, seen.size())) return false;
        bool dup = false;
        for (const Value& s : seen) {
          if (equals(s, key)) {
            dup = true;
            break;
          }
        }
        if (dup) continue;
        seen.push_back(key);
        kept.push_back(items[i]);
      }
      return new_list(at, kept, ListFlavor::kList, out);
    }

    case FilterId::kWordcount: {
      Value s;
      if (!no_args() || !as_text(&s)) return false;
      int64_t words = 0;
      bool in_word = false;
      const std::string_view t = s.sv();
      for (size_t i = 0; i < t.size();) {
        const bool w = text::is_word(text::decode(t, &i));
        if (w && !in_word) ++words;
        in_word = w;
      }
      *out = Value::integer(words);
      return true;
    }
  }
  return fail(at, "No filter named '" + std::string(name) + "'.");
}

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
    case TestId::kBoolean:
      *out = input.kind == Kind::kBool;
      return none();
    case TestId::kCallable:  // jinja2's Undefined defines __call__ (which raises), so it counts
      *out = input.kind == Kind::kMacro || input.kind == Kind::kFunction ||
             input.kind == Kind::kMethod || input.kind == Kind::kUndefined;
      return none();
    case TestId::kDefined:
      *out = input.kind != Kind::kUndefined;
      return none();
    case TestId::kUndefined:
      *out = input.kind == Kind::kUndefined;
      return none();
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
    case TestId::kEscaped:
      *out = false;
      return none();
    case TestId::kFalse:
      *out = input.kind == Kind::kBool && !input.b;
      return none();
    case TestId::kTrue:
      *out = input.kind == Kind::kBool && input.b;
      return none();
    case TestId::kFilter:
      *out = input.kind == Kind::kString && find_filter(input.sv()) != FilterId::kUnknown;
      return none();
    case TestId::kTest:
      *out = input.kind == Kind::kString && find_test(input.sv()) != TestId::kUnknown;
      return none();
    case TestId::kFloat:
      *out = input.kind == Kind::kFloat;
      return none();
    case TestId::kInteger:
      *out = input.kind == Kind::kInt;
      return none();
    case TestId::kNumber:
      *out = input.is_number();
      return none();
    case TestId::kIn:
      if (!one("seq")) return false;
      return contains(at, p[0], input, out);
    case TestId::kIterable:
      *out = input.kind == Kind::kString || input.kind == Kind::kList ||
             input.kind == Kind::kDict || input.kind == Kind::kUndefined ||
             input.kind == Kind::kLoop;
      return none();
    case TestId::kSequence:
      *out = input.kind == Kind::kString || input.is_sequence() || input.kind == Kind::kDict ||
             input.kind == Kind::kUndefined;
      return none();
    case TestId::kMapping:
      *out = input.kind == Kind::kDict;
      return none();
    case TestId::kNone:
      *out = input.kind == Kind::kNone;
      return none();
    case TestId::kString:
      *out = input.kind == Kind::kString;
      return none();
    case TestId::kLower:
    case TestId::kUpper: {
      if (!none()) return false;
      std::string s;
      to_str(input, &s);
      bool cased = false;
      bool ok = true;
      for (size_t i = 0; i < s.size();) {
        const char32_t c = text::decode(s, &i);
        if (!text::is_cased(c)) continue;
        cased = true;
        if (id == TestId::kLower ? !text::is_lower(c) : !text::is_upper(c)) ok = false;
      }
      *out = cased && ok;
      return true;
    }
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
  }
  return fail(at, "No test named '" + std::string(name) + "'.");
}

// --- methods ----------------------------------------------------------------------------------

bool Interpreter::call_method(const Expr& at, const Value& obj, std::string_view name,
                              const CallArgs& args, Value* out) {
  auto bind = [&](std::initializer_list<std::string_view> names, Value* slots) {
    return bind_params(this, at, name, args, names, slots);
  };
  auto no_args = [&]() { return bind({}, nullptr); };
  auto need_str = [&](const Value& v, std::string_view what) {
    if (v.kind == Kind::kString) return true;
    return fail(at, std::string(name) + "() argument " + std::string(what) + " must be str, not " +
                        std::string(type_name(v)));
  };

  if (obj.kind == Kind::kLoop) {
    LoopData& loop = *obj.loop;
    if (name == "cycle") {
      if (args.npos == 0) return fail(at, "no items for cycling given");
      *out = args.pos[loop.index0 % args.npos];
      return true;
    }
    Value current;  // changed(*values): true when the values differ from the previous call
    if (!new_list(at, args.positional(), ListFlavor::kTuple, &current)) return false;
    *out = Value::boolean(!loop.has_changed_value || !equals(loop.changed_value, current));
    loop.has_changed_value = true;
    loop.changed_value = current;
    return true;
  }

  if (obj.kind == Kind::kDict) {
    if (name == "get") {
      Value p[2];
      if (!bind({"key", "default"}, p)) return false;
      if (args.npos < 1) return fail(at, "get expected at least 1 argument, got 0");
      for (size_t i = 0; i < obj.size; ++i) {
        if (equals(obj.entries[i].key, p[0])) {
          *out = obj.entries[i].value;
          return true;
        }
      }
      *out = given(p[1]) ? p[1] : Value::none();
      return true;
    }
    if (!no_args()) return false;
    if (name == "copy") {
      *out = obj;
      return true;
    }
    std::vector<Value> items(obj.size);
    for (size_t i = 0; i < obj.size; ++i) {
      if (name == "keys") {
        items[i] = obj.entries[i].key;
      } else if (name == "values") {
        items[i] = obj.entries[i].value;
      } else {
        const Value kv[2] = {obj.entries[i].key, obj.entries[i].value};
        if (!new_list(at, kv, ListFlavor::kTuple, &items[i])) return false;
      }
    }
    const ListFlavor flavor = name == "keys"     ? ListFlavor::kDictKeys
                              : name == "values" ? ListFlavor::kDictValues
                                                 : ListFlavor::kDictItems;
    return new_list(at, items, flavor, out);
  }

  if (obj.kind == Kind::kList) {
    Value p[3];
    if (!bind({"value", "start", "stop"}, p)) return false;
    if (args.npos < 1)
      return fail(at, std::string(name) + "() takes at least 1 argument (0 given)");
    if (!charge(at, obj.size)) return false;
    if (name == "count") {
      if (args.npos > 1) return fail(at, "count() takes exactly one argument");
      int64_t c = 0;
      for (size_t i = 0; i < obj.size; ++i) c += equals(obj.items[i], p[0]) ? 1 : 0;
      *out = Value::integer(c);
      return true;
    }
    const auto n = static_cast<int64_t>(obj.size);
    int64_t start = is_intlike(p[1]) ? as_int(p[1]) : 0;
    int64_t stop = is_intlike(p[2]) ? as_int(p[2]) : n;
    if (start < 0) start = std::max<int64_t>(0, start + n);
    if (stop < 0) stop = std::max<int64_t>(0, stop + n);
    for (int64_t i = start; i < std::min(stop, n); ++i) {
      if (equals(obj.items[i], p[0])) {
        *out = Value::integer(i);
        return true;
      }
    }
    std::string r;
    to_repr(p[0], &r);
    return fail(at, r + " is not in " + std::string(type_name(obj)));
  }

  if (obj.kind != Kind::kString)
    return fail(at, "'" + std::string(type_name(obj)) + "' object has no method '" +
                        std::string(name) + "'");
  const std::string_view s = obj.sv();
  if (!charge(at, s.size() / 64)) return false;

  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Value p[1];
    if (!bind({"chars"}, p)) return false;
    if (given(p[0]) && p[0].kind != Kind::kNone && !need_str(p[0], "1")) return false;
    *out = Value::string(strip_chars(s, p[0], name != "rstrip", name != "lstrip"));
    return true;
  }
  if (name == "upper" || name == "lower" || name == "casefold") {
    if (!no_args()) return false;
    return new_string(at, name == "upper" ? text::upper(s) : text::lower(s), out);
  }
  if (name == "title") {
    if (!no_args()) return false;
    return new_string(at, text::title(s), out);
  }
  if (name == "capitalize") {
    if (!no_args()) return false;
    return new_string(at, text::capitalize(s), out);
  }
  if (name == "swapcase") {
    if (!no_args()) return false;
    std::string r;
    for (size_t i = 0; i < s.size();) {
      const char32_t c = text::decode(s, &i);
      if (text::is_upper(c)) {
        text::append_utf8(&r, text::to_lower(c));
      } else if (text::is_lower(c)) {
        text::append_upper(&r, c);
      } else {
        text::append_utf8(&r, c);
      }
    }
    return new_string(at, r, out);
  }
  if (name == "startswith" || name == "endswith") {
    Value p[3];
    if (!bind({"prefix", "start", "end"}, p)) return false;
    const size_t b = clamp_index(s, p[1], false);
    const size_t e = std::max(b, clamp_index(s, p[2], true));
    const std::string_view window = s.substr(b, e - b);
    auto check = [&](const Value& v, bool* hit) {
      if (v.kind != Kind::kString) {
        return fail(at, std::string(name) + " first arg must be str or a tuple of str, not " +
                            std::string(type_name(v)));
      }
      *hit = name == "startswith"
                 ? window.substr(0, v.size) == v.sv()
                 : (window.size() >= v.size && window.substr(window.size() - v.size) == v.sv());
      return true;
    };
    bool hit = false;
    if (p[0].kind == Kind::kList && p[0].flavor() == ListFlavor::kTuple) {
      for (size_t i = 0; i < p[0].size && !hit; ++i) {
        if (!check(p[0].items[i], &hit)) return false;
      }
    } else if (!check(p[0], &hit)) {
      return false;
    }
    *out = Value::boolean(hit);
    return true;
  }
  if (name == "split" || name == "rsplit") {
    Value p[2];
    if (!bind({"sep", "maxsplit"}, p)) return false;
    int64_t maxsplit = is_intlike(p[1]) ? as_int(p[1]) : -1;
    if (maxsplit < 0) maxsplit = INT64_MAX;
    std::vector<std::string_view> parts;
    const bool right = name == "rsplit";
    if (!given(p[0]) || p[0].kind == Kind::kNone) {
      // Runs of whitespace; leading and trailing whitespace ignored.
      std::vector<std::pair<size_t, size_t>> words;
      for (size_t i = 0; i < s.size();) {
        size_t k = text::space_at(s, i);
        if (k > 0) {
          i += k;
          continue;
        }
        const size_t start = i;
        while (i < s.size() && text::space_at(s, i) == 0) text::decode(s, &i);
        words.emplace_back(start, i);
      }
      const size_t count = words.size();
      const size_t keep =
          static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(count), maxsplit));
      auto word = [&](size_t i) {
        return s.substr(words[i].first, words[i].second - words[i].first);
      };
      std::vector<std::string_view> tail;
      if (count == 0) {
        parts.clear();
      } else if (!right) {
        // After maxsplit splits the rest is kept as is, trailing whitespace included.
        for (size_t i = 0; i < keep; ++i) parts.push_back(word(i));
        if (keep < count) parts.push_back(s.substr(words[keep].first));
      } else {
        for (size_t i = 0; i < keep; ++i) tail.push_back(word(count - 1 - i));
        if (keep < count) parts.push_back(s.substr(0, words[count - keep - 1].second));
        parts.insert(parts.end(), tail.rbegin(), tail.rend());
      }
    } else {
      if (!need_str(p[0], "1")) return false;
      const std::string_view sep = p[0].sv();
      if (sep.empty()) return fail(at, "empty separator");
      if (!right) {
        size_t start = 0;
        int64_t splits = 0;
        for (;;) {
          const size_t hit = splits < maxsplit ? s.find(sep, start) : std::string_view::npos;
          if (hit == std::string_view::npos) {
            parts.push_back(s.substr(start));
            break;
          }
          parts.push_back(s.substr(start, hit - start));
          start = hit + sep.size();
          ++splits;
        }
      } else {
        size_t end = s.size();
        int64_t splits = 0;
        std::vector<std::string_view> rev;
        for (;;) {
          size_t hit = std::string_view::npos;
          if (splits < maxsplit && end >= sep.size()) hit = s.substr(0, end).rfind(sep);
          if (hit == std::string_view::npos) {
            rev.push_back(s.substr(0, end));
            break;
          }
          rev.push_back(s.substr(hit + sep.size(), end - hit - sep.size()));
          end = hit;
          ++splits;
        }
        parts.assign(rev.rbegin(), rev.rend());
      }
    }
    std::vector<Value> values(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) values[i] = Value::string(parts[i]);
    return new_list(at, values, ListFlavor::kList, out);
  }
  if (name == "splitlines") {
    Value p[1];
    if (!bind({"keepends"}, p)) return false;
    const std::vector<std::string_view> lines = split_lines(s, truthy(p[0]));
    std::vector<Value> values(lines.size());
    for (size_t i = 0; i < lines.size(); ++i) values[i] = Value::string(lines[i]);
    return new_list(at, values, ListFlavor::kList, out);
  }
  if (name == "replace") {
    Value p[3];
    if (!bind({"old", "new", "count"}, p)) return false;
    if (!need_str(p[0], "1") || !need_str(p[1], "2")) return false;
    int64_t count = is_intlike(p[2]) ? as_int(p[2]) : -1;
    if (count < 0) count = INT64_MAX;
    const std::string_view from = p[0].sv();
    const std::string_view to = p[1].sv();
    std::string r;
    if (from.empty()) {  // inserts `to` before every character and at the end
      int64_t done = 0;
      for (size_t i = 0; i < s.size();) {
        if (done < count) {
          r.append(to);
          ++done;
        }
        const size_t start = i;
        text::decode(s, &i);
        r.append(s.substr(start, i - start));
        if (r.size() > limits_.max_output_bytes) return fail_limit("replaced string too large");
      }
      if (done < count) r.append(to);
    } else {
      size_t start = 0;
      int64_t done = 0;
      for (;;) {
        const size_t hit = done < count ? s.find(from, start) : std::string_view::npos;
        if (hit == std::string_view::npos) break;
        r.append(s.substr(start, hit - start));
        r.append(to);
        if (r.size() > limits_.max_output_bytes) return fail_limit("replaced string too large");
        start = hit + from.size();
        ++done;
      }
      if (done == 0) {
        *out = obj;
        return true;
      }
      r.append(s.substr(start));
    }
    return new_string(at, r, out);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Value p[3];
    if (!bind({"sub", "start", "end"}, p)) return false;
    if (!need_str(p[0], "1")) return false;
    const size_t b = clamp_index(s, p[1], false);
    const size_t e = clamp_index(s, p[2], true);
    const std::string_view sub = p[0].sv();
    if (e < b || e - b < sub.size()) {
      if (name == "count") {
        *out = Value::integer(0);
        return true;
      }
      if (name == "index" || name == "rindex") return fail(at, "substring not found");
      *out = Value::integer(-1);
      return true;
    }
    const std::string_view window = s.substr(b, e - b);
    if (name == "count") {
      int64_t c = 0;
      if (sub.empty()) {
        c = static_cast<int64_t>(text::length(window)) + 1;
      } else {
        for (size_t pos = window.find(sub); pos != std::string_view::npos;
             pos = window.find(sub, pos + sub.size()))
          ++c;
      }
      *out = Value::integer(c);
      return true;
    }
    const size_t hit = (name == "find" || name == "index") ? window.find(sub) : window.rfind(sub);
    if (hit == std::string_view::npos) {
      if (name == "index" || name == "rindex") return fail(at, "substring not found");
      *out = Value::integer(-1);
      return true;
    }
    *out = Value::integer(char_index(s, b + hit));
    return true;
  }
  if (name == "join") {
    Value p[1];
    if (!bind({"iterable"}, p)) return false;
    const Value* items = nullptr;
    size_t n = 0;
    if (!iterate(at, p[0], &items, &n)) return false;
    std::string r;
    for (size_t i = 0; i < n; ++i) {
      if (items[i].kind != Kind::kString) {
        return fail(at, "sequence item " + std::to_string(i) + ": expected str instance, " +
                            std::string(type_name(items[i])) + " found");
      }
      if (i > 0) r.append(s);
      r.append(items[i].sv());
      if (r.size() > limits_.max_output_bytes) return fail_limit("joined string too large");
    }
    return new_string(at, r, out);
  }
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    Value p[2];
    const bool bound = name == "zfill" ? bind({"width"}, p) : bind({"width", "fillchar"}, p);
    if (!bound) return false;
    if (name == "zfill") p[1] = Value::undefined(UndefReason::kNotGiven, "argument not given");
    if (!is_intlike(p[0])) return fail(at, std::string(name) + "() needs an integer width");
    const int64_t width = as_int(p[0]);
    if (width > static_cast<int64_t>(limits_.max_output_bytes))
      return fail_limit("padded string too large");
    std::string fill = " ";
    if (given(p[1])) {
      if (p[1].kind != Kind::kString || text::length(p[1].sv()) != 1) {
        return fail(at, "The fill character must be exactly one character long");
      }
      fill = std::string(p[1].sv());
    }
    const size_t len = text::length(s);
    const size_t w = width < 0 ? 0 : static_cast<size_t>(width);
    if (len >= w) {
      *out = obj;
      return true;
    }
    std::string r;
    if (name == "center") {
      r = python_center(s, w, fill);
    } else if (name == "ljust") {
      r = std::string(s);
      for (size_t i = len; i < w; ++i) r += fill;
    } else if (name == "rjust") {
      for (size_t i = len; i < w; ++i) r += fill;
      r += s;
    } else {
      size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
      r = std::string(s.substr(0, sign));
      r.append(w - len, '0');
      r.append(s.substr(sign));
    }
    return new_string(at, r, out);
  }
  if (name == "partition" || name == "rpartition") {
    Value p[1];
    if (!bind({"sep"}, p) || !need_str(p[0], "1")) return false;
    if (p[0].size == 0) return fail(at, "empty separator");
    const size_t hit = name == "partition" ? s.find(p[0].sv()) : s.rfind(p[0].sv());
    Value parts[3];
    if (hit == std::string_view::npos) {
      parts[0] = name == "partition" ? obj : Value::string({});
      parts[1] = Value::string({});
      parts[2] = name == "partition" ? Value::string({}) : obj;
    } else {
      parts[0] = Value::string(s.substr(0, hit));
      parts[1] = p[0];
      parts[2] = Value::string(s.substr(hit + p[0].size));
    }
    return new_list(at, parts, ListFlavor::kTuple, out);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Value p[1];
    if (!bind({"affix"}, p) || !need_str(p[0], "1")) return false;
    const std::string_view a = p[0].sv();
    if (name == "removeprefix") {
      *out = s.substr(0, a.size()) == a ? Value::string(s.substr(a.size())) : obj;
    } else {
      *out = (s.size() >= a.size() && s.substr(s.size() - a.size()) == a && !a.empty())
                 ? Value::string(s.substr(0, s.size() - a.size()))
                 : obj;
    }
    return true;
  }
  if (name == "format") return str_format(at, s, args, out);
  if (name.substr(0, 2) == "is") {
    if (!no_args()) return false;
    bool any = false;
    bool all = true;
    bool cased = false;
    bool title_ok = true;
    bool prev_cased = false;
    for (size_t i = 0; i < s.size();) {
      const char32_t c = text::decode(s, &i);
      any = true;
      if (name == "isalnum") all = all && (text::is_alpha(c) || text::is_numeric(c));
      if (name == "isalpha") all = all && text::is_alpha(c);
      if (name == "isdecimal" || name == "isdigit") all = all && text::is_decimal(c);
      if (name == "isnumeric") all = all && text::is_numeric(c);
      if (name == "isspace") all = all && text::is_space(c);
      if (text::is_cased(c)) {
        cased = true;
        if (name == "islower" && !text::is_lower(c)) all = false;
        if (name == "isupper" && !text::is_upper(c)) all = false;
        if (name == "istitle") {
          if (prev_cased ? !text::is_lower(c) : text::is_lower(c)) title_ok = false;
        }
        prev_cased = true;
      } else {
        prev_cased = false;
      }
    }
    bool r = any && all;
    if (name == "islower" || name == "isupper") r = cased && all;
    if (name == "istitle") r = cased && title_ok;
    *out = Value::boolean(r);
    return true;
  }
  return fail(at, "'str' object has no method '" + std::string(name) + "'");
}

// --- global functions
// ------------------------------------------------------------------------------

bool Interpreter::call_function(const Expr& at, FunctionId id, const CallArgs& args, Value* out) {
  switch (id) {
    case FunctionId::kRange: {
      if (args.nkw > 0) return fail(at, "range() takes no keyword arguments");
      if (args.npos < 1 || args.npos > 3) {
        return fail(at, "range expected at most 3 arguments, got " + std::to_string(args.npos));
      }
      for (size_t i = 0; i < args.npos; ++i) {
        if (!is_intlike(args.pos[i])) {
          if (args.pos[i].kind == Kind::kUndefined) return fail_undefined(at, args.pos[i]);
          return fail(at, "'" + std::string(type_name(args.pos[i])) +
                              "' object cannot be interpreted as an integer");
        }
      }
      const int64_t start = args.npos == 1 ? 0 : as_int(args.pos[0]);
      const int64_t stop = args.npos == 1 ? as_int(args.pos[0]) : as_int(args.pos[1]);
      const int64_t step = args.npos == 3 ? as_int(args.pos[2]) : 1;
      if (step == 0) return fail(at, "range() arg 3 must not be zero");
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
        return fail(at, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      }
      const auto count = static_cast<size_t>(count64);
      if (!charge(at, count)) return false;
      Value* items = nullptr;
      if (!new_values(at, count, &items)) return false;
      for (size_t i = 0; i < count; ++i)
        items[i] = Value::integer(start + static_cast<int64_t>(i) * step);
      *out = Value::list(items, count);
      out->owner = 1;
      return true;
    }
    case FunctionId::kNamespace:
    case FunctionId::kDict: {
      std::vector<DictEntry> entries;
      auto put = [&](const Value& k, const Value& v) {
        for (DictEntry& e : entries) {
          if (equals(e.key, k)) {
            e.value = v;
            return;
          }
        }
        entries.push_back({k, v});
      };
      if (args.npos > 1) return fail(at, "expected at most 1 positional argument");
      if (args.npos == 1) {
        const Value& init = args.pos[0];
        if (init.kind == Kind::kDict) {
          for (size_t i = 0; i < init.size; ++i) put(init.entries[i].key, init.entries[i].value);
        } else {
          const Value* items = nullptr;
          size_t n = 0;
          if (!iterate(at, init, &items, &n)) return false;
          for (size_t i = 0; i < n; ++i) {
            if (!items[i].is_sequence() || items[i].size != 2) {
              return fail(at, "dictionary update sequence element #" + std::to_string(i) +
                                  " has the wrong length or type");
            }
            put(items[i].items[0], items[i].items[1]);
          }
        }
      }
      for (size_t k = 0; k < args.nkw; ++k) put(Value::string(args.kw[k].name), args.kw[k].value);
      if (id == FunctionId::kDict) return new_dict(at, entries, out);
      auto* ns = arena_.allocate_array<NamespaceData>(1);
      if (ns == nullptr) return fail_limit("memory limit exceeded");
      new (ns) NamespaceData();
      for (const DictEntry& e : entries) {
        if (e.key.kind != Kind::kString)
          return fail(at, "namespace attribute names must be strings");
      }
      if (!entries.empty()) {
        ns->entries = arena_.allocate_array<DictEntry>(entries.size());
        if (ns->entries == nullptr) return fail_limit("memory limit exceeded");
        std::memcpy(static_cast<void*>(ns->entries), entries.data(),
                    entries.size() * sizeof(DictEntry));
        ns->size = ns->capacity = entries.size();
      }
      out->kind = Kind::kNamespace;
      out->ns = ns;
      out->size = 0;
      return true;
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
    case FunctionId::kStrftimeNow: {
      // transformers: datetime.now().strftime(format) - local time.
      if (args.npos + args.nkw != 1) return fail(at, "strftime_now() takes exactly one argument");
      const Value& format = args.npos == 1 ? args.pos[0] : args.kw[0].value;
      if (format.kind != Kind::kString) return fail(at, "strftime() argument 1 must be str");
      if (format.size > 4096) return fail(at, "strftime format too long");
      const std::time_t t = std::chrono::system_clock::to_time_t(now_);
      std::tm tm{};
      localtime_r(&t, &tm);
      // A trailing marker tells an empty result from a buffer that is too small.
      const std::string fmt = std::string(format.sv()) + "\x01";
      std::string buffer(256 + fmt.size() * 8, '\0');
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"  // the template supplies the format, by design
      const size_t n = std::strftime(buffer.data(), buffer.size(), fmt.c_str(), &tm);
#pragma GCC diagnostic pop
      if (n == 0) return fail(at, "strftime result too long");
      buffer.resize(n - 1);
      return new_string(at, buffer, out);
    }
  }
  return fail(at, "unknown function");
}

}  // namespace infera::jinja
