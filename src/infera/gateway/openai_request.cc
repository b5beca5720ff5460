#include "infera/gateway/openai_request.h"

#include <algorithm>
#include <array>
#include <bit>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <cstring>

#include "infera/kv/block_hash.h"
#include "infera/tokenizer/chat_prompt.h"
#include "infera/tokenizer/prompt_encoder.h"

namespace infera::gateway {
namespace json = boost::json;
using boost::system::error_code;
namespace {

Status field_error(std::string* param, std::string_view field, std::string message) {
  if (param) *param = std::string(field);
  return invalid_argument(std::move(message));
}

// Completions requests are the gateway's hot path when clients send token ids (a 1,000-token
// prompt is about 6 kB of numbers), so they are read with Boost.JSON's event parser straight into
// the typed struct: no DOM with one JSON value per id. The rules are those of a DOM reading:
// invalid JSON anywhere wins over every field error, a later duplicate key replaces an earlier
// one, and field errors are reported in the order model, stream, add_special_tokens, prompt.
class CompletionsHandler {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  explicit CompletionsHandler(const RequestLimits& limits) : limits_(limits) {
    request_.kind = ApiKind::kCompletions;
  }

  // After a successful parse: the request, or the first field error in report order.
  Result<OpenAiRequest> finish(std::string* param) {
    if (!root_is_object_) return invalid_argument("request body must be a JSON object");
    if (!prompt_seen_) set_error(kPromptSlot, "'prompt' is required");
    if (request_.prompt_text && request_.prompt_text->empty() && request_.num_prompts == 1) {
      set_error(kPromptSlot, "'prompt' must not be empty");
    }
    for (size_t slot = 0; slot < errors_.size(); ++slot) {
      if (errors_[slot]) return field_error(param, kSlotNames[slot], std::move(*errors_[slot]));
    }
    return std::move(request_);
  }

  // Whether the array being read is the prompt's token ids (or may become them): a plain
  // integer element below 2^32 may then go to take_id(), which is on_int64() for that case.
  bool reading_ids() const {
    return field_ == Field::kPrompt && depth_ == 2 &&
           (shape_ == Shape::kNone || shape_ == Shape::kIds);
  }
  void take_id(uint32_t id) {
    shape_ = Shape::kIds;
    store_id(id);
  }

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_comment_part(json::string_view, error_code&) { return true; }
  bool on_comment(json::string_view, error_code&) { return true; }
  bool on_number_part(json::string_view, error_code&) { return true; }

  bool on_object_begin(error_code&) {
    if (depth_ == 0) root_is_object_ = true;
    if (depth_ >= 1) not_expected();
    ++depth_;
    return true;
  }
  bool on_object_end(std::size_t, error_code&) {
    --depth_;
    value_done();
    return true;
  }
  bool on_array_begin(error_code&) {
    if (field_ == Field::kPrompt && depth_ == 2 &&
        (shape_ == Shape::kNone || shape_ == Shape::kIdLists)) {
      shape_ = Shape::kIdLists;
      ++elements_;
      in_list_ = true;
    } else if (!(field_ == Field::kPrompt && depth_ == 1)) {
      not_expected();
    }
    ++depth_;
    return true;
  }
  bool on_array_end(std::size_t, error_code&) {
    --depth_;
    if (field_ == Field::kPrompt && depth_ == 2) in_list_ = false;
    if (field_ == Field::kPrompt && depth_ == 1) prompt_array_done();
    value_done();
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, error_code&) {
    if (depth_ == 1) key_.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, error_code&) {
    if (depth_ == 1) {
      key_.append(s.data(), s.size());
      begin_field();
      key_.clear();
    }
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, error_code&) {
    if (wants_string()) string_.append(s.data(), s.size());
    return true;
  }
  bool on_string(json::string_view s, std::size_t, error_code&) {
    if (wants_string()) string_.append(s.data(), s.size());
    if (depth_ == 1 && field_ == Field::kModel) {
      request_.model = std::move(string_);
    } else if (depth_ == 1 && field_ == Field::kPrompt) {
      request_.prompt_text = std::move(string_);
      request_.num_prompts = 1;
    } else if (field_ == Field::kPrompt && depth_ == 2 &&
               (shape_ == Shape::kNone || shape_ == Shape::kStrings)) {
      shape_ = Shape::kStrings;
      if (++elements_ == 1) request_.prompt_text = std::move(string_);
    } else {
      not_expected();
    }
    string_.clear();
    value_done();
    return true;
  }
  bool on_int64(std::int64_t i, json::string_view, error_code&) {
    number(i >= 0 && i <= int64_t{UINT32_MAX}, static_cast<uint32_t>(i));
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, error_code&) {
    number(u <= UINT32_MAX, static_cast<uint32_t>(u));
    return true;
  }
  bool on_double(double, json::string_view, error_code&) {
    number(false, 0);
    return true;
  }
  bool on_bool(bool b, error_code&) {
    if (depth_ == 1 && field_ == Field::kStream) {
      request_.stream = b;
    } else if (depth_ == 1 && field_ == Field::kAddSpecialTokens) {
      request_.add_special_tokens = b;
    } else {
      not_expected();
    }
    value_done();
    return true;
  }
  bool on_null(error_code&) {
    if (depth_ == 1 && field_ == Field::kPrompt) {
      prompt_seen_ = false;  // null is absent, as for every field
    } else if (depth_ != 1) {
      not_expected();
    }
    value_done();
    return true;
  }

