#include "infera/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <string>

#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {

// Oniguruma's Unicode word set (\w): Alphabetic, marks, decimal digits, connector punctuation,
// plus the Latin-1 superscripts and fractions its ISO-8859-1 ctype table marks as word
// characters (the same set tokenizers.js derived when matching Oniguruma).
constexpr std::string_view kWordClass =
    "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
constexpr std::string_view kHexClass = "0-9A-Fa-f";
constexpr std::string_view kSpaceProp = "\\p{White_Space}";
constexpr std::string_view kNonSpaceProp = "\\P{White_Space}";

Status unsupported(std::string_view pattern, std::string_view what) {
  return invalid_argument("unsupported regex construct (" + std::string(what) + ") in pattern " +
                          std::string(pattern));
}

bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// Oniguruma POSIX bracket names -> PCRE2 class contents with Oniguruma's Unicode meaning.
std::string_view posix_fragment(std::string_view name) {
  if (name == "alpha") return "\\p{Alphabetic}";
  if (name == "alnum") return "\\p{Alphabetic}\\p{Nd}";
  if (name == "digit") return "\\p{Nd}";
  if (name == "lower") return "\\p{Lowercase}";
  if (name == "upper") return "\\p{Uppercase}";
  if (name == "space") return kSpaceProp;
  if (name == "blank") return "\\t\\p{Zs}";
  if (name == "punct") return "\\p{P}\\p{S}";
  if (name == "cntrl") return "\\p{Cc}";
  if (name == "word") return kWordClass;
  if (name == "xdigit") return kHexClass;
  return {};
}

class Translator {
 public:
  explicit Translator(std::string_view p) : p_(p) {}

  Result<std::string> run() {
    while (i_ < p_.size()) {
      const char c = p_[i_];
      if (c == '\\') {
        INFERA_RETURN_IF_ERROR(escape());
      } else if (c == '[') {
        INFERA_RETURN_IF_ERROR(char_class());
      } else if (c == '(') {
        group_open();
      } else if (c == '{') {
        brace();
      } else {
        out_.push_back(c);
        ++i_;
      }
    }
    return out_;
  }

 private:
  // Copies one (possibly multi-byte) character verbatim.
  void copy_char() {
    const size_t n = std::min(unicode::char_len(static_cast<unsigned char>(p_[i_])), p_.size() - i_);
    out_.append(p_.substr(i_, n));
    i_ += n;
  }

  // \p{Name} / \p{^Name} / \P{Name} starting at p_[i_] == '\\'. Appends the PCRE2 form.
  Status property(std::string& dst) {
    const bool upper = p_[i_ + 1] == 'P';
    if (i_ + 2 >= p_.size() || p_[i_ + 2] != '{') {
      // \pL shorthand: one-letter category.
      if (i_ + 2 >= p_.size()) return unsupported(p_, "dangling \\p");
      dst += upper ? "\\P" : "\\p";
      dst.push_back(p_[i_ + 2]);
      i_ += 3;
      return ok_status();
    }
    const size_t close = p_.find('}', i_ + 3);
    if (close == std::string_view::npos) return unsupported(p_, "unterminated \\p{");
    std::string_view name = p_.substr(i_ + 3, close - i_ - 3);
    bool negate = upper;
    if (!name.empty() && name[0] == '^') {
      negate = !negate;
      name.remove_prefix(1);
    }
    dst += negate ? "\\P{" : "\\p{";
    dst.append(name);
    dst.push_back('}');
    i_ = close + 1;
    return ok_status();
  }

  // The escapes read the same way in and out of a class: \uXXXX, \p{..}/\P{..}, and any
  // other escaped character copied as it is. At `\`, with i_ on it.
  Status common_escape() {
    switch (p_[i_ + 1]) {
      case 'u':
        if (i_ + 6 <= p_.size() && is_hex(p_[i_ + 2]) && is_hex(p_[i_ + 3]) &&
            is_hex(p_[i_ + 4]) && is_hex(p_[i_ + 5])) {
          out_ += "\\x{";
          out_.append(p_.substr(i_ + 2, 4));
          out_ += "}";
          i_ += 6;
          return ok_status();
        }
        return unsupported(p_, "\\u without four hex digits");
      case 'p':
      case 'P':
        return property(out_);
      default:
        out_.push_back('\\');
        ++i_;
        copy_char();
        return ok_status();
    }
  }

