// Python's str, dict and list methods that jinja2's immutable sandbox allows, and the loop
// variable's cycle() and changed(). call_method dispatches on the receiver's type; str methods
// then on the name, to one function per method or family of methods.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "infera/jinja/builtin_args.h"
#include "infera/jinja/interpreter.h"
#include "infera/jinja/text.h"

namespace infera::jinja {
namespace {

// One method call: `obj.name(args)`, evaluated at `at`.
struct MethodCall {
  Interpreter& in;
  const Expr& at;
  std::string_view name;
  const Value& obj;
  const CallArgs& args;

  bool bind(std::initializer_list<std::string_view> names, Value* slots) const {
    return bind_params(&in, at, name, args, names, slots);
  }
  bool no_args() const { return bind({}, nullptr); }
  bool fail(std::string_view message) const { return in.fail(at, message); }
  // Python's TypeError for a str parameter given something else; `what` is its position.
  bool need_str(const Value& v, std::string_view what) const {
    if (v.kind == Kind::kString) return true;
    return fail(std::string(name) + "() argument " + std::string(what) + " must be str, not " +
                std::string(type_name(v)));
  }
  bool new_string(std::string_view s, Value* out) const { return in.new_string(at, s, out); }
  bool new_list(std::span<const Value> items, ListFlavor flavor, Value* out) const {
    return in.new_list(at, items, flavor, out);
  }
};

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

bool new_string_list(const MethodCall& c, const std::vector<std::string_view>& parts, Value* out) {
  std::vector<Value> values(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) values[i] = Value::string(parts[i]);
  return c.new_list(values, ListFlavor::kList, out);
}

// --- loop, dict and list ----------------------------------------------------------------------

bool loop_method(const MethodCall& c, Value* out) {
  LoopData& loop = *c.obj.loop;
  const CallArgs& args = c.args;
  if (c.name == "cycle") {
    if (args.npos == 0) return c.fail("no items for cycling given");
    *out = args.pos[loop.index0 % args.npos];
    return true;
  }
  Value current;  // changed(*values): true when the values differ from the previous call
  if (!c.new_list(args.positional(), ListFlavor::kTuple, &current)) return false;
  *out = Value::boolean(!loop.has_changed_value || !equals(loop.changed_value, current));
  loop.has_changed_value = true;
  loop.changed_value = current;
  return true;
}

bool dict_method(const MethodCall& c, Value* out) {
  const Value& obj = c.obj;
  const std::string_view name = c.name;
  if (name == "get") {
    Value p[2];
    if (!c.bind({"key", "default"}, p)) return false;
    if (c.args.npos < 1) return c.fail("get expected at least 1 argument, got 0");
    for (size_t i = 0; i < obj.size; ++i) {
      if (equals(obj.entries[i].key, p[0])) {
        *out = obj.entries[i].value;
        return true;
      }
    }
    *out = given(p[1]) ? p[1] : Value::none();
    return true;
  }
  if (!c.no_args()) return false;
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
      if (!c.new_list(kv, ListFlavor::kTuple, &items[i])) return false;
    }
  }
  const ListFlavor flavor = name == "keys"     ? ListFlavor::kDictKeys
                            : name == "values" ? ListFlavor::kDictValues
                                               : ListFlavor::kDictItems;
  return c.new_list(items, flavor, out);
}

