// Python's text conversions for the interpreter: str(), repr(), float.__repr__, json.dumps
// (as transformers' tojson calls it), printf-style `%` formatting and str.format.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "infera/jinja/interpreter.h"
#include "infera/jinja/text.h"

namespace infera::jinja {
namespace {

void append_int(int64_t x, std::string* out) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), x);
  out->append(buf, r.ptr);
}

void append_hex(uint32_t x, int digits, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i) out->push_back(kHex[(x >> (4 * i)) & 0xF]);
}

// Shortest round-trip digits and decimal exponent of a finite, non-zero |x|:
// x = 0.d1d2d3... * 10^decpt.
void shortest_digits(double x, std::string* digits, int* decpt) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), std::fabs(x), std::chars_format::scientific);
  const std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
  const size_t e = s.find('e');
  digits->clear();
  for (size_t i = 0; i < e; ++i) {
    if (s[i] != '.') digits->push_back(s[i]);
  }
  int exp10 = 0;
  std::from_chars(s.data() + e + 1 + (s[e + 1] == '+' ? 1 : 0), s.data() + s.size(), exp10);
  *decpt = exp10 + 1;
}

}  // namespace

// CPython float_repr (repr style 'r'): shortest digits; positional notation when the decimal
// exponent is in [-4, 16), else scientific with at least two exponent digits.
void Interpreter::float_repr(double x, std::string* out) {
  if (std::isnan(x)) {
    out->append("nan");
    return;
  }
  if (std::isinf(x)) {
    out->append(x < 0 ? "-inf" : "inf");
    return;
  }
  if (std::signbit(x)) out->push_back('-');
  if (x == 0.0) {
    out->append("0.0");
    return;
  }
  std::string digits;
  int decpt = 0;
  shortest_digits(x, &digits, &decpt);
  const int exp10 = decpt - 1;
  if (exp10 >= -4 && exp10 < 16) {
    if (decpt <= 0) {
      out->append("0.");
      out->append(static_cast<size_t>(-decpt), '0');
      out->append(digits);
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out->append(digits);
      out->append(static_cast<size_t>(decpt) - digits.size(), '0');
      out->append(".0");
    } else {
      out->append(digits, 0, static_cast<size_t>(decpt));
      out->push_back('.');
      out->append(digits, static_cast<size_t>(decpt), std::string::npos);
    }
    return;
  }
  out->push_back(digits[0]);
  if (digits.size() > 1) {
    out->push_back('.');
    out->append(digits, 1, std::string::npos);
  }
  out->push_back('e');
  out->push_back(exp10 < 0 ? '-' : '+');
  const int a = exp10 < 0 ? -exp10 : exp10;
  if (a < 10) out->push_back('0');
  append_int(a, out);
}

void Interpreter::string_repr(std::string_view s, std::string* out) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  out->push_back(quote);
  for (size_t i = 0; i < s.size();) {
    const char32_t c = text::decode(s, &i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out->append("\\t");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c >= 0x20 && c != 0x7F && (c < 0x7F || text::is_printable(c))) {
      text::append_utf8(out, c);  // printable: as it is; otherwise escaped by size below
    } else if (c <= 0xFF) {
      out->append("\\x");
      append_hex(static_cast<uint32_t>(c), 2, out);
    } else if (c <= 0xFFFF) {
      out->append("\\u");
      append_hex(static_cast<uint32_t>(c), 4, out);
    } else {
      out->append("\\U");
      append_hex(static_cast<uint32_t>(c), 8, out);
    }
  }
  out->push_back(quote);
}

void Interpreter::to_str(const Value& v, std::string* out, int depth) {
  switch (v.kind) {
    case Kind::kUndefined:
      return;
    case Kind::kNone:
      out->append("None");
      return;
    case Kind::kBool:
      out->append(v.b ? "True" : "False");
      return;
    case Kind::kInt:
      append_int(v.i, out);
      return;
    case Kind::kFloat:
      float_repr(v.f, out);
      return;
    case Kind::kString:
      out->append(v.sv());
      return;
    default:
      to_repr(v, out, depth);
  }
}

