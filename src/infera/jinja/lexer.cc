#include "infera/jinja/lexer.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <string>

#include "infera/jinja/text.h"

namespace infera::jinja {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

class Lexer {
 public:
  explicit Lexer(Program* program) : program_(program), s_(program->source) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < s_.size(); ++i) {
      if (s_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    INFERA_RETURN_IF_ERROR(lex_template());
    return std::move(tokens_);
  }

 private:
  bool at(size_t pos, std::string_view what) const {
    return s_.compare(pos, what.size(), what) == 0;
  }

  void locate(size_t pos, uint32_t* line, uint32_t* column) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    const size_t index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    *line = static_cast<uint32_t>(index + 1);
    *column = static_cast<uint32_t>(pos - line_starts_[index] + 1);
  }

  Status error_at(size_t pos, const std::string& message) const {
    uint32_t line = 0;
    uint32_t column = 0;
    locate(pos, &line, &column);
    return invalid_argument("template syntax error at line " + std::to_string(line) + ", column " +
                            std::to_string(column) + ": " + message);
  }

  Token& emit(Tok type, size_t pos, std::string_view text) {
    Token t;
    t.type = type;
    t.text = text;
    locate(pos, &t.line, &t.column);
    tokens_.push_back(t);
    return tokens_.back();
  }

  size_t skip_space(size_t pos) const {
    while (pos < s_.size()) {
      const size_t k = text::space_at(s_, pos);
      if (k == 0) break;
      pos += k;
    }
    return pos;
  }