// count(value) and index(value, start, stop).
bool list_method(const MethodCall& c, Value* out) {
  const Value& obj = c.obj;
  Value p[3];
  if (!c.bind({"value", "start", "stop"}, p)) return false;
  if (c.args.npos < 1)
    return c.fail(std::string(c.name) + "() takes at least 1 argument (0 given)");
  if (!c.in.charge(c.at, obj.size)) return false;
  if (c.name == "count") {
    if (c.args.npos > 1) return c.fail("count() takes exactly one argument");
    int64_t matches = 0;
    for (size_t i = 0; i < obj.size; ++i) matches += equals(obj.items[i], p[0]) ? 1 : 0;
    *out = Value::integer(matches);
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
  Interpreter::to_repr(p[0], &r);
  return c.fail(r + " is not in " + std::string(type_name(obj)));
}

// --- str --------------------------------------------------------------------------------------

// strip, lstrip and rstrip.
bool str_strip(const MethodCall& c, Value* out) {
  Value p[1];
  if (!c.bind({"chars"}, p)) return false;
  if (given(p[0]) && p[0].kind != Kind::kNone && !c.need_str(p[0], "1")) return false;
  *out = Value::string(strip_chars(c.obj.sv(), p[0], c.name != "rstrip", c.name != "lstrip"));
  return true;
}

std::string swapcase(std::string_view s) {
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
  return r;
}

// upper, lower, casefold, title, capitalize and swapcase.
bool str_case(const MethodCall& c, Value* out) {
  if (!c.no_args()) return false;
  const std::string_view s = c.obj.sv();
  if (c.name == "upper") return c.new_string(text::upper(s), out);
  if (c.name == "title") return c.new_string(text::title(s), out);
  if (c.name == "capitalize") return c.new_string(text::capitalize(s), out);
  if (c.name == "swapcase") return c.new_string(swapcase(s), out);
  return c.new_string(text::lower(s), out);  // lower, casefold
}

// startswith and endswith: a str or a tuple of str, within s[start:end].
bool str_affix_test(const MethodCall& c, Value* out) {
  const std::string_view s = c.obj.sv();
  Value p[3];
  if (!c.bind({"prefix", "start", "end"}, p)) return false;
  const size_t b = clamp_index(s, p[1], false);
  const size_t e = std::max(b, clamp_index(s, p[2], true));
  const std::string_view window = s.substr(b, e - b);
  auto check = [&](const Value& v, bool* hit) {
    if (v.kind != Kind::kString) {
      return c.fail(std::string(c.name) + " first arg must be str or a tuple of str, not " +
                    std::string(type_name(v)));
    }
    *hit = c.name == "startswith"
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

// split() / rsplit() without a separator: runs of whitespace; leading and trailing whitespace
// ignored.
std::vector<std::string_view> split_whitespace(std::string_view s, int64_t maxsplit, bool right) {
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
  const size_t keep = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(count), maxsplit));
  auto word = [&](size_t i) { return s.substr(words[i].first, words[i].second - words[i].first); };
  std::vector<std::string_view> parts;
  if (count == 0) return parts;
  if (!right) {
    // After maxsplit splits the rest is kept as is, trailing whitespace included.
    for (size_t i = 0; i < keep; ++i) parts.push_back(word(i));
    if (keep < count) parts.push_back(s.substr(words[keep].first));
    return parts;
  }
  std::vector<std::string_view> tail;
  for (size_t i = 0; i < keep; ++i) tail.push_back(word(count - 1 - i));
  if (keep < count) parts.push_back(s.substr(0, words[count - keep - 1].second));
  parts.insert(parts.end(), tail.rbegin(), tail.rend());
  return parts;
}

// split(sep) / rsplit(sep), sep not empty.
std::vector<std::string_view> split_separator(std::string_view s, std::string_view sep,
                                              int64_t maxsplit, bool right) {
  std::vector<std::string_view> parts;
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
    return parts;
  }
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
  return parts;
}

// split and rsplit.
bool str_split(const MethodCall& c, Value* out) {
  const std::string_view s = c.obj.sv();
  Value p[2];
  if (!c.bind({"sep", "maxsplit"}, p)) return false;
  int64_t maxsplit = is_intlike(p[1]) ? as_int(p[1]) : -1;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  const bool right = c.name == "rsplit";
  if (!given(p[0]) || p[0].kind == Kind::kNone) {
    return new_string_list(c, split_whitespace(s, maxsplit, right), out);
  }
  if (!c.need_str(p[0], "1")) return false;
  const std::string_view sep = p[0].sv();
  if (sep.empty()) return c.fail("empty separator");
  return new_string_list(c, split_separator(s, sep, maxsplit, right), out);
}

bool str_splitlines(const MethodCall& c, Value* out) {
  Value p[1];
  if (!c.bind({"keepends"}, p)) return false;
  return new_string_list(c, text::split_lines(c.obj.sv(), truthy(p[0])), out);
}