void Interpreter::to_repr(const Value& v, std::string* out, int depth) {
  if (depth > kMaxValueDepth + 8) {  // only reachable through a namespace that contains itself
    out->append("...");
    return;
  }
  switch (v.kind) {
    case Kind::kUndefined:
      out->append("Undefined");
      return;
    case Kind::kString:
      string_repr(v.sv(), out);
      return;
    case Kind::kList: {
      const char* open = "[";
      const char* close = "]";
      switch (v.flavor()) {
        case ListFlavor::kList:
          break;
        case ListFlavor::kTuple:
          open = "(";
          close = v.size == 1 ? ",)" : ")";
          break;
        case ListFlavor::kGenerator:
          out->append("<generator object>");
          return;
        case ListFlavor::kDictItems:
          open = "dict_items([";
          close = "])";
          break;
        case ListFlavor::kDictKeys:
          open = "dict_keys([";
          close = "])";
          break;
        case ListFlavor::kDictValues:
          open = "dict_values([";
          close = "])";
          break;
      }
      out->append(open);
      for (size_t i = 0; i < v.size; ++i) {
        if (i > 0) out->append(", ");
        to_repr(v.items[i], out, depth + 1);
      }
      out->append(close);
      return;
    }
    case Kind::kDict:
      out->push_back('{');
      for (size_t i = 0; i < v.size; ++i) {
        if (i > 0) out->append(", ");
        to_repr(v.entries[i].key, out, depth + 1);
        out->append(": ");
        to_repr(v.entries[i].value, out, depth + 1);
      }
      out->push_back('}');
      return;
    case Kind::kNamespace:
      out->append("<Namespace {");
      for (size_t i = 0; i < v.ns->size; ++i) {
        if (i > 0) out->append(", ");
        to_repr(v.ns->entries[i].key, out, depth + 1);
        out->append(": ");
        to_repr(v.ns->entries[i].value, out, depth + 1);
      }
      out->append("}>");
      return;
    case Kind::kMacro:
      out->append("<Macro '");
      out->append(v.macro->def->name);
      out->append("'>");
      return;
    case Kind::kFunction:
      out->append("<built-in function>");
      return;
    case Kind::kMethod:
      out->append("<built-in method ");
      out->append(v.method->name);
      out->append(">");
      return;
    case Kind::kLoop:
      out->append("<LoopContext ");
      append_int(static_cast<int64_t>(v.loop->index0 + 1), out);
      out->push_back('/');
      append_int(static_cast<int64_t>(v.loop->length), out);
      out->push_back('>');
      return;
    default:
      to_str(v, out, depth);
  }
}

bool Interpreter::str_value(const Expr& at, const Value& v, Value* out) {
  if (v.kind == Kind::kString) {
    *out = v;
    return true;
  }
  std::string s;
  to_str(v, &s);
  return new_string(at, s, out);
}

// --- json.dumps ---------------------------------------------------------------------------------

namespace {
// json.encoder.py_encode_basestring, or py_encode_basestring_ascii with ensure_ascii.
void json_string(std::string_view s, bool ascii, std::string* out) {
  out->push_back('"');
  size_t run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80 && ascii) {
      out->append(s.substr(run, i - run));
      size_t j = i;
      const char32_t cp = text::decode(s, &j);
      auto escape = [&](uint32_t unit) {
        out->append("\\u");
        append_hex(unit, 4, out);
      };
      if (cp >= 0x10000) {
        const uint32_t v = static_cast<uint32_t>(cp) - 0x10000;
        escape(0xD800 | (v >> 10));
        escape(0xDC00 | (v & 0x3FF));
      } else {
        escape(static_cast<uint32_t>(cp));
      }
      i = j - 1;
      run = j;
      continue;
    }
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(s.substr(run, i - run));
    run = i + 1;
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        out->append("\\u00");
        append_hex(c, 2, out);
    }
  }
  out->append(s.substr(run));
  out->push_back('"');
}

