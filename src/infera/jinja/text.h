// Python `str` semantics on UTF-8 bytes (internal to the jinja module): code point decoding,
// the character classes Python's str methods and `re` use (whitespace, printable, cased, word),
// and case conversion (utf8proc's mappings plus Unicode's special casings, as CPython applies
// them). Pure functions, any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace infera::jinja::text {

// Decodes the code point at s[*i] and advances *i. A byte that does not start a valid UTF-8
// sequence decodes to U+DC80..U+DCFF (Python's surrogateescape), advancing by one, and
// append_utf8 turns it back into that byte: invalid input round-trips and always makes progress.
char32_t decode(std::string_view s, size_t* i);
void append_utf8(std::string* out, char32_t c);
// Number of code points (Python len()).
size_t length(std::string_view s);
bool is_ascii(std::string_view s);
// Byte offset of code point `index` (0 <= index <= length(s)).
size_t byte_offset(std::string_view s, size_t index);

bool is_space(char32_t c);      // str.isspace / re \s
bool is_printable(char32_t c);  // str.isprintable (repr escapes the others)
bool is_cased(char32_t c);      // Lu, Ll, Lt
bool is_upper(char32_t c);
bool is_lower(char32_t c);
bool is_alpha(char32_t c);       // L*
bool is_decimal(char32_t c);     // Nd
bool is_numeric(char32_t c);     // N*
bool is_word(char32_t c);        // re \w: alnum or '_'
bool is_line_break(char32_t c);  // str.splitlines boundaries (\r\n is handled by the caller)
// One-to-one (simple) case mappings.
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
char32_t to_title(char32_t c);

// Python's full case conversions: special casings to several code points (ß -> SS), U+0130 and
// the final sigma rule of str.lower.
void append_upper(std::string* out, char32_t c);
void append_title(std::string* out, char32_t c);
std::string upper(std::string_view s);       // str.upper
std::string lower(std::string_view s);       // str.lower
std::string title(std::string_view s);       // str.title
std::string capitalize(std::string_view s);  // str.capitalize

// Strip Python whitespace from one or both ends.
std::string_view strip_space(std::string_view s, bool left, bool right);
// Strip the code points in `chars` from one or both ends (str.strip(chars)).
std::string_view strip_chars(std::string_view s, std::string_view chars, bool left, bool right);
// str.splitlines(keepends).
std::vector<std::string_view> split_lines(std::string_view s, bool keepends);
// str.center(width, fill), `fill` one code point.
std::string center(std::string_view s, size_t width, std::string_view fill);
// True when s is non-empty and all whitespace.
bool all_space(std::string_view s);
// Length in bytes of the whitespace code point at s[i], or 0.
size_t space_at(std::string_view s, size_t i);

}  // namespace infera::jinja::text