bool str_replace(const MethodCall& c, Value* out) {
  const std::string_view s = c.obj.sv();
  const size_t max_bytes = c.in.limits().max_output_bytes;
  Value p[3];
  if (!c.bind({"old", "new", "count"}, p)) return false;
  if (!c.need_str(p[0], "1") || !c.need_str(p[1], "2")) return false;
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
      if (r.size() > max_bytes) return c.in.fail_limit("replaced string too large");
    }
    if (done < count) r.append(to);
    return c.new_string(r, out);
  }
  size_t start = 0;
  int64_t done = 0;
  for (;;) {
    const size_t hit = done < count ? s.find(from, start) : std::string_view::npos;
    if (hit == std::string_view::npos) break;
    r.append(s.substr(start, hit - start));
    r.append(to);
    if (r.size() > max_bytes) return c.in.fail_limit("replaced string too large");
    start = hit + from.size();
    ++done;
  }
  if (done == 0) {
    *out = c.obj;
    return true;
  }
  r.append(s.substr(start));
  return c.new_string(r, out);
}

// find, rfind, index, rindex and count, within s[start:end].
bool str_find(const MethodCall& c, Value* out) {
  const std::string_view s = c.obj.sv();
  const std::string_view name = c.name;
  Value p[3];
  if (!c.bind({"sub", "start", "end"}, p)) return false;
  if (!c.need_str(p[0], "1")) return false;
  const size_t b = clamp_index(s, p[1], false);
  const size_t e = clamp_index(s, p[2], true);
  const std::string_view sub = p[0].sv();
  if (e < b || e - b < sub.size()) {
    if (name == "count") {
      *out = Value::integer(0);
      return true;
    }
    if (name == "index" || name == "rindex") return c.fail("substring not found");
    *out = Value::integer(-1);
    return true;
  }
  const std::string_view window = s.substr(b, e - b);
  if (name == "count") {
    int64_t n = 0;
    if (sub.empty()) {
      n = static_cast<int64_t>(text::length(window)) + 1;
    } else {
      for (size_t pos = window.find(sub); pos != std::string_view::npos;
           pos = window.find(sub, pos + sub.size()))
        ++n;
    }
    *out = Value::integer(n);
    return true;
  }
  const size_t hit = (name == "find" || name == "index") ? window.find(sub) : window.rfind(sub);
  if (hit == std::string_view::npos) {
    if (name == "index" || name == "rindex") return c.fail("substring not found");
    *out = Value::integer(-1);
    return true;
  }
  *out = Value::integer(char_index(s, b + hit));
  return true;
}

bool str_join(const MethodCall& c, Value* out) {
  const std::string_view s = c.obj.sv();
  Value p[1];
  if (!c.bind({"iterable"}, p)) return false;
  const Value* items = nullptr;
  size_t n = 0;
  if (!c.in.iterate(c.at, p[0], &items, &n)) return false;
  std::string r;
  for (size_t i = 0; i < n; ++i) {
    if (items[i].kind != Kind::kString) {
      return c.fail("sequence item " + std::to_string(i) + ": expected str instance, " +
                    std::string(type_name(items[i])) + " found");
    }
    if (i > 0) r.append(s);
    r.append(items[i].sv());
    if (r.size() > c.in.limits().max_output_bytes)
      return c.in.fail_limit("joined string too large");
  }
  return c.new_string(r, out);
}