void json_float(double x, std::string* out) {
  if (std::isnan(x)) {
    out->append("NaN");
  } else if (std::isinf(x)) {
    out->append(x < 0 ? "-Infinity" : "Infinity");
  } else {
    Interpreter::float_repr(x, out);
  }
}
}  // namespace

bool Interpreter::to_json(const Expr& at, const Value& v, const JsonStyle& style, std::string* out,
                          int level) {
  if (out->size() > limits_.max_output_bytes) {
    return fail_limit("output larger than " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  auto newline = [&](int lvl) {
    out->push_back('\n');
    for (int i = 0; i < lvl; ++i) out->append(style.indent);
  };
  switch (v.kind) {
    case Kind::kNone:
      out->append("null");
      return true;
    case Kind::kBool:
      out->append(v.b ? "true" : "false");
      return true;
    case Kind::kInt:
      append_int(v.i, out);
      return true;
    case Kind::kFloat:
      json_float(v.f, out);
      return true;
    case Kind::kString:
      json_string(v.sv(), style.ensure_ascii, out);
      return true;
    case Kind::kList:
      if (!v.is_sequence()) break;
      if (!charge(at, v.size)) return false;
      if (v.size == 0) {
        out->append("[]");
        return true;
      }
      out->push_back('[');
      if (style.has_indent) newline(level + 1);
      for (size_t i = 0; i < v.size; ++i) {
        if (i > 0) {
          out->append(style.item_sep);
          if (style.has_indent) newline(level + 1);
        }
        if (!to_json(at, v.items[i], style, out, level + 1)) {
          return false;
        }
      }
      if (style.has_indent) newline(level);
      out->push_back(']');
      return true;
    case Kind::kDict: {
      if (!charge(at, v.size)) return false;
      if (v.size == 0) {
        out->append("{}");
        return true;
      }
      std::vector<size_t> order(v.size);
      for (size_t i = 0; i < v.size; ++i) order[i] = i;
      if (style.sort_keys) {
        for (size_t i = 0; i < v.size; ++i) {
          if (v.entries[i].key.kind != Kind::kString) {
            return fail(at, "tojson(sort_keys=true) supports string keys only");
          }
        }
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          return v.entries[a].key.sv() < v.entries[b].key.sv();
        });
      }
      out->push_back('{');
      if (style.has_indent) newline(level + 1);
      for (size_t n = 0; n < v.size; ++n) {
        const DictEntry& e = v.entries[order[n]];
        if (n > 0) {
          out->append(style.item_sep);
          if (style.has_indent) newline(level + 1);
        }
        switch (e.key.kind) {
          case Kind::kString:
            json_string(e.key.sv(), style.ensure_ascii, out);
            break;
          case Kind::kInt:
            out->push_back('"');
            append_int(e.key.i, out);
            out->push_back('"');
            break;
          case Kind::kFloat:
            out->push_back('"');
            json_float(e.key.f, out);
            out->push_back('"');
            break;
          case Kind::kBool:
            out->append(e.key.b ? "\"true\"" : "\"false\"");
            break;
          case Kind::kNone:
            out->append("\"null\"");
            break;
          default:
            return fail(at, "keys must be str, int, float, bool or None, not " +
                                std::string(type_name(e.key)));
        }
        out->append(style.key_sep);
        if (!to_json(at, e.value, style, out, level + 1)) {
          return false;
        }
      }
      if (style.has_indent) newline(level);
      out->push_back('}');
      return true;
    }
    default:
      break;
  }
  return fail(at, "Object of type " + std::string(type_name(v)) + " is not JSON serializable");
}

// --- printf-style formatting ---------------------------------------------------------------------

