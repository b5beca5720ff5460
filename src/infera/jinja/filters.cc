// jinja2's filters (jinja2/filters.py) and transformers' tojson. One function per filter, or per
// family of filters that share a body (first/last, min/max, select/reject/selectattr/
// rejectattr), named after jinja2's do_* functions; apply_filter dispatches through kFilterTable,
// which is indexed by FilterId. The filters jinja2 runs lazily return a generator that calls
// apply_filter again, eagerly, when it is iterated.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "infera/jinja/builtin_args.h"
#include "infera/jinja/builtins.h"
#include "infera/jinja/interpreter.h"
#include "infera/jinja/text.h"

namespace infera::jinja {
namespace {

// One application of a filter: `input|name(args)`, evaluated at `at`.
struct FilterCall {
  Interpreter& in;
  const Expr& at;
  FilterId id;            // the function of a family of filters branches on it
  std::string_view name;  // as written in the template: errors name it
  const Value& input;
  const CallArgs& args;

  // Binds args to the filter's parameters (jinja2's signature after the input).
  bool bind(std::initializer_list<std::string_view> names, Value* slots) const {
    return bind_params(&in, at, name, args, names, slots);
  }
  bool no_args() const { return bind({}, nullptr); }
  bool input_str(Value* s) const { return in.str_value(at, input, s); }  // str(input)
  bool fail(std::string_view message) const { return in.fail(at, message); }
  bool fail_undefined() const { return in.fail_undefined(at, input); }
  bool charge(uint64_t units) const { return in.charge(at, units); }
  bool iterate(const Value& v, const Value** items, size_t* n) const {
    return in.iterate(at, v, items, n);
  }
  bool new_string(std::string_view s, Value* out) const { return in.new_string(at, s, out); }
  bool new_list(std::span<const Value> items, ListFlavor flavor, Value* out) const {
    return in.new_list(at, items, flavor, out);
  }
};

using FilterFn = bool (*)(const FilterCall& call, Value* out);

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

// jinja2 make_attrgetter: "a.b.0" looked up part by part with environment.getitem; an
// Undefined part is replaced by `fallback` (when given) before the next part is looked up.
bool attr_get(const FilterCall& c, const Value& item, const Value& attribute, Value* out,
              const Value* fallback = nullptr) {
  if (attribute.kind != Kind::kString) return c.in.get_item(c.at, item, attribute, out);
  std::string_view path = attribute.sv();
  Value cur = item;
  for (;;) {
    const size_t dot = path.find('.');
    const std::string_view part = path.substr(0, dot);
    Value key = Value::string(part);
    if (!part.empty() && part.size() < 18 &&
        std::all_of(part.begin(), part.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      key = Value::integer(std::stoll(std::string(part)));
    }
    if (!c.in.get_item(c.at, cur, key, &cur)) return false;
    if (fallback != nullptr && cur.kind == Kind::kUndefined) cur = *fallback;
    if (dot == std::string_view::npos) break;
    path = path.substr(dot + 1);
  }
  *out = cur;
  return true;
}

// Sort key: lower-cased strings unless case_sensitive (jinja2 ignore_case).
bool fold(const FilterCall& c, const Value& v, bool case_sensitive, Value* key) {
  if (v.kind == Kind::kString && !case_sensitive) return c.new_string(text::lower(v.sv()), key);
  *key = v;
  return true;
}

// Orders `order` (indices into `keys`) stably by key; false when two keys do not order.
bool stable_sort_by(const FilterCall& c, const std::vector<Value>& keys, std::vector<size_t>& order,
                    bool reverse) {
  bool failed = false;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (failed) return false;
    bool r = false;
    if (!(reverse ? c.in.less(c.at, keys[b], keys[a], &r)
                  : c.in.less(c.at, keys[a], keys[b], &r))) {
      failed = true;
      return false;
    }
    return r;
  });
  return !failed && c.charge(keys.size() * 4);
}

// --- the filters ------------------------------------------------------------------------------

bool no_such_filter(const FilterCall& c, Value* /*out*/) {
  return c.fail("No filter named '" + std::string(c.name) + "'.");
}

bool do_abs(const FilterCall& c, Value* out) {
  const Value& input = c.input;
  if (!c.no_args()) return false;
  if (input.kind == Kind::kUndefined) return c.fail_undefined();
  if (input.kind == Kind::kFloat) {
    *out = Value::floating(std::fabs(input.f));
  } else if (is_intlike(input)) {
    const int64_t x = as_int(input);
    if (x == INT64_MIN) return c.fail("integer overflow (infera supports 64-bit integers)");
    *out = Value::integer(x < 0 ? -x : x);
  } else {
    return c.fail("bad operand type for abs(): '" + std::string(type_name(input)) + "'");
  }
  return true;
}

bool do_attr(const FilterCall& c, Value* out) {
  const Value& input = c.input;
  Value p[1];
  if (!c.bind({"name"}, p)) return false;
  if (input.kind == Kind::kUndefined) return c.fail_undefined();
  if (p[0].kind == Kind::kString && Interpreter::has_method(input, p[0].sv()))
    return c.in.get_attr(c.at, input, p[0].sv(), out);
  if (input.kind == Kind::kNamespace || input.kind == Kind::kLoop) {
    if (p[0].kind == Kind::kString) return c.in.get_attr(c.at, input, p[0].sv(), out);
  }
  *out = Value::undefined(UndefReason::kAttribute, p[0].kind == Kind::kString ? p[0].sv() : "?",
                          input.kind);
  return true;
}

bool do_batch(const FilterCall& c, Value* out) {
  Value p[2];
  if (!c.bind({"linecount", "fill_with"}, p)) return false;
  if (!is_intlike(p[0]) || as_int(p[0]) <= 0)
    return c.fail("batch() needs a positive integer size");
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(c.input, &items, &n)) return false;
  const auto size = static_cast<size_t>(as_int(p[0]));
  std::vector<Value> batches;
  std::vector<Value> tmp;
  for (size_t i = 0; i < n; i += size) {
    tmp.assign(items + i, items + std::min(n, i + size));
    if (tmp.size() < size && given(p[1]) && p[1].kind != Kind::kNone) tmp.resize(size, p[1]);
    Value b;
    if (!c.new_list(tmp, ListFlavor::kList, &b)) return false;
    batches.push_back(b);
  }
  return c.new_list(batches, ListFlavor::kList, out);
}