  Status escape() {
    if (i_ + 1 >= p_.size()) return unsupported(p_, "trailing backslash");
    const char e = p_[i_ + 1];
    switch (e) {
      case 's': out_ += kSpaceProp; i_ += 2; return ok_status();
      case 'S': out_ += kNonSpaceProp; i_ += 2; return ok_status();
      case 'd': out_ += "\\p{Nd}"; i_ += 2; return ok_status();
      case 'D': out_ += "\\P{Nd}"; i_ += 2; return ok_status();
      case 'w': out_ += "["; out_ += kWordClass; out_ += "]"; i_ += 2; return ok_status();
      case 'W': out_ += "[^"; out_ += kWordClass; out_ += "]"; i_ += 2; return ok_status();
      case 'h': out_ += "["; out_ += kHexClass; out_ += "]"; i_ += 2; return ok_status();
      case 'H': out_ += "[^"; out_ += kHexClass; out_ += "]"; i_ += 2; return ok_status();
      case 'v': out_ += "\\x{0B}"; i_ += 2; return ok_status();
      case 'b':
      case 'B': {
        const std::string w = "[" + std::string(kWordClass) + "]";
        if (e == 'b') {
          out_ += "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))";
        } else {
          out_ += "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
        }
        i_ += 2;
        return ok_status();
      }
      default:
        return common_escape();
    }
  }

  // Translates a bracket expression; nested positive classes are inlined (Oniguruma union).
  Status char_class() {
    out_.push_back('[');
    ++i_;
    if (i_ < p_.size() && p_[i_] == '^') {
      out_.push_back('^');
      ++i_;
    }
    INFERA_RETURN_IF_ERROR(class_body(/*depth=*/0));
    out_.push_back(']');
    return ok_status();
  }

  // Consumes through the closing ']' of the current class, appending its contents.
  Status class_body(int depth) {
    if (depth > 32) return unsupported(p_, "character classes nested too deeply");
    bool first = true;
    while (i_ < p_.size()) {
      const char c = p_[i_];
      if (c == ']' && !first) {
        ++i_;
        return ok_status();
      }
      if (c == ']') {
        out_ += "\\]";
        ++i_;
      } else if (c == '&' && i_ + 1 < p_.size() && p_[i_ + 1] == '&') {
        return unsupported(p_, "class intersection &&");
      } else if (c == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
        const size_t close = p_.find(":]", i_ + 2);
        if (close == std::string_view::npos) return unsupported(p_, "unterminated [:class:]");
        std::string_view name = p_.substr(i_ + 2, close - i_ - 2);
        const bool negated = !name.empty() && name[0] == '^';
        if (negated) name.remove_prefix(1);
        const std::string_view fragment = posix_fragment(name);
        if (fragment.empty()) return unsupported(p_, "POSIX class [:" + std::string(name) + ":]");
        if (negated) {
          // Only single-property classes have a PCRE2 complement usable inside a class.
          if (fragment.size() > 4 && fragment.substr(0, 3) == "\\p{" &&
              fragment.find('\\', 1) == std::string_view::npos) {
            out_ += "\\P";
            out_.append(fragment.substr(2));
          } else {
            return unsupported(p_, "negated POSIX class [:^" + std::string(name) + ":]");
          }
        } else {
          out_.append(fragment);
        }
        i_ = close + 2;
      } else if (c == '[') {
        ++i_;
        if (i_ < p_.size() && p_[i_] == '^') return unsupported(p_, "negated nested class");
        INFERA_RETURN_IF_ERROR(class_body(depth + 1));
      } else if (c == '\\') {
        INFERA_RETURN_IF_ERROR(class_escape());
      } else if (c == '-' && !first && i_ + 1 < p_.size() && p_[i_ + 1] == '[') {
        out_ += "\\-";
        ++i_;
      } else {
        copy_char();
      }
      first = false;
    }
    return unsupported(p_, "unterminated character class");
  }

  Status class_escape() {
    if (i_ + 1 >= p_.size()) return unsupported(p_, "trailing backslash");
    const char e = p_[i_ + 1];
    switch (e) {
      case 's': out_ += kSpaceProp; i_ += 2; return ok_status();
      case 'S': out_ += kNonSpaceProp; i_ += 2; return ok_status();
      case 'd': out_ += "\\p{Nd}"; i_ += 2; return ok_status();
      case 'D': out_ += "\\P{Nd}"; i_ += 2; return ok_status();
      case 'w': out_ += kWordClass; i_ += 2; return ok_status();
      case 'h': out_ += kHexClass; i_ += 2; return ok_status();
      case 'W': return unsupported(p_, "\\W inside a class");
      case 'H': return unsupported(p_, "\\H inside a class");
      case 'v': out_ += "\\x{0B}"; i_ += 2; return ok_status();
      case 'b': out_ += "\\x{08}"; i_ += 2; return ok_status();
      default:
        return common_escape();
    }
  }