 private:
  enum class Field { kOther, kModel, kStream, kAddSpecialTokens, kPrompt };
  // The prompt array's shape, fixed by its first element.
  enum class Shape { kNone, kStrings, kIds, kIdLists, kBad };
  static constexpr size_t kPromptSlot = 3;
  static constexpr std::array<std::string_view, 4> kSlotNames = {"model", "stream",
                                                                 "add_special_tokens", "prompt"};

  bool wants_string() const {
    return (field_ == Field::kModel && depth_ == 1) ||
           (field_ == Field::kPrompt && (depth_ == 1 || (depth_ == 2 && elements_ == 0)));
  }
  void begin_field() {
    field_ = Field::kOther;
    if (key_ == "model") {
      field_ = Field::kModel;
      request_.model.clear();
    } else if (key_ == "stream") {
      field_ = Field::kStream;
      request_.stream = false;
    } else if (key_ == "add_special_tokens") {
      field_ = Field::kAddSpecialTokens;
      request_.add_special_tokens = true;
    } else if (key_ == "prompt") {
      field_ = Field::kPrompt;
      request_.prompt_text.reset();
      request_.prompt_ids.clear();
      request_.num_prompts = 0;
      prompt_seen_ = true;
      shape_ = Shape::kNone;
      in_list_ = false;
      elements_ = 0;
      ids_ = 0;
    }
    if (field_ != Field::kOther) errors_[static_cast<size_t>(field_) - 1].reset();
  }
  // The field's own value (depth 1) has ended.
  void value_done() {
    if (depth_ == 1) field_ = Field::kOther;
  }
  void set_error(size_t slot, std::string message) {
    if (!errors_[slot]) errors_[slot] = std::move(message);
  }
  void number(bool is_id, uint32_t id) {
    if (is_id && reading_ids()) {
      take_id(id);
    } else if (field_ == Field::kPrompt && depth_ == 3 && in_list_ && is_id) {
      if (elements_ == 1) store_id(id);  // a batch routes by its first prompt
    } else {
      not_expected();
    }
    value_done();
  }
  void store_id(uint32_t id) {
    if (++ids_ <= limits_.max_prompt_tokens) request_.prompt_ids.push_back(id);
  }
  // A value or element of a type its place does not allow.
  void not_expected() {
    switch (field_) {
      case Field::kOther: return;
      case Field::kModel:
        if (depth_ == 1) set_error(0, "'model' must be a string");
        return;
      case Field::kStream:
        if (depth_ == 1) set_error(1, "'stream' must be a boolean");
        return;
      case Field::kAddSpecialTokens:
        if (depth_ == 1) set_error(2, "'add_special_tokens' must be a boolean");
        return;
      case Field::kPrompt: break;
    }
    if (depth_ == 1) {
      set_error(kPromptSlot, "'prompt' must be a string or an array");
    } else if (shape_ == Shape::kStrings) {
      set_error(kPromptSlot, "'prompt' mixes strings and other types");
    } else if (shape_ == Shape::kIdLists) {
      set_error(kPromptSlot, "'prompt' must be token id lists");
    } else {
      set_error(kPromptSlot,
                "'prompt' must be a string, a list of strings, token ids, or lists of token ids");
      shape_ = Shape::kBad;
    }
  }
  void prompt_array_done() {
    if (shape_ == Shape::kNone) {
      set_error(kPromptSlot, "'prompt' must not be empty");
      return;
    }
    request_.num_prompts = shape_ == Shape::kIds ? 1 : elements_;
    if (ids_ > limits_.max_prompt_tokens) {
      set_error(kPromptSlot, "prompt has " + std::to_string(ids_) +
                                 " tokens, more than the limit of " +
                                 std::to_string(limits_.max_prompt_tokens));
    }
  }