namespace {

struct Spec {
  bool left = false;   // '-'
  bool plus = false;   // '+'
  bool space = false;  // ' '
  bool zero = false;   // '0'
  bool alt = false;    // '#'
  int width = -1;
  int precision = -1;
  char type = 's';
};

void pad(std::string_view body, const Spec& spec, std::string* out, bool numeric) {
  const size_t len = text::length(body);
  const size_t width = spec.width < 0 ? 0 : static_cast<size_t>(spec.width);
  if (len >= width) {
    out->append(body);
    return;
  }
  const size_t fill = width - len;
  if (spec.left) {
    out->append(body);
    out->append(fill, ' ');
  } else if (spec.zero && numeric) {
    // Zeros go after the sign and any 0x prefix.
    size_t prefix = 0;
    if (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) prefix = 1;
    if (body.size() >= prefix + 2 && body[prefix] == '0' &&
        (body[prefix + 1] == 'x' || body[prefix + 1] == 'X' || body[prefix + 1] == 'o')) {
      prefix += 2;
    }
    out->append(body.substr(0, prefix));
    out->append(fill, '0');
    out->append(body.substr(prefix));
  } else {
    out->append(fill, ' ');
    out->append(body);
  }
}

// Formats a number with a C conversion ('d', 'x', 'X', 'o', 'e', 'E', 'f', 'F', 'g', 'G').
std::string format_number(const Value& v, const Spec& spec, bool as_int) {
  std::string body;
  char buf[1024];  // %f of DBL_MAX with precision 300 needs 610 bytes
  if (as_int) {
    const int64_t x = v.kind == Kind::kFloat
                          ? static_cast<int64_t>(v.f)
                          : (v.kind == Kind::kBool ? static_cast<int64_t>(v.b) : v.i);
    const uint64_t mag =
        x < 0 ? static_cast<uint64_t>(0) - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    const auto m = static_cast<unsigned long long>(mag);
    switch (spec.type) {
      case 'x':
        std::snprintf(buf, sizeof(buf), "%llx", m);
        break;
      case 'X':
        std::snprintf(buf, sizeof(buf), "%llX", m);
        break;
      case 'o':
        std::snprintf(buf, sizeof(buf), "%llo", m);
        break;
      default:
        std::snprintf(buf, sizeof(buf), "%llu", m);
        break;
    }
    if (x < 0) {
      body.push_back('-');
    } else if (spec.plus) {
      body.push_back('+');
    } else if (spec.space) {
      body.push_back(' ');
    }
    if (spec.alt && spec.type == 'x') body += "0x";
    if (spec.alt && spec.type == 'X') body += "0X";
    if (spec.alt && spec.type == 'o') body += "0o";
    if (spec.precision > 0) {
      const std::string digits(buf);
      if (static_cast<size_t>(spec.precision) > digits.size()) {
        body.append(static_cast<size_t>(spec.precision) - digits.size(), '0');
      }
    }
    body += buf;
    return body;
  }
  const double x =
      v.kind == Kind::kFloat ? v.f : static_cast<double>(v.kind == Kind::kBool ? v.b : v.i);
  if (std::isnan(x) || std::isinf(x)) {
    body = std::isnan(x) ? "nan" : (x < 0 ? "-inf" : "inf");
    if (std::isupper(static_cast<unsigned char>(spec.type)) != 0) {
      std::transform(body.begin(), body.end(), body.begin(), [](char c) {
        return static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      });
    }
    if (!std::signbit(x) && spec.plus) body.insert(body.begin(), '+');
    return body;
  }
  if (std::signbit(x)) {
    body.push_back('-');
  } else if (spec.plus) {
    body.push_back('+');
  } else if (spec.space) {
    body.push_back(' ');
  }
  const int p = spec.precision < 0 ? 6 : std::min(spec.precision, 300);
  const double mag = std::fabs(x);
  switch (spec.type) {
    case 'e':
      std::snprintf(buf, sizeof(buf), spec.alt ? "%#.*e" : "%.*e", p, mag);
      break;
    case 'E':
      std::snprintf(buf, sizeof(buf), spec.alt ? "%#.*E" : "%.*E", p, mag);
      break;
    case 'g':
      std::snprintf(buf, sizeof(buf), spec.alt ? "%#.*g" : "%.*g", p, mag);
      break;
    case 'G':
      std::snprintf(buf, sizeof(buf), spec.alt ? "%#.*G" : "%.*G", p, mag);
      break;
    case 'F':
      std::snprintf(buf, sizeof(buf), spec.alt ? "%#.*F" : "%.*F", p, mag);
      break;
    default:
      std::snprintf(buf, sizeof(buf), spec.alt ? "%#.*f" : "%.*f", p, mag);
      break;
  }
  body += buf;
  return body;
}

// The flags of a %-conversion ('-', '+', ' ', '0', '#') from format[*i] on.
void parse_percent_flags(std::string_view format, size_t* i, Spec* spec) {
  for (; *i < format.size(); ++*i) {
    const char c = format[*i];
    if (c == '-') {
      spec->left = true;
    } else if (c == '+') {
      spec->plus = true;
    } else if (c == ' ') {
      spec->space = true;
    } else if (c == '0') {
      spec->zero = true;
    } else if (c == '#') {
      spec->alt = true;
    } else {
      break;
    }
  }
}

// Appends `arg` converted by spec.type to *out; false with *error when the argument does not
// suit the conversion. `index` is the conversion character's position, for the error.
bool percent_convert(const Value& arg, const Spec& spec, size_t index, std::string* out,
                     std::string* error) {
  const char type = spec.type;
  std::string body;
  switch (type) {
    case 's':
    case 'r':
    case 'a': {
      if (type == 's') {
        Interpreter::to_str(arg, &body);
      } else {
        Interpreter::to_repr(arg, &body);
      }
      if (spec.precision >= 0)
        body = body.substr(0, text::byte_offset(body, static_cast<size_t>(spec.precision)));
      pad(body, spec, out, false);
      return true;
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o':
      if (!arg.is_number() ||
          ((type == 'x' || type == 'X' || type == 'o') && arg.kind == Kind::kFloat)) {
        *error = "%" + std::string(1, type) + " format: a real number is required, not " +
                 std::string(Interpreter::type_name(arg));
        return false;
      }
      pad(format_number(arg, spec, true), spec, out, true);
      return true;
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G':
      if (!arg.is_number()) {
        *error = "must be real number, not " + std::string(Interpreter::type_name(arg));
        return false;
      }
      pad(format_number(arg, spec, false), spec, out, true);
      return true;
    case 'c':
      if (arg.kind == Kind::kString && text::length(arg.sv()) == 1) {
        body = std::string(arg.sv());
      } else if (arg.kind == Kind::kInt && arg.i >= 0 && arg.i <= 0x10FFFF) {
        text::append_utf8(&body, static_cast<char32_t>(arg.i));
      } else {
        *error = "%c requires int or char";
        return false;
      }
      pad(body, spec, out, false);
      return true;
    default: {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "unsupported format character '%c' (0x%x) at index %zu", type,
                    static_cast<unsigned>(static_cast<unsigned char>(type)), index);
      *error = buf;
      return false;
    }
  }
}

}  // namespace