bool do_capitalize(const FilterCall& c, Value* out) {
  Value s;
  if (!c.no_args() || !c.input_str(&s)) return false;
  return c.new_string(text::capitalize(s.sv()), out);
}

bool do_center(const FilterCall& c, Value* out) {
  Value p[1];
  Value s;
  if (!c.bind({"width"}, p) || !c.input_str(&s)) return false;
  const int64_t width = given(p[0]) ? (is_intlike(p[0]) ? as_int(p[0]) : -1) : 80;
  if (width < 0 || static_cast<uint64_t>(width) > c.in.limits().max_output_bytes) {
    return c.fail("center() width must be a non-negative integer within the output limit");
  }
  return c.new_string(text::center(s.sv(), static_cast<size_t>(width), " "), out);
}

bool do_default(const FilterCall& c, Value* out) {
  const Value& input = c.input;
  Value p[2];
  if (!c.bind({"default_value", "boolean"}, p)) return false;
  const bool replace = input.kind == Kind::kUndefined || (truthy(p[1]) && !truthy(input));
  *out = replace ? (given(p[0]) ? p[0] : Value::string({})) : input;
  return true;
}

bool do_dictsort(const FilterCall& c, Value* out) {
  const Value& input = c.input;
  Value p[3];
  if (!c.bind({"case_sensitive", "by", "reverse"}, p)) return false;
  if (input.kind != Kind::kDict) {
    if (input.kind == Kind::kUndefined) return c.fail_undefined();
    return c.fail("dictsort requires a mapping, not " + std::string(type_name(input)));
  }
  int pos = 0;
  if (given(p[1])) {
    if (p[1].kind == Kind::kString && p[1].sv() == "value") {
      pos = 1;
    } else if (!(p[1].kind == Kind::kString && p[1].sv() == "key")) {
      return c.fail("You can only sort by either \"key\" or \"value\"");
    }
  }
  std::vector<Value> keys(input.size);
  std::vector<size_t> order(input.size);
  for (size_t i = 0; i < input.size; ++i) {
    order[i] = i;
    const Value& k = pos == 0 ? input.entries[i].key : input.entries[i].value;
    if (!fold(c, k, truthy(p[0]), &keys[i])) return false;
  }
  if (!stable_sort_by(c, keys, order, truthy(p[2]))) return false;
  std::vector<Value> pairs;
  for (size_t i : order) {
    Value pair;
    const Value kv[2] = {input.entries[i].key, input.entries[i].value};
    if (!c.new_list(kv, ListFlavor::kTuple, &pair)) return false;
    pairs.push_back(pair);
  }
  return c.new_list(pairs, ListFlavor::kList, out);
}