  OpenAiRequest request_;
  const RequestLimits& limits_;
  uint32_t depth_ = 0;
  bool root_is_object_ = false;
  Field field_ = Field::kOther;
  std::string key_;
  std::string string_;
  bool prompt_seen_ = false;
  Shape shape_ = Shape::kNone;
  bool in_list_ = false;       // inside one of the prompt's token id lists
  uint32_t elements_ = 0;      // the prompt array's elements so far
  uint64_t ids_ = 0;           // ids of the routed prompt so far (stored up to the limit)
  std::array<std::optional<std::string>, 4> errors_;
};

// The reader for the body shape clients send: plain ASCII strings without escapes, integers,
// fractions without exponent, literals, nesting below the depth limit. It drives the same
// handler as Boost.JSON's parser, two to three times as fast on token ids, and accepts nothing
// that parser would reject. Any other body (an escape, a non-ASCII byte, a syntax error, the
// depth limit reached) it leaves to that parser, which then decides and names the error.
class PlainJsonReader {
 public:
  PlainJsonReader(std::string_view body, CompletionsHandler& handler, uint32_t max_depth)
      : p_(body.data()), end_(body.data() + body.size()), h_(handler), max_depth_(max_depth) {}

  // True when the whole body was read into the handler.
  bool read() {
    skip_space();
    if (!value(0)) return false;
    skip_space();
    return p_ == end_;
  }