bool Interpreter::percent_format(const Expr& at, std::string_view format, const Value& args,
                                 Value* out) {
  std::vector<Value> positional;
  const Value* mapping = nullptr;
  if (args.kind == Kind::kList && args.flavor() == ListFlavor::kTuple) {
    positional.assign(args.items, args.items + args.size);
  } else if (args.kind == Kind::kDict) {
    mapping = &args;
    positional.push_back(args);
  } else {
    positional.push_back(args);
  }
  size_t next_arg = 0;
  std::string result;
  auto take = [&](Value* v) {
    if (next_arg >= positional.size()) return fail(at, "not enough arguments for format string");
    *v = positional[next_arg++];
    return true;
  };
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      result.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) return fail(at, "incomplete format");
    Value arg;
    bool have_arg = false;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string_view::npos) return fail(at, "incomplete format key");
      if (mapping == nullptr) return fail(at, "format requires a mapping");
      const std::string_view key = format.substr(i + 1, close - i - 1);
      bool found = false;
      for (size_t k = 0; k < mapping->size; ++k) {
        if (mapping->entries[k].key.kind == Kind::kString && mapping->entries[k].key.sv() == key) {
          arg = mapping->entries[k].value;
          found = true;
        }
      }
      if (!found) return fail(at, "KeyError: '" + std::string(key) + "'");
      have_arg = true;
      i = close + 1;
    }
    Spec spec;
    parse_percent_flags(format, &i, &spec);
    auto number = [&](int* target) -> bool {
      if (i < format.size() && format[i] == '*') {
        Value w;
        if (!take(&w)) return false;
        if (w.kind != Kind::kInt) return fail(at, "* wants int");
        *target = static_cast<int>(std::clamp<int64_t>(w.i, -1000, 1000));
        ++i;
        return true;
      }
      int n = -1;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') {
        n = (n < 0 ? 0 : n) * 10 + (format[i] - '0');
        if (n > 100000) return fail(at, "width too big");
        ++i;
      }
      if (n >= 0) *target = n;
      return true;
    };
    if (!number(&spec.width)) return false;
    if (i < format.size() && format[i] == '.') {
      ++i;
      spec.precision = 0;
      if (!number(&spec.precision)) return false;
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) return fail(at, "incomplete format");
    const char type = format[i];
    spec.type = type;
    if (type == '%') {
      result.push_back('%');
      continue;
    }
    if (!have_arg && !take(&arg)) return false;
    std::string error;
    if (!percent_convert(arg, spec, i, &result, &error)) return fail(at, error);
    if (result.size() > limits_.max_output_bytes) return fail_limit("formatted string too large");
  }
  if (mapping == nullptr && next_arg < positional.size()) {
    return fail(at, "not all arguments converted during string formatting");
  }
  return new_string(at, result, out);
}