// center, ljust, rjust and zfill.
bool str_pad(const MethodCall& c, Value* out) {
  const std::string_view s = c.obj.sv();
  const std::string_view name = c.name;
  Value p[2];
  const bool bound = name == "zfill" ? c.bind({"width"}, p) : c.bind({"width", "fillchar"}, p);
  if (!bound) return false;
  if (name == "zfill") p[1] = Value::undefined(UndefReason::kNotGiven, "argument not given");
  if (!is_intlike(p[0])) return c.fail(std::string(name) + "() needs an integer width");
  const int64_t width = as_int(p[0]);
  if (width > static_cast<int64_t>(c.in.limits().max_output_bytes))
    return c.in.fail_limit("padded string too large");
  std::string fill = " ";
  if (given(p[1])) {
    if (p[1].kind != Kind::kString || text::length(p[1].sv()) != 1) {
      return c.fail("The fill character must be exactly one character long");
    }
    fill = std::string(p[1].sv());
  }
  const size_t len = text::length(s);
  const size_t w = width < 0 ? 0 : static_cast<size_t>(width);
  if (len >= w) {
    *out = c.obj;
    return true;
  }
  std::string r;
  if (name == "center") {
    r = text::center(s, w, fill);
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
  return c.new_string(r, out);
}

// partition and rpartition.
bool str_partition(const MethodCall& c, Value* out) {
  const std::string_view s = c.obj.sv();
  const bool left = c.name == "partition";
  Value p[1];
  if (!c.bind({"sep"}, p) || !c.need_str(p[0], "1")) return false;
  if (p[0].size == 0) return c.fail("empty separator");
  const size_t hit = left ? s.find(p[0].sv()) : s.rfind(p[0].sv());
  Value parts[3];
  if (hit == std::string_view::npos) {
    parts[0] = left ? c.obj : Value::string({});
    parts[1] = Value::string({});
    parts[2] = left ? Value::string({}) : c.obj;
  } else {
    parts[0] = Value::string(s.substr(0, hit));
    parts[1] = p[0];
    parts[2] = Value::string(s.substr(hit + p[0].size));
  }
  return c.new_list(parts, ListFlavor::kTuple, out);
}

// removeprefix and removesuffix.
bool str_remove_affix(const MethodCall& c, Value* out) {
  const std::string_view s = c.obj.sv();
  Value p[1];
  if (!c.bind({"affix"}, p) || !c.need_str(p[0], "1")) return false;
  const std::string_view a = p[0].sv();
  if (c.name == "removeprefix") {
    *out = s.substr(0, a.size()) == a ? Value::string(s.substr(a.size())) : c.obj;
  } else {
    *out = (s.size() >= a.size() && s.substr(s.size() - a.size()) == a && !a.empty())
               ? Value::string(s.substr(0, s.size() - a.size()))
               : c.obj;
  }
  return true;
}

// isalnum, isalpha, isdecimal, isdigit, isnumeric, isspace, islower, isupper and istitle.
bool str_predicate(const MethodCall& c, Value* out) {
  const std::string_view s = c.obj.sv();
  const std::string_view name = c.name;
  if (!c.no_args()) return false;
  bool any = false;
  bool all = true;
  bool cased = false;
  bool title_ok = true;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t ch = text::decode(s, &i);
    any = true;
    if (name == "isalnum") all = all && (text::is_alpha(ch) || text::is_numeric(ch));
    if (name == "isalpha") all = all && text::is_alpha(ch);
    if (name == "isdecimal" || name == "isdigit") all = all && text::is_decimal(ch);
    if (name == "isnumeric") all = all && text::is_numeric(ch);
    if (name == "isspace") all = all && text::is_space(ch);
    if (text::is_cased(ch)) {
      cased = true;
      if (name == "islower" && !text::is_lower(ch)) all = false;
      if (name == "isupper" && !text::is_upper(ch)) all = false;
      if (name == "istitle") {
        if (prev_cased ? !text::is_lower(ch) : text::is_lower(ch)) title_ok = false;
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

bool str_method(const MethodCall& c, Value* out) {
  const std::string_view name = c.name;
  if (name == "strip" || name == "lstrip" || name == "rstrip") return str_strip(c, out);
  if (name == "upper" || name == "lower" || name == "casefold" || name == "title" ||
      name == "capitalize" || name == "swapcase") {
    return str_case(c, out);
  }
  if (name == "startswith" || name == "endswith") return str_affix_test(c, out);
  if (name == "split" || name == "rsplit") return str_split(c, out);
  if (name == "splitlines") return str_splitlines(c, out);
  if (name == "replace") return str_replace(c, out);
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
    return str_find(c, out);
  if (name == "join") return str_join(c, out);
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill")
    return str_pad(c, out);
  if (name == "partition" || name == "rpartition") return str_partition(c, out);
  if (name == "removeprefix" || name == "removesuffix") return str_remove_affix(c, out);
  if (name == "format") return c.in.str_format(c.at, c.obj.sv(), c.args, out);
  if (name.substr(0, 2) == "is") return str_predicate(c, out);
  return c.fail("'str' object has no method '" + std::string(name) + "'");
}

}  // namespace

bool Interpreter::call_method(const Expr& at, const Value& obj, std::string_view name,
                              const CallArgs& args, Value* out) {
  const MethodCall call{*this, at, name, obj, args};
  switch (obj.kind) {
    case Kind::kLoop:
      return loop_method(call, out);
    case Kind::kDict:
      return dict_method(call, out);
    case Kind::kList:
      return list_method(call, out);
    case Kind::kString:
      // As for string filters: the string's length counts as work (64 bytes per step).
      if (!charge(at, obj.size / 64)) return false;
      return str_method(call, out);
    default:
      return fail(at, "'" + std::string(type_name(obj)) + "' object has no method '" +
                          std::string(name) + "'");
  }
}

}  // namespace infera::jinja