bool do_escape(const FilterCall& c, Value* out) {
  Value s;
  if (!c.no_args() || !c.input_str(&s)) return false;
  return c.new_string(html_escape(s.sv()), out);
}

bool do_first_or_last(const FilterCall& c, Value* out) {
  if (!c.no_args()) return false;
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(c.input, &items, &n)) return false;
  const bool first = c.id == FilterId::kFirst;
  if (n == 0) {
    *out = Value::undefined(UndefReason::kMessage, first ? "No first item, sequence was empty."
                                                         : "No last item, sequence was empty.");
    return true;
  }
  *out = first ? items[0] : items[n - 1];
  return true;
}

bool do_float(const FilterCall& c, Value* out) {
  const Value& input = c.input;
  Value p[1];
  if (!c.bind({"default"}, p)) return false;
  const Value fallback = given(p[0]) ? p[0] : Value::floating(0.0);
  if (input.kind == Kind::kUndefined) return c.fail_undefined();
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

bool do_format(const FilterCall& c, Value* out) {
  const CallArgs& args = c.args;
  Value s;
  if (!c.input_str(&s)) return false;
  if (args.npos > 0 && args.nkw > 0) {
    return c.fail("can't handle positional and keyword arguments at the same time");
  }
  Value values;
  if (args.nkw > 0) {
    std::vector<DictEntry> entries;
    for (size_t k = 0; k < args.nkw; ++k)
      entries.push_back({Value::string(args.kw[k].name), args.kw[k].value});
    if (!c.in.new_dict(c.at, entries, &values)) return false;
  } else if (!c.new_list(args.positional(), ListFlavor::kTuple, &values)) {
    return false;
  }
  return c.in.percent_format(c.at, s.sv(), values, out);
}

bool do_groupby(const FilterCall& c, Value* out) {
  Value p[3];
  if (!c.bind({"attribute", "default", "case_sensitive"}, p)) return false;
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(c.input, &items, &n)) return false;
  const bool use_default = given(p[1]) && p[1].kind != Kind::kNone;
  std::vector<Value> keys(n);
  std::vector<Value> real_keys(n);
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) {
    order[i] = i;
    if (!attr_get(c, items[i], p[0], &real_keys[i], use_default ? &p[1] : nullptr)) return false;
    if (!fold(c, real_keys[i], truthy(p[2]), &keys[i])) return false;
  }
  if (!stable_sort_by(c, keys, order, false)) return false;
  std::vector<Value> groups;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && equals(keys[order[j]], keys[order[i]])) ++j;
    std::vector<Value> members;
    for (size_t k = i; k < j; ++k) members.push_back(items[order[k]]);
    Value pair[2];
    pair[0] = real_keys[order[i]];  // the first member's own key, not the folded one
    if (!c.new_list(members, ListFlavor::kList, &pair[1])) return false;
    Value group;
    if (!c.new_list(pair, ListFlavor::kTuple, &group)) return false;
    groups.push_back(group);
    i = j;
  }
  return c.new_list(groups, ListFlavor::kList, out);
}