// --- str.format
// ------------------------------------------------------------------------------------

namespace {

// A parsed format spec of the mini-language: [[fill]align][sign][#][0][width][,][.precision][type].
struct FormatSpec {
  char32_t fill = ' ';
  char align = 0;  // none given: '<' for strings, '>' for numbers
  Spec number;     // sign, '#', '0' and precision, as format_number reads them
  int width = 0;
  bool grouping = false;  // ',' or '_'
  char type = 0;
};

bool parse_format_spec(std::string_view spec, FormatSpec* f, std::string* error) {
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2) {
    size_t j = 0;
    const char32_t c = text::decode(spec, &j);
    if (j < spec.size() && is_align(spec[j])) {
      f->fill = c;
      f->align = spec[j];
      i = j + 1;
    }
  }
  if (f->align == 0 && i < spec.size() && is_align(spec[i])) f->align = spec[i++];
  Spec& s = f->number;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) {
    s.plus = spec[i] == '+';
    s.space = spec[i] == ' ';
    ++i;
  }
  if (i < spec.size() && spec[i] == '#') {
    s.alt = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    s.zero = true;
    if (f->align == 0) {
      f->align = '=';
      f->fill = '0';
    }
    ++i;
  }
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
    f->width = f->width * 10 + (spec[i++] - '0');
    if (f->width > 100000) {
      *error = "width too big";
      return false;
    }
  }
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) {
    f->grouping = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    s.precision = 0;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
      s.precision = s.precision * 10 + (spec[i++] - '0');
      if (s.precision > 1000) {
        *error = "precision too big";
        return false;
      }
    }
  }
  if (i < spec.size()) f->type = spec[i++];
  if (i != spec.size()) {
    *error = "Invalid format specifier";
    return false;
  }
  return true;
}

// format(int, 'b'): sign, "0b" with '#', then the binary digits.
std::string binary_digits(const Value& v, const Spec& s) {
  int64_t x = v.kind == Kind::kBool ? v.b : v.i;
  uint64_t mag =
      x < 0 ? static_cast<uint64_t>(0) - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  std::string bits;
  do {
    bits.insert(bits.begin(), static_cast<char>('0' + (mag & 1)));
    mag >>= 1;
  } while (mag != 0);
  return (x < 0 ? "-" : (s.plus ? "+" : "")) + std::string(s.alt ? "0b" : "") + bits;
}