  // The text before a tag, after `-` (strip all whitespace) or lstrip_blocks (strip the
  // indentation of a block or comment tag that starts its line) - jinja2 OptionalLStrip.
  std::string_view strip_before_tag(std::string_view data, char sign, bool lstrip_applies) const {
    if (sign == '-') return text::strip_space(data, false, true);
    if (sign != '+' && lstrip_applies) {
      const size_t nl = data.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && text::all_space(data.substr(l_pos))) {
        return data.substr(0, l_pos);
      }
    }
    return data;
  }

  void emit_text(size_t pos, std::string_view data) {
    if (!data.empty()) emit(Tok::kText, pos, data);
  }

  // `{%(-|+|)\s*raw\s*(-%}\s*|%})` at `pos`; *end is set past the match.
  bool match_raw_begin(size_t pos, size_t* end) const {
    size_t i = pos + 2;
    if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) ++i;
    i = skip_space(i);
    if (!at(i, "raw")) return false;
    i = skip_space(i + 3);
    if (at(i, "-%}")) {
      *end = skip_space(i + 3);
      return true;
    }
    if (at(i, "%}")) {
      *end = i + 2;
      return true;
    }
    return false;
  }

  // `{%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?)` at `pos`.
  bool match_raw_end(size_t pos, char* sign, size_t* end) const {
    size_t i = pos + 2;
    *sign = 0;
    if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) *sign = s_[i++];
    i = skip_space(i);
    if (!at(i, "endraw")) return false;
    i = skip_space(i + 6);
    if (at(i, "+%}")) {
      *end = i + 3;
    } else if (at(i, "-%}")) {
      *end = skip_space(i + 3);
    } else if (at(i, "%}")) {
      *end = i + 2;
      if (*end < s_.size() && s_[*end] == '\n') ++*end;  // trim_blocks
    } else {
      return false;
    }
    return true;
  }

  Status lex_template() {
    const size_t n = s_.size();
    size_t pos = 0;
    while (pos < n) {
      size_t tag = pos;
      for (;;) {
        tag = s_.find('{', tag);
        if (tag == std::string_view::npos || tag + 1 >= n) {
          tag = std::string_view::npos;
          break;
        }
        const char k = s_[tag + 1];
        if (k == '{' || k == '%' || k == '#') break;
        ++tag;
      }
      if (tag == std::string_view::npos) {
        emit_text(pos, s_.substr(pos));
        break;
      }
      const char kind = s_[tag + 1];
      size_t after = tag + 2;
      char sign = 0;
      if (after < n && (s_[after] == '-' || s_[after] == '+')) sign = s_[after++];
      size_t raw_end = 0;
      const bool raw = kind == '%' && match_raw_begin(tag, &raw_end);
      emit_text(pos, strip_before_tag(s_.substr(pos, tag - pos), sign, kind != '{'));

      if (raw) {
        line_starting_ = s_[raw_end - 1] == '\n';
        size_t j = raw_end;
        char end_sign = 0;
        size_t end = 0;
        for (;;) {
          j = s_.find("{%", j);
          if (j == std::string_view::npos) return error_at(tag, "Missing end of raw directive");
          if (match_raw_end(j, &end_sign, &end)) break;
          ++j;
        }
        emit_text(raw_end, strip_before_tag(s_.substr(raw_end, j - raw_end), end_sign, true));
        pos = end;
        line_starting_ = s_[end - 1] == '\n';
        continue;
      }

      if (kind == '#') {
        // (.*?)(\+#}|\-#}\s*|#}\n?): the first "#}", with the sign just before it if any.
        const size_t k = s_.find("#}", after);
        if (k == std::string_view::npos) return error_at(tag, "Missing end of comment tag");
        const char end_sign = k > after ? s_[k - 1] : 0;
        size_t end = k + 2;
        if (end_sign == '-') {
          end = skip_space(end);
        } else if (end_sign != '+' && end < n && s_[end] == '\n') {
          ++end;  // trim_blocks
        }
        pos = end;
        line_starting_ = s_[end - 1] == '\n';
        continue;
      }

      emit(kind == '%' ? Tok::kBlockBegin : Tok::kVariableBegin, tag, s_.substr(tag, after - tag));
      pos = after;
      INFERA_RETURN_IF_ERROR(lex_tag(kind == '%', &pos));
    }
    emit(Tok::kEof, n, {});
    return ok_status();
  }

  // Tokens inside {% %} or {{ }} up to and including the end marker.
  Status lex_tag(bool block, size_t* cursor) {
    const size_t n = s_.size();
    size_t pos = *cursor;
    std::string balance;  // expected closing brackets, innermost last
    for (;;) {
      pos = skip_space(pos);
      if (pos >= n) {
        *cursor = pos;
        return ok_status();  // the parser reports the unexpected end of template
      }
      if (balance.empty()) {
        size_t end = 0;
        if (block) {
          if (at(pos, "+%}")) {
            end = pos + 3;
          } else if (at(pos, "-%}")) {
            end = skip_space(pos + 3);
          } else if (at(pos, "%}")) {
            end = pos + 2;
            if (end < n && s_[end] == '\n') ++end;  // trim_blocks
          }
        } else {
          if (at(pos, "-}}")) {
            end = skip_space(pos + 3);
          } else if (at(pos, "}}")) {
            end = pos + 2;
          }
        }
        if (end != 0) {
          emit(block ? Tok::kBlockEnd : Tok::kVariableEnd, pos, s_.substr(pos, end - pos));
          line_starting_ = s_[end - 1] == '\n';
          *cursor = end;
          return ok_status();
        }
      }
      const char c = s_[pos];
      if (is_digit(c)) {
        INFERA_RETURN_IF_ERROR(lex_number(&pos));
        continue;
      }
      if (c == '\'' || c == '"') {
        INFERA_RETURN_IF_ERROR(lex_string(&pos));
        continue;
      }
      if (const size_t len = name_length(pos); len > 0) {
        emit(Tok::kName, pos, s_.substr(pos, len));
        pos += len;
        continue;
      }
      INFERA_RETURN_IF_ERROR(lex_operator(&pos, &balance));
    }
  }

  size_t name_length(size_t pos) const {
    size_t i = pos;
    bool first = true;
    while (i < s_.size()) {
      const char c = s_[i];
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!first && is_digit(c))) {
        ++i;
      } else if (static_cast<unsigned char>(c) >= 0x80) {
        size_t j = i;
        const char32_t cp = text::decode(s_, &j);
        if (text::is_alpha(cp) || (!first && text::is_numeric(cp))) {
          i = j;
        } else {
          break;
        }
      } else {
        break;
      }
      first = false;
    }
    return i - pos;
  }

  // `(\d+_)*\d+` from *i; false when there is no digit at *i.
  bool digits(size_t* i) const {
    size_t j = *i;
    if (j >= s_.size() || !is_digit(s_[j])) return false;
    // A '_' counts only between two digits.
    while (j < s_.size() &&
           (is_digit(s_[j]) || (s_[j] == '_' && j + 1 < s_.size() && is_digit(s_[j + 1])))) {
      ++j;
    }
    *i = j;
    return true;
  }

  Status lex_number(size_t* cursor) {
    const size_t pos = *cursor;
    // Float: (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+)
    if (pos == 0 || s_[pos - 1] != '.') {
      size_t i = pos;
      digits(&i);
      size_t frac_end = 0;
      if (i < s_.size() && s_[i] == '.') {
        size_t j = i + 1;
        if (digits(&j)) frac_end = j;
      }
      size_t end = 0;
      const size_t e = frac_end != 0 ? frac_end : i;
      if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
        size_t j = e + 1;
        if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
        if (digits(&j)) end = j;
      }
      if (end == 0 && frac_end != 0) end = frac_end;
      if (end != 0) {
        std::string clean;
        for (size_t k = pos; k < end; ++k) {
          if (s_[k] != '_') clean.push_back(s_[k]);
        }
        double value = 0;
        const auto r = std::from_chars(clean.data(), clean.data() + clean.size(), value);
        if (r.ec == std::errc::result_out_of_range) {
          // Python's float() gives inf on overflow and 0.0 on underflow where from_chars refuses.
          const size_t e_at = clean.find_first_of("eE");
          const bool negative_exponent = e_at != std::string::npos && clean[e_at + 1] == '-';
          value = negative_exponent ? 0.0 : std::numeric_limits<double>::infinity();
        }
        Token& t = emit(Tok::kFloat, pos, s_.substr(pos, end - pos));
        t.real = value;
        *cursor = end;
        return ok_status();
      }
    }
    // Integer: 0b..., 0o..., 0x..., [1-9](_?\d)*, 0(_?0)*
    size_t i = pos;
    int base = 10;
    size_t digits_begin = pos;
    if (s_[pos] == '0' && pos + 1 < s_.size()) {
      const char p = static_cast<char>(s_[pos + 1] | 0x20);
      const int b = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 0;
      if (b != 0) {
        auto ok_digit = [&](char c) {
          return b == 16 ? is_hex(c) : (c >= '0' && c < static_cast<char>('0' + b));
        };
        size_t j = pos + 2;
        bool any = false;
        while (j < s_.size()) {
          if (ok_digit(s_[j])) {
            ++j;
            any = true;
          } else if (s_[j] == '_' && j + 1 < s_.size() && ok_digit(s_[j + 1])) {
            ++j;
          } else {
            break;
          }
        }
        if (any) {
          base = b;
          digits_begin = pos + 2;
          i = j;
        }
      }
    }
    if (base == 10) {
      if (s_[pos] == '0') {
        i = pos + 1;
        while (i < s_.size() &&
               (s_[i] == '0' || (s_[i] == '_' && i + 1 < s_.size() && s_[i + 1] == '0'))) {
          ++i;
        }
      } else {
        digits(&i);
      }
    }
    int64_t value = 0;
    for (size_t k = digits_begin; k < i; ++k) {
      if (s_[k] == '_') continue;
      const int d = hex_value(s_[k]);
      if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, d, &value)) {
        return error_at(pos, "integer literal too large (infera supports 64-bit integers)");
      }
    }
    Token& t = emit(Tok::kInteger, pos, s_.substr(pos, i - pos));
    t.integer = value;
    *cursor = i;
    return ok_status();
  }

  // Python's 'unicode-escape' decoding of a string literal body.
  Status lex_string(size_t* cursor) {
    const size_t pos = *cursor;
    const char quote = s_[pos];
    size_t i = pos + 1;
    while (i < s_.size() && s_[i] != quote) i += s_[i] == '\\' ? size_t{2} : size_t{1};
    if (i >= s_.size()) return error_at(pos, "unterminated string literal");
    const std::string_view raw = s_.substr(pos + 1, i - pos - 1);
    std::string out;
    out.reserve(raw.size());
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] != '\\') {
        out.push_back(raw[k]);
        continue;
      }
      const char e = raw[++k];
      auto hex_escape = [&](size_t count) -> Status {
        uint32_t cp = 0;
        for (size_t d = 1; d <= count; ++d) {
          if (k + d >= raw.size() || !is_hex(raw[k + d])) {
            return error_at(pos, "truncated \\" + std::string(1, e) + " escape in string literal");
          }
          cp = cp * 16 + static_cast<uint32_t>(hex_value(raw[k + d]));
        }
        if (cp > 0x10FFFF) return error_at(pos, "illegal Unicode character in string literal");
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
        text::append_utf8(&out, cp);
        k += count;
        return ok_status();
      };
      switch (e) {
        case '\n':
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
          INFERA_RETURN_IF_ERROR(hex_escape(2));
          break;
        case 'u':
          INFERA_RETURN_IF_ERROR(hex_escape(4));
          break;
        case 'U':
          INFERA_RETURN_IF_ERROR(hex_escape(8));
          break;
        case 'N':
          return error_at(pos, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int d = 0; d < 2 && k + 1 < raw.size() && raw[k + 1] >= '0' && raw[k + 1] <= '7';
                 ++d) {
              cp = cp * 8 + static_cast<uint32_t>(raw[++k] - '0');
            }
            text::append_utf8(&out, cp);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    program_->strings.push_back(std::move(out));
    emit(Tok::kString, pos, program_->strings.back());
    *cursor = i + 1;
    return ok_status();
  }

  Status lex_operator(size_t* cursor, std::string* balance) {
    const size_t pos = *cursor;
    struct Op {
      std::string_view text;
      Tok type;
    };
    static constexpr Op kOps[] = {
        {"**", Tok::kPow},     {"//", Tok::kFloorDiv}, {"==", Tok::kEq},    {"!=", Tok::kNe},
        {">=", Tok::kGe},      {"<=", Tok::kLe},       {"+", Tok::kAdd},    {"-", Tok::kSub},
        {"*", Tok::kMul},      {"/", Tok::kDiv},       {"%", Tok::kMod},    {"~", Tok::kTilde},
        {"[", Tok::kLBracket}, {"]", Tok::kRBracket},  {"(", Tok::kLParen}, {")", Tok::kRParen},
        {"{", Tok::kLBrace},   {"}", Tok::kRBrace},    {">", Tok::kGt},     {"<", Tok::kLt},
        {"=", Tok::kAssign},   {".", Tok::kDot},       {":", Tok::kColon},  {"|", Tok::kPipe},
        {",", Tok::kComma},    {";", Tok::kSemicolon},
    };
    for (const Op& op : kOps) {
      if (!at(pos, op.text)) continue;
      const char c = op.text[0];
      if (op.text.size() == 1 && (c == '(' || c == '[' || c == '{')) {
        balance->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (op.text.size() == 1 && (c == ')' || c == ']' || c == '}')) {
        if (balance->empty()) return error_at(pos, "unexpected '" + std::string(1, c) + "'");
        if (balance->back() != c) {
          return error_at(pos, "unexpected '" + std::string(1, c) + "', expected '" +
                                   std::string(1, balance->back()) + "'");
        }
        balance->pop_back();
      }
      emit(op.type, pos, op.text);
      *cursor = pos + op.text.size();
      return ok_status();
    }
    size_t j = pos;
    text::decode(s_, &j);
    return error_at(pos, "unexpected char '" + std::string(s_.substr(pos, j - pos)) + "'");
  }

  Program* program_;
  std::string_view s_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;  // the previous token ended a line (jinja2 lexer's line_starting)
};

}  // namespace

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string describe(const Token& token) {
  switch (token.type) {
    case Tok::kName:
      return std::string(token.text);
    case Tok::kText:
      return "template data / text";
    case Tok::kVariableBegin:
      return "begin of print statement";
    case Tok::kVariableEnd:
      return "end of print statement";
    case Tok::kBlockBegin:
      return "begin of statement block";
    case Tok::kBlockEnd:
      return "end of statement block";
    case Tok::kString:
      return "string";
    case Tok::kInteger:
      return "integer";
    case Tok::kFloat:
      return "float";
    case Tok::kEof:
      return "end of template";
    default:
      return std::string(token.text);
  }
}

Result<std::vector<Token>> tokenize(Program* program) {
  return Lexer(program).run();
}

}  // namespace infera::jinja