bool do_indent(const FilterCall& c, Value* out) {
  const Value& input = c.input;
  Value p[3];
  if (!c.bind({"width", "first", "blank"}, p)) return false;
  if (input.kind == Kind::kUndefined) return c.fail_undefined();
  if (input.kind != Kind::kString) {  // jinja2 does `s += "\n"` first
    return c.fail("indent requires a string, not " + std::string(type_name(input)));
  }
  const Value s = input;
  std::string indention;
  if (p[0].kind == Kind::kString) {
    indention = std::string(p[0].sv());
  } else {
    const int64_t w = given(p[0]) ? (is_intlike(p[0]) ? as_int(p[0]) : 0) : 4;
    if (w > 1000) return c.fail("indent width too large");
    indention.assign(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
  }
  std::string value(s.sv());
  value.push_back('\n');  // jinja2: "this quirk is necessary for splitlines method"
  const std::vector<std::string_view> lines = text::split_lines(value, false);
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
  if (!c.charge(rv.size() / 64)) return false;
  return c.new_string(rv, out);
}

bool do_int(const FilterCall& c, Value* out) {
  const Value& input = c.input;
  Value p[2];
  if (!c.bind({"default", "base"}, p)) return false;
  const Value fallback = given(p[0]) ? p[0] : Value::integer(0);
  const int base = given(p[1]) && is_intlike(p[1]) ? static_cast<int>(as_int(p[1])) : 10;
  if (input.kind == Kind::kUndefined) return c.fail_undefined();
  if (is_intlike(input)) {
    *out = Value::integer(as_int(input));
    return true;
  }
  if (input.kind == Kind::kFloat) {
    if (std::isinf(input.f)) return c.fail("cannot convert float infinity to integer");
    if (std::isnan(input.f)) {
      *out = fallback;
      return true;
    }
    if (std::fabs(input.f) >= 9.2e18)
      return c.fail("integer overflow (infera supports 64-bit integers)");
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

bool do_items(const FilterCall& c, Value* out) {
  const Value& input = c.input;
  if (!c.no_args()) return false;
  if (input.kind == Kind::kUndefined) {
    *out = Value::list(nullptr, 0);
    return true;
  }
  if (input.kind != Kind::kDict) return c.fail("Can only get item pairs from a mapping.");
  std::vector<Value> pairs(input.size);
  for (size_t i = 0; i < input.size; ++i) {
    const Value kv[2] = {input.entries[i].key, input.entries[i].value};
    if (!c.new_list(kv, ListFlavor::kTuple, &pairs[i])) return false;
  }
  return c.new_list(pairs, ListFlavor::kList, out);
}

bool do_join(const FilterCall& c, Value* out) {
  Value p[2];
  if (!c.bind({"d", "attribute"}, p)) return false;
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(c.input, &items, &n)) return false;
  Value sep;
  if (given(p[0])) {
    if (!c.in.str_value(c.at, p[0], &sep)) return false;
  } else {
    sep = Value::string({});
  }
  std::string result;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) result.append(sep.sv());
    Value item = items[i];
    if (given(p[1]) && p[1].kind != Kind::kNone && !attr_get(c, item, p[1], &item)) return false;
    Interpreter::to_str(item, &result);
    if (result.size() > c.in.limits().max_output_bytes)
      return c.in.fail_limit("joined string too large");
  }
  if (!c.charge(result.size() / 64)) return false;
  return c.new_string(result, out);
}