// A number formatted by f's type, sign, '#', precision and grouping, before padding.
bool format_spec_number(const Value& v, FormatSpec* f, std::string* body, std::string* error) {
  Spec& s = f->number;
  const char type = f->type;
  const bool is_float = v.kind == Kind::kFloat;
  if (type == 0) {
    if (is_float) {
      if (s.precision >= 0) {
        s.type = 'g';
        *body = format_number(v, s, false);
      } else {
        Interpreter::float_repr(v.f, body);
        if (s.plus && !std::signbit(v.f)) body->insert(body->begin(), '+');
      }
    } else {
      s.type = 'd';
      *body = format_number(v, s, true);
    }
  } else if (type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b') {
    if (is_float) {
      *error = "Unknown format code '" + std::string(1, type) + "' for object of type 'float'";
      return false;
    }
    if (type == 'b') {
      *body = binary_digits(v, s);
    } else {
      s.type = type;
      *body = format_number(v, s, true);
    }
  } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' ||
             type == 'G' || type == '%') {
    Value x = v;
    if (type == '%')
      x = Value::floating((v.kind == Kind::kFloat ? v.f : static_cast<double>(v.i)) * 100);
    s.type = type == '%' ? 'f' : type;
    *body = format_number(x, s, false);
    if (type == '%') *body += '%';
  } else {
    *error = "Unknown format code '" + std::string(1, type) + "'";
    return false;
  }
  if (f->grouping) {
    // Thousands separators on the integer part.
    size_t begin =
        (!body->empty() && ((*body)[0] == '-' || (*body)[0] == '+' || (*body)[0] == ' ')) ? 1 : 0;
    size_t end = body->find_first_not_of("0123456789", begin);
    if (end == std::string::npos) end = body->size();
    for (size_t k = end; k > begin + 3; k -= 3) body->insert(k - 3, 1, ',');
  }
  return true;
}

// Pads body to f.width with f.fill; '=' puts the padding after a number's sign.
void align_to_width(std::string_view body, const FormatSpec& f, bool numeric, std::string* out) {
  const size_t len = text::length(body);
  const auto w = static_cast<size_t>(f.width);
  if (len >= w) {
    out->append(body);
    return;
  }
  const size_t n = w - len;
  std::string fill_text;
  text::append_utf8(&fill_text, f.fill);
  auto fill_n = [&](size_t k) {
    for (size_t t = 0; t < k; ++t) out->append(fill_text);
  };
  switch (f.align) {
    case '<':
      out->append(body);
      fill_n(n);
      break;
    case '^':
      fill_n(n / 2);
      out->append(body);
      fill_n(n - n / 2);
      break;
    case '=':
      if (numeric && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
        out->push_back(body[0]);
        fill_n(n);
        out->append(body.substr(1));
      } else {
        fill_n(n);
        out->append(body);
      }
      break;
    default:
      fill_n(n);
      out->append(body);
  }
}

// format(v, spec), as str.format applies a field's spec.
bool apply_format_spec(const Value& v, std::string_view spec, std::string* out,
                       std::string* error) {
  FormatSpec f;
  if (!parse_format_spec(spec, &f, error)) return false;
  std::string body;
  bool numeric = false;
  if (v.kind == Kind::kString || (!v.is_number() && v.kind != Kind::kUndefined)) {
    if (f.type != 0 && f.type != 's') {
      *error = "Unknown format code '" + std::string(1, f.type) + "' for object of type '" +
               std::string(Interpreter::type_name(v)) + "'";
      return false;
    }
    Interpreter::to_str(v, &body);
    if (f.number.precision >= 0)
      body = body.substr(0, text::byte_offset(body, static_cast<size_t>(f.number.precision)));
    if (f.align == 0) f.align = '<';
  } else if (v.kind == Kind::kUndefined) {
    if (f.align == 0) f.align = '<';
  } else {
    numeric = true;
    if (!format_spec_number(v, &f, &body, error)) return false;
    if (f.align == 0) f.align = '>';
  }
  align_to_width(body, f, numeric, out);
  return true;
}

}  // namespace