  // Option groups: Ruby's (?m) is dot-all, PCRE2's (?s).
  void group_open() {
    out_.push_back('(');
    ++i_;
    if (i_ >= p_.size() || p_[i_] != '?') return;
    size_t j = i_ + 1;
    while (j < p_.size() && (p_[j] == 'i' || p_[j] == 'm' || p_[j] == 'x' || p_[j] == '-')) ++j;
    if (j == i_ + 1 || j >= p_.size() || (p_[j] != ':' && p_[j] != ')')) return;
    out_.push_back('?');
    for (size_t k = i_ + 1; k < j; ++k) out_.push_back(p_[k] == 'm' ? 's' : p_[k]);
    i_ = j;
  }

  // {n}, {n,}, {n,m} pass through; Oniguruma's {,m} is {0,m}; anything else is a literal brace.
  void brace() {
    size_t j = i_ + 1;
    size_t digits_before = 0, digits_after = 0;
    while (j < p_.size() && std::isdigit(static_cast<unsigned char>(p_[j]))) ++j, ++digits_before;
    bool comma = false;
    if (j < p_.size() && p_[j] == ',') {
      comma = true;
      ++j;
      while (j < p_.size() && std::isdigit(static_cast<unsigned char>(p_[j]))) ++j, ++digits_after;
    }
    const bool valid = j < p_.size() && p_[j] == '}' && (digits_before > 0 || digits_after > 0);
    if (!valid) {
      out_ += "\\{";
      ++i_;
      return;
    }
    out_.push_back('{');
    if (digits_before == 0 && comma) out_.push_back('0');
    out_.append(p_.substr(i_ + 1, j - i_));
    i_ = j + 1;
  }

  std::string_view p_;
  size_t i_ = 0;
  std::string out_;
};

// Per-thread matching scratch: one match-data block (group 0 only) and a JIT stack that can
// grow to 1 MiB for heavily backtracking patterns.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack =
      pcre2_jit_stack_create(size_t{32} * 1024, size_t{1024} * 1024, nullptr);
  MatchScratch() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

Result<std::string> translate_oniguruma(std::string_view pattern) {
  return Translator(pattern).run();
}

Result<Regex> Regex::compile(std::string_view pattern) {
  INFERA_ASSIGN_OR_RETURN(std::string translated, translate_oniguruma(pattern));
  return compile_pcre2(std::string(pattern), std::move(translated));
}

Result<Regex> Regex::literal(std::string_view text) {
  // In PCRE2 a backslash before any ASCII non-alphanumeric character is that literal character.
  std::string translated;
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x80 && !std::isalnum(b)) translated.push_back('\\');
    translated.push_back(c);
  }
  return compile_pcre2(std::string(text), std::move(translated));
}

Result<Regex> Regex::compile_pcre2(std::string source, std::string translated) {
  pcre2_compile_context* ctx = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(ctx, PCRE2_NEWLINE_LF);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // The pattern is checked for UTF-8 here (tokenizer.json is untrusted); subjects are checked by
  // the callers, so matching skips the check.
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, ctx);
  pcre2_compile_context_free(ctx);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return invalid_argument("regex " + source + " does not compile (as PCRE2 " + translated +
                            "): " + reinterpret_cast<const char*>(message) + " at offset " +
                            std::to_string(offset));
  }
  auto holder = std::make_shared<Code>();
  holder->code = code;
  holder->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return Regex(std::move(holder), std::move(source), std::move(translated));
}

int Regex::match_at(std::string_view text, size_t start, size_t& begin, size_t& end) const {
  MatchScratch& s = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc;
  if (code_->jit) {
    rc = pcre2_jit_match(code_->code, subject, text.size(), start, 0, s.data, s.context);
  } else {
    rc = pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, s.data,
                     s.context);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  // rc == 0: the one-pair ovector was too small for the groups, but group 0 is set.
  if (rc < 0) return -1;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  begin = ov[0];
  end = ov[1];
  // \K can report a match that ends before it starts; treat it as empty at the end.
  if (end < begin) begin = end;
  return 1;
}

size_t Regex::char_len_at(std::string_view text, size_t i) {
  return std::min(unicode::char_len(static_cast<unsigned char>(text[i])), text.size() - i);
}

}  // namespace infera::tokenizer