// count and length.
bool do_length(const FilterCall& c, Value* out) {
  int64_t n = 0;
  if (!c.no_args() || !c.in.length(c.at, c.input, &n)) return false;
  *out = Value::integer(n);
  return true;
}

bool do_list(const FilterCall& c, Value* out) {
  if (!c.no_args()) return false;
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(c.input, &items, &n)) return false;
  return c.new_list({items, n}, ListFlavor::kList, out);
}

bool do_lower_or_upper(const FilterCall& c, Value* out) {
  Value s;
  if (!c.no_args() || !c.input_str(&s)) return false;
  if (!c.charge(s.size / 64)) return false;
  return c.new_string(c.id == FilterId::kLower ? text::lower(s.sv()) : text::upper(s.sv()), out);
}

// map(attribute=..., default=...): the attribute of each item.
bool map_attribute(const FilterCall& c, const Value* items, size_t n, Value* mapped) {
  const CallArgs& args = c.args;
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
      return c.fail("Unexpected keyword argument '" + std::string(args.kw[k].name) + "'");
    }
  }
  if (!has_attribute) return c.fail("map requires a filter argument");
  const bool use_fallback = given(fallback) && fallback.kind != Kind::kNone;
  for (size_t i = 0; i < n; ++i) {
    if (!attr_get(c, items[i], attribute, &mapped[i], use_fallback ? &fallback : nullptr)) {
      return false;
    }
  }
  return true;
}

// map('filter', *args, **kwargs): the filter applied to each item.
bool map_filter(const FilterCall& c, const Value* items, size_t n, Value* mapped) {
  const CallArgs& args = c.args;
  if (args.npos == 0) return c.fail("map requires a filter argument");
  if (args.pos[0].kind != Kind::kString) return c.fail("map: the filter name must be a string");
  const std::string_view filter = args.pos[0].sv();
  const FilterId fid = find_filter(filter);
  CallArgs rest;
  rest_of(args, 1, &rest);
  for (size_t i = 0; i < n; ++i) {
    if (!c.in.apply_filter(c.at, fid, filter, items[i], rest, &mapped[i])) return false;
  }
  return true;
}

bool do_map(const FilterCall& c, Value* out) {
  if (!truthy(c.input)) {
    *out = Value::list(nullptr, 0);
    return true;
  }
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(c.input, &items, &n)) return false;
  std::vector<Value> mapped(n);
  const bool by_attribute = c.args.npos == 0 && c.args.nkw > 0;
  if (!(by_attribute ? map_attribute(c, items, n, mapped.data())
                     : map_filter(c, items, n, mapped.data()))) {
    return false;
  }
  return c.new_list(mapped, ListFlavor::kList, out);
}

bool do_min_or_max(const FilterCall& c, Value* out) {
  Value p[2];
  if (!c.bind({"case_sensitive", "attribute"}, p)) return false;
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(c.input, &items, &n)) return false;
  if (n == 0) {
    *out = Value::undefined(UndefReason::kMessage, "No aggregated item, sequence was empty.");
    return true;
  }
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < n; ++i) {
    Value key = items[i];
    if (given(p[1]) && p[1].kind != Kind::kNone && !attr_get(c, key, p[1], &key)) return false;
    if (!fold(c, key, truthy(p[0]), &key)) return false;
    if (i == 0) {
      best_key = key;
      continue;
    }
    bool better = false;
    if (!(c.id == FilterId::kMax ? c.in.less(c.at, best_key, key, &better)
                                 : c.in.less(c.at, key, best_key, &better))) {
      return false;
    }
    if (better) {
      best = i;
      best_key = key;
    }
  }
  *out = items[best];
  return c.charge(n);
}