bool Interpreter::str_format(const Expr& at, std::string_view format, const CallArgs& args,
                             Value* out) {
  std::string result;
  size_t auto_index = 0;
  bool used_auto = false;
  bool used_manual = false;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        result.push_back('}');
        ++i;
        continue;
      }
      return fail(at, "Single '}' encountered in format string");
    }
    if (c != '{') {
      result.push_back(c);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      result.push_back('{');
      ++i;
      continue;
    }
    // Find the matching '}' (format specs may nest one level of braces: not supported).
    const size_t close = format.find('}', i);
    if (close == std::string_view::npos) return fail(at, "Single '{' encountered in format string");
    std::string_view field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec;
    char conversion = 0;
    if (const size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size()) return fail(at, "expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    // Split "name.attr[key]" into the head and accessors.
    size_t head_end = field.find_first_of(".[");
    if (head_end == std::string_view::npos) head_end = field.size();
    const std::string_view head = field.substr(0, head_end);
    Value v;
    if (head.empty() ||
        std::all_of(head.begin(), head.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t index = 0;
      if (head.empty()) {
        if (used_manual)
          return fail(at,
                      "cannot switch from manual field specification to automatic field numbering");
        used_auto = true;
        index = auto_index++;
      } else {
        if (used_auto)
          return fail(at,
                      "cannot switch from automatic field numbering to manual field specification");
        used_manual = true;
        if (head.size() > 6) return fail(at, "Too many decimal digits in format string");
        index = static_cast<size_t>(std::stoul(std::string(head)));
      }
      if (index >= args.npos)
        return fail(at, "Replacement index " + std::to_string(index) +
                            " out of range for positional args tuple");
      v = args.pos[index];
    } else {
      bool found = false;
      for (size_t k = 0; k < args.nkw; ++k) {
        if (args.kw[k].name == head) {
          v = args.kw[k].value;
          found = true;
        }
      }
      if (!found) return fail(at, "KeyError: '" + std::string(head) + "'");
    }
    for (size_t k = head_end; k < field.size();) {
      if (field[k] == '.') {
        size_t e = field.find_first_of(".[", k + 1);
        if (e == std::string_view::npos) e = field.size();
        if (!get_attr(at, v, field.substr(k + 1, e - k - 1), &v)) return false;
        k = e;
      } else {
        const size_t e = field.find(']', k);
        if (e == std::string_view::npos) return fail(at, "Missing ']' in format string");
        const std::string_view key = field.substr(k + 1, e - k - 1);
        Value key_value = Value::string(key);
        if (!key.empty() &&
            std::all_of(key.begin(), key.end(), [](char d) { return d >= '0' && d <= '9'; }) &&
            key.size() < 10) {
          key_value = Value::integer(std::stoll(std::string(key)));
        }
        if (!get_item(at, v, key_value, &v)) return false;
        k = e + 1;
      }
    }
    if (conversion == 'r' || conversion == 'a') {
      std::string r;
      to_repr(v, &r);
      if (!new_string(at, r, &v)) return false;
    } else if (conversion == 's') {
      if (!str_value(at, v, &v)) return false;
    } else if (conversion != 0) {
      return fail(at, "Unknown conversion specifier " + std::string(1, conversion));
    }
    if (spec.empty()) {
      to_str(v, &result);
    } else {
      std::string error;
      if (!apply_format_spec(v, spec, &result, &error)) return fail(at, error);
    }
    if (result.size() > limits_.max_output_bytes) return fail_limit("formatted string too large");
  }
  return new_string(at, result, out);
}

}  // namespace infera::jinja