 private:
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool eat(char c) {
    skip_space();
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    skip_space();
    return true;
  }
  bool value(uint32_t depth) {
    if (p_ == end_) return false;
    switch (*p_) {
      case '{': return object(depth + 1);
      case '[': return array(depth + 1);
      case '"': {
        std::string_view s;
        return string(s) && h_.on_string(s, s.size(), ec_);
      }
      case 't': return literal("true") && h_.on_bool(true, ec_);
      case 'f': return literal("false") && h_.on_bool(false, ec_);
      case 'n': return literal("null") && h_.on_null(ec_);
      default: return number();
    }
  }
  bool object(uint32_t depth) {
    if (depth >= max_depth_) return false;
    ++p_;
    h_.on_object_begin(ec_);
    skip_space();
    if (p_ != end_ && *p_ == '}') {
      ++p_;
      return h_.on_object_end(0, ec_);
    }
    do {
      std::string_view key;
      if (!string(key) || !eat(':')) return false;
      h_.on_key(key, key.size(), ec_);
      if (!value(depth)) return false;
      skip_space();
    } while (p_ != end_ && *p_ == ',' && (++p_, skip_space(), true));
    if (p_ == end_ || *p_ != '}') return false;
    ++p_;
    return h_.on_object_end(0, ec_);
  }
  bool array(uint32_t depth) {
    if (depth >= max_depth_) return false;
    ++p_;
    h_.on_array_begin(ec_);
    skip_space();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      return h_.on_array_end(0, ec_);
    }
    do {
      if (!(h_.reading_ids() && token_ids()) && !value(depth)) return false;
      skip_space();
    } while (p_ != end_ && *p_ == ',' && (++p_, skip_space(), true));
    if (p_ == end_ || *p_ != ']') return false;
    ++p_;
    return h_.on_array_end(0, ec_);
  }
  // The common element of a token id array: 1-7 digits without a leading zero, sign, fraction
  // or exponent, with 8 bytes readable; anything else is left to value(). A run of them
  // separated by "," or ", " is read in this one loop (the bulk of a token-id prompt, without
  // the element loop's dispatch per id); `p_` is left after the last id read. False when the
  // first element is not one.
  bool token_ids() {
    bool any = false;
    for (;;) {
      if (end_ - p_ < 8) return any;
      const size_t n = leading_digits(p_);
      if (n == 0 || n == 8 || (*p_ == '0' && n > 1)) return any;
      const char after = p_[n];
      if (after == '.' || after == 'e' || after == 'E') return any;
      h_.take_id(static_cast<uint32_t>(eight_digits(p_, n)));
      any = true;
      p_ += n;
      const char* next = p_;
      if (end_ - next < 2 || *next != ',') return true;
      ++next;
      if (*next == ' ') ++next;
      if (next == end_ || !is_digit(*next)) return true;
      p_ = next;
    }
  }
  // A string of printable ASCII without escapes.
  bool string(std::string_view& out) {
    if (p_ == end_ || *p_ != '"') return false;
    const char* start = ++p_;
    // Eight bytes at a time up to the first that is not a plain character (a text prompt is
    // kilobytes of them); the byte loop below decides what that one is.
    while (end_ - p_ >= 8) {
      const size_t n = plain_bytes(p_);
      p_ += n;
      if (n < 8) break;
    }
    while (p_ != end_ && *p_ != '"') {
      const auto c = static_cast<unsigned char>(*p_);
      if (c < 0x20 || c >= 0x80 || c == '\\') return false;
      ++p_;
    }
    if (p_ == end_) return false;
    out = std::string_view(start, static_cast<size_t>(p_ - start));
    ++p_;
    return true;
  }
  bool literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) {
      return false;
    }
    p_ += word.size();
    return true;
  }
  // JSON's number grammar. Integers of up to 18 digits are reported as integers, fractions as a
  // double (its value unused); exponents, "-0" and longer integers are left to Boost.JSON.
  bool number() {
    const char* p = p_;
    const bool negative = *p == '-';
    if (negative) ++p;
    if (p == end_ || !is_digit(*p)) return false;
    uint64_t v = 0;
    if (*p == '0') {
      ++p;
      if (negative) return false;
    } else {
      const char* digits = p;
      const size_t n = end_ - p >= 8 ? leading_digits(p) : 0;
      if (n > 0 && n < 8) {
        v = eight_digits(p, n);
        p += n;
      } else {
        while (p != end_ && is_digit(*p)) v = v * 10 + static_cast<uint64_t>(*p++ - '0');
        if (p - digits > 18) return false;
      }
    }
    bool real = false;
    if (p != end_ && *p == '.') {
      ++p;
      if (p == end_ || !is_digit(*p)) return false;
      while (p != end_ && is_digit(*p)) ++p;
      real = true;
    }
    if (p != end_ && (*p == 'e' || *p == 'E')) return false;  // Boost.JSON bounds exponents
    p_ = p;
    if (real) return h_.on_double(0.0, {}, ec_);
    const auto i = static_cast<int64_t>(v);
    return h_.on_int64(negative ? -i : i, {}, ec_);
  }
  // How many of the 8 bytes at `p` come before the first quote, backslash, control character
  // or non-ASCII byte (8: none is). Each test below flags such a byte exactly when no lower
  // byte was flagged (a borrow only reaches the bytes after a flagged one), so the lowest flag
  // of their union is the first such byte.
  static size_t plain_bytes(const char* p) {
    uint64_t x;
    std::memcpy(&x, p, 8);
    constexpr uint64_t kOnes = 0x0101010101010101ULL, kHigh = 0x8080808080808080ULL;
    const auto zero_bytes = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
    const uint64_t flags = ((x - 0x20 * kOnes) & ~x & kHigh)  // below 0x20
                           | zero_bytes(x ^ ('"' * kOnes)) | zero_bytes(x ^ ('\\' * kOnes)) |
                           (x & kHigh);  // not ASCII
    // Little-endian loads, as leading_digits() below: the lowest set byte is the first one.
    return flags == 0 ? 8 : static_cast<size_t>(std::countr_zero(flags)) / 8;
  }
  // Token ids are the bulk of a body: up to 7 digits are read from one 8-byte load without a
  // branch per digit (the SWAR method of Lemire's "Faster parsing of integers"). `p` has 8
  // readable bytes. The count of leading ASCII digits, 0-8:
  static size_t leading_digits(const char* p) {
    uint64_t chunk;
    std::memcpy(&chunk, p, 8);
    constexpr uint64_t kHigh = 0xF0F0F0F0F0F0F0F0ULL, kThree = 0x3030303030303030ULL;
    // A byte is a digit when its high nibble is 3 before and after adding 6 (0x30-0x39). A
    // carry out of a non-digit byte only reaches the bytes after it, which do not count.
    const uint64_t not_digit =
        ((chunk & kHigh) ^ kThree) | (((chunk + 0x0606060606060606ULL) & kHigh) ^ kThree);
    return not_digit == 0 ? 8 : static_cast<size_t>(std::countr_zero(not_digit)) / 8;
  }
  // The value of the `n` (1-7) digits at `p`.
  static uint64_t eight_digits(const char* p, size_t n) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v -= 0x3030303030303030ULL;  // a borrow only leaves the bytes after the digits
    v <<= 8 * (8 - n);           // the digits become the low end of an 8-digit number
    v = v * 10 + (v >> 8);
    v = (((v & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
         (((v >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >>
        32;
    return v & 0xFFFFFFFFULL;
  }

  const char* p_;
  const char* end_;
  CompletionsHandler& h_;
  uint32_t max_depth_;
  error_code ec_;
};

Status json_error(boost::system::error_code ec, const RequestLimits& limits) {
  if (ec == json::error::too_deep) {
    return invalid_argument("request JSON nests deeper than " +
                            std::to_string(limits.max_json_depth) + " levels");
  }
  return invalid_argument("request body is not valid JSON: " + ec.message());
}

}  // namespace

namespace detail {

Result<OpenAiRequest> parse_completions_by_boost(std::string_view body,
                                                 const RequestLimits& limits, std::string* param) {
  json::parse_options opts;
  opts.max_depth = limits.max_json_depth;
  json::basic_parser<CompletionsHandler> parser(opts, limits);
  error_code ec;
  const size_t n = parser.write_some(false, body.data(), body.size(), ec);
  if (!ec && n < body.size()) ec = json::error::extra_data;
  if (ec) return json_error(ec, limits);
  return parser.handler().finish(param);
}

}  // namespace detail

namespace {

Result<OpenAiRequest> parse_completions(std::string_view body, const RequestLimits& limits,
                                        std::string* param) {
  CompletionsHandler handler(limits);
  if (PlainJsonReader(body, handler, limits.max_json_depth).read()) return handler.finish(param);
  return detail::parse_completions_by_boost(body, limits, param);
}

// A body that must be one JSON object within `limits`' depth.
Result<json::value> parse_object(std::string_view body, const RequestLimits& limits) {
  json::parse_options opts;
  opts.max_depth = limits.max_json_depth;
  boost::system::error_code ec;
  json::value root = json::parse(body, ec, {}, opts);
  if (ec) return json_error(ec, limits);
  if (!root.is_object()) return invalid_argument("request body must be a JSON object");
  return root;
}

// The body's "model": "" when absent or null.
Result<std::string> model_field(const json::object& o, std::string* param) {
  const json::value* m = o.if_contains("model");
  if (m == nullptr || m->is_null()) return std::string();
  if (!m->is_string()) return field_error(param, "model", "'model' must be a string");
  return std::string(m->get_string());
}

// A chat prompt (tokenizer::ChatPrompt) into the request, with its media digest.
void set_chat_prompt(OpenAiRequest& r, tokenizer::ChatPrompt chat) {
  r.messages = std::move(chat.messages);
  if (const tokenizer::MediaParts media = tokenizer::media_parts(r.messages); !media.bytes.empty()) {
    r.media_digest = kv::media_digest(media.bytes);
    r.media_first_message = media.first_message;
  }
  r.tools = std::move(chat.tools);
  r.add_generation_prompt = chat.add_generation_prompt;
  r.continue_final_message = chat.continue_final_message;
  r.chat_template_kwargs = std::move(chat.chat_template_kwargs);
  r.add_special_tokens = chat.add_special_tokens;
  r.num_prompts = 1;
}

}  // namespace

Result<OpenAiRequest> parse_openai_request(ApiKind kind, std::string_view body,
                                           const RequestLimits& limits, std::string* param) {
  if (kind == ApiKind::kCompletions) return parse_completions(body, limits, param);
  INFERA_ASSIGN_OR_RETURN(const json::value root, parse_object(body, limits));
  const json::object& o = root.get_object();
  OpenAiRequest r;
  r.kind = kind;
  INFERA_ASSIGN_OR_RETURN(r.model, model_field(o, param));
  if (const json::value* s = o.if_contains("stream"); s && !s->is_null()) {
    if (!s->is_bool()) return field_error(param, "stream", "'stream' must be a boolean");
    r.stream = s->get_bool();
  }
  // The chat prompt's fields, read by the parser the simulated engine uses too.
  INFERA_ASSIGN_OR_RETURN(tokenizer::ChatPrompt chat,
                          tokenizer::parse_chat_prompt(o, limits.max_messages, param));
  set_chat_prompt(r, std::move(chat));
  return r;
}

Result<ResponsesRequest> parse_responses_request(std::string_view body, const RequestLimits& limits,
                                                 std::string* param) {
  INFERA_ASSIGN_OR_RETURN(const json::value root, parse_object(body, limits));
  const json::object& o = root.get_object();
  ResponsesRequest out;
  INFERA_ASSIGN_OR_RETURN(out.model, model_field(o, param));
  INFERA_ASSIGN_OR_RETURN(tokenizer::ResponsesPrompt prompt,
                          tokenizer::parse_responses_prompt(o, limits.max_messages, param));
  out.previous_response_id = std::move(prompt.previous_response_id);
  if (prompt.chat) {
    OpenAiRequest r;
    r.kind = ApiKind::kChatCompletions;
    r.model = out.model;
    set_chat_prompt(r, std::move(*prompt.chat));
    out.chat = std::move(r);
  }
  return out;
}

Result<std::string> parse_model_field(std::string_view body, const RequestLimits& limits,
                                      std::string* param) {
  INFERA_ASSIGN_OR_RETURN(const json::value root, parse_object(body, limits));
  return model_field(root.get_object(), param);
}

Result<std::vector<uint32_t>> encode_prompt(const tokenizer::PromptEncoder& encoder,
                                            const OpenAiRequest& r) {
  if (!r.prompt_ids.empty()) return r.prompt_ids;
  Result<tokenizer::EncodedPrompt> encoded =
      r.kind == ApiKind::kChatCompletions
          ? encoder.encode_chat(r.messages, r.tools, r.chat_template_kwargs,
                                {.add_generation_prompt = r.add_generation_prompt,
                                 .continue_final_message = r.continue_final_message,
                                 .add_special_tokens = r.add_special_tokens})
          : encoder.encode_text(r.prompt_text.value_or(""), r.add_special_tokens);
  if (!encoded.ok()) return encoded.status();
  return std::move(encoded->ids);
}

size_t tokens_before_media(const tokenizer::PromptEncoder& encoder, const OpenAiRequest& r,
                           std::span<const uint32_t> ids) {
  if (r.media_digest == 0) return ids.size();
  if (r.media_first_message == 0 || r.media_first_message > r.messages.size()) return 0;
  const json::array before(r.messages.begin(),
                           r.messages.begin() + static_cast<std::ptrdiff_t>(r.media_first_message));
  Result<tokenizer::EncodedPrompt> encoded =
      encoder.encode_chat(before, r.tools, r.chat_template_kwargs,
                          {.add_generation_prompt = false,
                           .continue_final_message = false,
                           .add_special_tokens = r.add_special_tokens});
  if (!encoded.ok()) return 0;
  const std::vector<uint32_t>& p = encoded->ids;
  const size_t n = std::min(p.size(), ids.size());
  return static_cast<size_t>(std::mismatch(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n), ids.begin()).first -
                             p.begin());
}

}  // namespace infera::gateway