// select, reject, selectattr and rejectattr.
bool do_select_or_reject(const FilterCall& c, Value* out) {
  const CallArgs& args = c.args;
  if (!truthy(c.input)) {
    *out = Value::list(nullptr, 0);
    return true;
  }
  const bool by_attr = c.id == FilterId::kSelectattr || c.id == FilterId::kRejectattr;
  const bool keep_if = c.id == FilterId::kSelect || c.id == FilterId::kSelectattr;
  const size_t off = by_attr ? 1 : 0;
  if (by_attr && args.npos == 0) return c.fail("Missing parameter for attribute name");
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(c.input, &items, &n)) return false;
  const bool has_test = args.npos > off;
  std::string_view test_name;
  TestId tid = TestId::kUnknown;
  if (has_test) {
    if (args.pos[off].kind != Kind::kString) return c.fail("the test name must be a string");
    test_name = args.pos[off].sv();
    tid = find_test(test_name);
  }
  CallArgs rest;
  rest_of(args, off + 1, &rest);
  std::vector<Value> kept;
  for (size_t i = 0; i < n; ++i) {
    Value subject = items[i];
    if (by_attr && !attr_get(c, subject, args.pos[0], &subject)) return false;
    bool pass = false;
    if (has_test) {
      if (!c.in.apply_test(c.at, tid, test_name, subject, rest, &pass)) return false;
    } else {
      pass = truthy(subject);
    }
    if (pass == keep_if) kept.push_back(items[i]);
  }
  return c.new_list(kept, ListFlavor::kList, out);
}

bool do_replace(const FilterCall& c, Value* out) {
  Value p[3];
  Value s;
  if (!c.bind({"old", "new", "count"}, p) || !c.input_str(&s)) return false;
  Value old_s;
  Value new_s;
  if (!c.in.str_value(c.at, p[0], &old_s) || !c.in.str_value(c.at, p[1], &new_s)) return false;
  Value count = given(p[2]) ? p[2] : Value::integer(-1);
  if (p[2].kind == Kind::kNone) count = Value::integer(-1);
  CallArgs margs;
  margs.pos[0] = old_s;
  margs.pos[1] = new_s;
  margs.pos[2] = count;
  margs.npos = 3;
  return c.in.call_method(c.at, s, "replace", margs, out);
}

bool do_reverse(const FilterCall& c, Value* out) {
  const Value& input = c.input;
  if (!c.no_args()) return false;
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
    return c.new_string(r, out);
  }
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(input, &items, &n)) return false;
  std::vector<Value> r(items, items + n);
  std::reverse(r.begin(), r.end());
  return c.new_list(r, ListFlavor::kList, out);
}

// round(x, precision) of a finite float.
double python_round(double x, int64_t precision) {
  if (precision >= 0) {
    // Correctly rounded, half to even on the exact binary value, as CPython's round().
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
    return std::strtod(buf, nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-precision));
  return std::nearbyint(x / scale) * scale;
}

bool do_round(const FilterCall& c, Value* out) {
  const Value& input = c.input;
  Value p[2];
  if (!c.bind({"precision", "method"}, p)) return false;
  if (input.kind == Kind::kUndefined) return c.fail_undefined();
  const int64_t precision = given(p[0]) ? (is_intlike(p[0]) ? as_int(p[0]) : 0) : 0;
  std::string_view method = "common";
  if (given(p[1])) {
    if (p[1].kind != Kind::kString ||
        (p[1].sv() != "common" && p[1].sv() != "ceil" && p[1].sv() != "floor")) {
      return c.fail("method must be common, ceil or floor");
    }
    method = p[1].sv();
  }
  if (!input.is_number()) {
    return c.fail("type " + std::string(type_name(input)) + " doesn't define __round__ method");
  }
  if (precision < -300 || precision > 300) return c.fail("round() precision out of range");
  if (method == "common") {
    if (is_intlike(input)) {  // Python's round(int, n) stays an int
      *out = Value::integer(as_int(input));
      return true;
    }
    *out = std::isfinite(input.f) ? Value::floating(python_round(input.f, precision)) : input;
    return true;
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = as_float(input) * scale;
  *out = Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
  return true;
}

// safe and string.
bool do_string(const FilterCall& c, Value* out) {
  if (!c.no_args()) return false;
  return c.in.str_value(c.at, c.input, out);
}

// jinja2 make_multi_attrgetter: "a,b" sorts by [item.a, item.b], compared as lists.
std::vector<Value> sort_attributes(const Value& attribute) {
  std::vector<Value> attributes;
  if (given(attribute) && attribute.kind == Kind::kString) {
    std::string_view rest = attribute.sv();
    for (;;) {
      const size_t comma = rest.find(',');
      attributes.push_back(Value::string(rest.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  } else if (given(attribute) && attribute.kind != Kind::kNone) {
    attributes.push_back(attribute);
  }
  return attributes;
}

bool do_sort(const FilterCall& c, Value* out) {
  Value p[3];
  if (!c.bind({"reverse", "case_sensitive", "attribute"}, p)) return false;
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(c.input, &items, &n)) return false;
  std::vector<Value> keys(n);
  std::vector<size_t> order(n);
  const std::vector<Value> attributes = sort_attributes(p[2]);
  for (size_t i = 0; i < n; ++i) {
    order[i] = i;
    if (attributes.empty()) {
      if (!fold(c, items[i], truthy(p[1]), &keys[i])) return false;
      continue;
    }
    std::vector<Value> parts(attributes.size());
    for (size_t a = 0; a < attributes.size(); ++a) {
      if (!attr_get(c, items[i], attributes[a], &parts[a]) ||
          !fold(c, parts[a], truthy(p[1]), &parts[a])) {
        return false;
      }
    }
    if (!c.new_list(parts, ListFlavor::kList, &keys[i])) return false;
  }
  if (!stable_sort_by(c, keys, order, truthy(p[0]))) return false;
  std::vector<Value> sorted;
  sorted.reserve(n);
  for (size_t i : order) sorted.push_back(items[i]);
  return c.new_list(sorted, ListFlavor::kList, out);
}

bool do_sum(const FilterCall& c, Value* out) {
  Value p[2];
  if (!c.bind({"attribute", "start"}, p)) return false;
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(c.input, &items, &n)) return false;
  Value total = given(p[1]) ? p[1] : Value::integer(0);
  for (size_t i = 0; i < n; ++i) {
    Value item = items[i];
    if (given(p[0]) && p[0].kind != Kind::kNone && !attr_get(c, item, p[0], &item)) return false;
    if (!c.in.binary(c.at, BinOp::kAdd, total, item, &total)) return false;
  }
  *out = total;
  return true;
}

bool do_title(const FilterCall& c, Value* out) {
  Value s;
  if (!c.no_args() || !c.input_str(&s)) return false;
  return c.new_string(jinja_title(s.sv()), out);
}

// transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
bool do_tojson(const FilterCall& c, Value* out) {
  Value p[4];
  if (!c.bind({"ensure_ascii", "indent", "separators", "sort_keys"}, p)) return false;
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
      if (w > 1000) return c.fail("tojson indent too large");
      style.indent.assign(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
    } else {
      return c.fail("can't multiply sequence by non-int of type '" + std::string(type_name(p[1])) +
                    "'");
    }
  }
  if (given(p[2]) && p[2].kind != Kind::kNone) {
    if (!p[2].is_sequence() || p[2].size != 2 || p[2].items[0].kind != Kind::kString ||
        p[2].items[1].kind != Kind::kString) {
      return c.fail("tojson separators must be a pair of strings");
    }
    style.item_sep = std::string(p[2].items[0].sv());
    style.key_sep = std::string(p[2].items[1].sv());
  }
  std::string json;
  if (!c.in.to_json(c.at, c.input, style, &json)) return false;
  return c.new_string(json, out);
}

bool do_trim(const FilterCall& c, Value* out) {
  Value p[1];
  Value s;
  if (!c.bind({"chars"}, p) || !c.input_str(&s)) return false;
  *out = Value::string(strip_chars(s.sv(), p[0], true, true));
  return true;
}

bool do_unique(const FilterCall& c, Value* out) {
  Value p[2];
  if (!c.bind({"case_sensitive", "attribute"}, p)) return false;
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.iterate(c.input, &items, &n)) return false;
  std::vector<Value> seen;
  std::vector<Value> kept;
  for (size_t i = 0; i < n; ++i) {
    Value key = items[i];
    if (given(p[1]) && p[1].kind != Kind::kNone && !attr_get(c, key, p[1], &key)) return false;
    if (!fold(c, key, truthy(p[0]), &key)) return false;
    if (!c.charge(seen.size())) return false;
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
  return c.new_list(kept, ListFlavor::kList, out);
}

bool do_wordcount(const FilterCall& c, Value* out) {
  Value s;
  if (!c.no_args() || !c.input_str(&s)) return false;
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

// --- the table --------------------------------------------------------------------------------

struct FilterEntry {
  FilterId id;  // == the entry's index, checked below
  FilterFn fn;
};

constexpr FilterEntry kFilterTable[] = {
    {FilterId::kUnknown, no_such_filter},
    {FilterId::kAbs, do_abs},
    {FilterId::kAttr, do_attr},
    {FilterId::kBatch, do_batch},
    {FilterId::kCapitalize, do_capitalize},
    {FilterId::kCenter, do_center},
    {FilterId::kCount, do_length},
    {FilterId::kDefault, do_default},
    {FilterId::kDictsort, do_dictsort},
    {FilterId::kEscape, do_escape},
    {FilterId::kFirst, do_first_or_last},
    {FilterId::kFloat, do_float},
    {FilterId::kFormat, do_format},
    {FilterId::kGroupby, do_groupby},
    {FilterId::kIndent, do_indent},
    {FilterId::kInt, do_int},
    {FilterId::kItems, do_items},
    {FilterId::kJoin, do_join},
    {FilterId::kLast, do_first_or_last},
    {FilterId::kLength, do_length},
    {FilterId::kList, do_list},
    {FilterId::kLower, do_lower_or_upper},
    {FilterId::kMap, do_map},
    {FilterId::kMax, do_min_or_max},
    {FilterId::kMin, do_min_or_max},
    {FilterId::kReject, do_select_or_reject},
    {FilterId::kRejectattr, do_select_or_reject},
    {FilterId::kReplace, do_replace},
    {FilterId::kReverse, do_reverse},
    {FilterId::kRound, do_round},
    {FilterId::kSafe, do_string},
    {FilterId::kSelect, do_select_or_reject},
    {FilterId::kSelectattr, do_select_or_reject},
    {FilterId::kSort, do_sort},
    {FilterId::kString, do_string},
    {FilterId::kSum, do_sum},
    {FilterId::kTitle, do_title},
    {FilterId::kTojson, do_tojson},
    {FilterId::kTrim, do_trim},
    {FilterId::kUnique, do_unique},
    {FilterId::kUpper, do_lower_or_upper},
    {FilterId::kWordcount, do_wordcount},
};

constexpr bool table_in_id_order() {
  for (size_t i = 0; i < std::size(kFilterTable); ++i) {
    if (static_cast<size_t>(kFilterTable[i].id) != i) return false;
  }
  return true;
}
static_assert(std::size(kFilterTable) == static_cast<size_t>(FilterId::kNumIds),
              "every FilterId needs an entry in kFilterTable");
static_assert(table_in_id_order(), "kFilterTable is indexed by FilterId");

// jinja2's lazy filters return generators; reversed() of a sequence, mapping or Undefined is an
// iterator too.
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
    case FilterId::kReverse:
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
  const auto index = static_cast<size_t>(id);
  const FilterFn fn = index < std::size(kFilterTable) ? kFilterTable[index].fn : no_such_filter;
  return fn(FilterCall{*this, at, id, name, input, args}, out);
}

}  // namespace infera::jinja
