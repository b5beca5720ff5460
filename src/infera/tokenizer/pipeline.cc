#include "infera/tokenizer/pipeline.h"

#include <algorithm>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <cctype>
#include <exception>
#include <unordered_set>
#include <string>
#include <utility>
#include <vector>

#include "infera/tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

namespace json = boost::json;

// Token ids index flat tables, so a file cannot be allowed to name an id in the billions; real
// vocabularies stay below a million.
constexpr uint64_t kMaxTokenId = (uint64_t{1} << 24) - 1;

// Error context: every message names the source and the JSON path of the offending field.
class Loader {
 public:
  explicit Loader(std::string_view origin) : origin_(origin) {}

  Status error(std::string_view path, std::string_view what) const {
    return invalid_argument(std::string(origin_) + ": " + std::string(path) + ": " +
                            std::string(what));
  }
  Status unsupported(std::string_view path, std::string_view kind, std::string_view type) const {
    return unimplemented(std::string(origin_) + ": " + std::string(path) + ": " +
                         std::string(kind) + " type \"" + std::string(type) +
                         "\" is not supported");
  }

  Result<const json::object*> object(const json::value& v, std::string_view path) const {
    if (!v.is_object()) return error(path, "expected an object");
    return &v.get_object();
  }

  // A string field; `fallback` when absent or null (error when absent and no fallback).
  Result<std::string> string_field(const json::object& o, std::string_view key,
                                   std::string_view path,
                                   std::optional<std::string_view> fallback = std::nullopt) const {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) {
      if (fallback) return std::string(*fallback);
      return error(path, "missing string field \"" + std::string(key) + "\"");
    }
    if (!v->is_string()) return error(path, "field \"" + std::string(key) + "\" is not a string");
    return std::string(v->get_string());
  }

  Result<std::optional<std::string>> optional_string(const json::object& o, std::string_view key,
                                                     std::string_view path) const {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) return std::optional<std::string>();
    if (!v->is_string()) return error(path, "field \"" + std::string(key) + "\" is not a string");
    return std::optional<std::string>(std::string(v->get_string()));
  }

  Result<bool> bool_field(const json::object& o, std::string_view key, std::string_view path,
                          bool fallback) const {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_bool()) return error(path, "field \"" + std::string(key) + "\" is not a boolean");
    return v->get_bool();
  }

  Result<uint64_t> uint_field(const json::object& o, std::string_view key, std::string_view path,
                              uint64_t fallback) const {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) return fallback;
    if (v->is_uint64()) return v->get_uint64();
    if (v->is_int64() && v->get_int64() >= 0) return static_cast<uint64_t>(v->get_int64());
    return error(path, "field \"" + std::string(key) + "\" is not a non-negative integer");
  }

  // A single character field (Metaspace replacement, Strip content).
  Result<char32_t> char_field(const json::object& o, std::string_view key, std::string_view path,
                              char32_t fallback) const {
    INFERA_ASSIGN_OR_RETURN(std::optional<std::string> s, optional_string(o, key, path));
    if (!s) return fallback;
    if (s->empty() || !unicode::is_valid_utf8(*s) ||
        unicode::char_len(static_cast<unsigned char>((*s)[0])) != s->size()) {
      return error(path, "field \"" + std::string(key) + "\" must be exactly one character");
    }
    size_t i = 0;
    return unicode::next_char(*s, i);
  }

  // {"String": s} or {"Regex": r}.
  Result<Regex> pattern(const json::object& o, std::string_view path) const {
    const json::value* p = o.if_contains("pattern");
    if (p == nullptr || !p->is_object()) return error(path, "missing \"pattern\" object");
    const json::object& po = p->get_object();
    if (const json::value* s = po.if_contains("String")) {
      if (!s->is_string()) return error(path, "pattern.String is not a string");
      auto r = Regex::literal(std::string_view(s->get_string()));
      if (!r.ok()) return error(path, r.status().message());
      return std::move(r).value();
    }
    if (const json::value* s = po.if_contains("Regex")) {
      if (!s->is_string()) return error(path, "pattern.Regex is not a string");
      auto r = Regex::compile(std::string_view(s->get_string()));
      if (!r.ok()) return error(path, r.status().message());
      return std::move(r).value();
    }
    return error(path, "pattern must be {\"String\": ...} or {\"Regex\": ...}");
  }

  Result<std::string> type_of(const json::object& o, std::string_view path) const {
    return string_field(o, "type", path);
  }

  // ---- normalizers ----

  Result<std::unique_ptr<Normalizer>> normalizer(const json::value& v, std::string_view path) const {
    INFERA_ASSIGN_OR_RETURN(const json::object* o, object(v, path));
    INFERA_ASSIGN_OR_RETURN(std::string type, type_of(*o, path));
    if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::Form::kNfc));
    if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::Form::kNfd));
    if (type == "NFKC") {
      return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::Form::kNfkc));
    }
    if (type == "NFKD") {
      return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::Form::kNfkd));
    }
    if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
    if (type == "Replace") {
      INFERA_ASSIGN_OR_RETURN(Regex p, pattern(*o, path));
      INFERA_ASSIGN_OR_RETURN(std::string content, string_field(*o, "content", path));
      return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(p), std::move(content)));
    }
    if (type == "Prepend") {
      INFERA_ASSIGN_OR_RETURN(std::string prefix, string_field(*o, "prepend", path));
      return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prefix)));
    }
    if (type == "Strip") {
      INFERA_ASSIGN_OR_RETURN(bool left, bool_field(*o, "strip_left", path, true));
      INFERA_ASSIGN_OR_RETURN(bool right, bool_field(*o, "strip_right", path, true));
      return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
    }
    if (type == "Sequence") {
      const json::value* list = o->if_contains("normalizers");
      if (list == nullptr || !list->is_array()) return error(path, "missing \"normalizers\" array");
      std::vector<std::unique_ptr<Normalizer>> steps;
      for (size_t i = 0; i < list->get_array().size(); ++i) {
        const std::string sub = std::string(path) + ".normalizers[" + std::to_string(i) + "]";
        INFERA_ASSIGN_OR_RETURN(auto step, normalizer(list->get_array()[i], sub));
        steps.push_back(std::move(step));
      }
      return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(steps)));
    }
    return unsupported(path, "normalizer", type);
  }

  // ---- pre-tokenizers ----

  Result<SplitBehavior> behavior(const json::object& o, std::string_view path,
                                 SplitBehavior fallback) const {
    INFERA_ASSIGN_OR_RETURN(std::optional<std::string> b, optional_string(o, "behavior", path));
    if (!b) return fallback;
    if (*b == "Removed") return SplitBehavior::kRemoved;
    if (*b == "Isolated") return SplitBehavior::kIsolated;
    if (*b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (*b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (*b == "Contiguous") return SplitBehavior::kContiguous;
    return error(path, "unknown split behavior \"" + *b + "\"");
  }

  Result<MetaspacePreTokenizer::Prepend> prepend_scheme(const json::object& o,
                                                        std::string_view path) const {
    INFERA_ASSIGN_OR_RETURN(std::optional<std::string> s, optional_string(o, "prepend_scheme", path));
    MetaspacePreTokenizer::Prepend scheme = MetaspacePreTokenizer::Prepend::kAlways;
    if (s) {
      if (*s == "always") {
        scheme = MetaspacePreTokenizer::Prepend::kAlways;
      } else if (*s == "first") {
        scheme = MetaspacePreTokenizer::Prepend::kFirst;
      } else if (*s == "never") {
        scheme = MetaspacePreTokenizer::Prepend::kNever;
      } else {
        return error(path, "unknown prepend_scheme \"" + *s + "\"");
      }
    }
    // Older files carry add_prefix_space; false means "never" (and contradicts any other scheme).
    const json::value* legacy = o.if_contains("add_prefix_space");
    if (legacy != nullptr && legacy->is_bool() && !legacy->get_bool()) {
      if (s && scheme != MetaspacePreTokenizer::Prepend::kNever) {
        return error(path, "add_prefix_space does not match declared prepend_scheme");
      }
      scheme = MetaspacePreTokenizer::Prepend::kNever;
    }
    return scheme;
  }

  // `last`: this pre-tokenizer runs last, so a ByteLevel here may hand raw bytes to the model.
  Result<std::unique_ptr<PreTokenizer>> pre_tokenizer(const json::value& v, std::string_view path,
                                                      bool last, bool raw_bytes) {
    INFERA_ASSIGN_OR_RETURN(const json::object* o, object(v, path));
    INFERA_ASSIGN_OR_RETURN(std::string type, type_of(*o, path));
    if (type == "Split") {
      INFERA_ASSIGN_OR_RETURN(Regex p, pattern(*o, path));
      INFERA_ASSIGN_OR_RETURN(SplitBehavior b, behavior(*o, path, SplitBehavior::kIsolated));
      INFERA_ASSIGN_OR_RETURN(bool invert, bool_field(*o, "invert", path, false));
      if (!o->contains("behavior")) return error(path, "missing \"behavior\"");
      std::unique_ptr<FastSplit> fast;
      const json::value* pv = o->if_contains("pattern");
      if (pv != nullptr && pv->is_object()) {
        if (const json::value* r = pv->get_object().if_contains("Regex"); r != nullptr && r->is_string()) {
          fast = FastSplit::for_pattern(std::string_view(r->get_string()));
        }
      }
      return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(p), b, invert, std::move(fast)));
    }
    if (type == "ByteLevel") {
      INFERA_ASSIGN_OR_RETURN(bool prefix, bool_field(*o, "add_prefix_space", path, false));
      INFERA_ASSIGN_OR_RETURN(bool use_regex, bool_field(*o, "use_regex", path, true));
      std::unique_ptr<Regex> split;
      if (use_regex) {
        // The GPT-2 pattern the Rust crate compiles for ByteLevel.
        auto r = Regex::compile(
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
        if (!r.ok()) return error(path, r.status().message());
        split = std::make_unique<Regex>(std::move(r).value());
      }
      const bool map_bytes = !(last && raw_bytes);
      if (!map_bytes) fused_byte_level_ = true;
      return std::unique_ptr<PreTokenizer>(
          new ByteLevelPreTokenizer(prefix, std::move(split), map_bytes));
    }
    if (type == "Metaspace") {
      INFERA_ASSIGN_OR_RETURN(char32_t replacement, char_field(*o, "replacement", path, 0x2581));
      INFERA_ASSIGN_OR_RETURN(auto scheme, prepend_scheme(*o, path));
      INFERA_ASSIGN_OR_RETURN(bool split, bool_field(*o, "split", path, true));
      if (scheme == MetaspacePreTokenizer::Prepend::kFirst) origin_sensitive_ = true;
      return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(replacement, scheme, split));
    }
    if (type == "Digits") {
      INFERA_ASSIGN_OR_RETURN(bool individual, bool_field(*o, "individual_digits", path, false));
      return std::unique_ptr<PreTokenizer>(new CharSplitPreTokenizer(
          CharSplitPreTokenizer::Kind::kDigit,
          individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous));
    }
    if (type == "Punctuation") {
      INFERA_ASSIGN_OR_RETURN(SplitBehavior b, behavior(*o, path, SplitBehavior::kIsolated));
      return std::unique_ptr<PreTokenizer>(
          new CharSplitPreTokenizer(CharSplitPreTokenizer::Kind::kPunctuation, b));
    }
    if (type == "Whitespace") {
      // Rust: \w+|[^\w\s]+ with the regex crate's Unicode \w and \s, matches kept.
      auto r = Regex::compile(
          "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]+|"
          "[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}\\p{White_Space}]+");
      if (!r.ok()) return error(path, r.status().message());
      return std::unique_ptr<PreTokenizer>(
          new SplitPreTokenizer(std::move(r).value(), SplitBehavior::kRemoved, /*invert=*/true));
    }
    if (type == "WhitespaceSplit") {
      return std::unique_ptr<PreTokenizer>(new CharSplitPreTokenizer(
          CharSplitPreTokenizer::Kind::kWhiteSpace, SplitBehavior::kRemoved));
    }
    if (type == "Sequence") {
      const json::value* list = o->if_contains("pretokenizers");
      if (list == nullptr || !list->is_array()) return error(path, "missing \"pretokenizers\" array");
      const json::array& a = list->get_array();
      std::vector<std::unique_ptr<PreTokenizer>> steps;
      for (size_t i = 0; i < a.size(); ++i) {
        const std::string sub = std::string(path) + ".pretokenizers[" + std::to_string(i) + "]";
        INFERA_ASSIGN_OR_RETURN(auto step, pre_tokenizer(a[i], sub, last && i + 1 == a.size(), raw_bytes));
        steps.push_back(std::move(step));
      }
      return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(steps)));
    }
    return unsupported(path, "pre_tokenizer", type);
  }

  // Whether the pre-tokenizer ends with a ByteLevel step (top level or last of a Sequence).
  static bool ends_with_byte_level(const json::value& v) {
    if (!v.is_object()) return false;
    const json::object& o = v.get_object();
    const json::value* t = o.if_contains("type");
    if (t == nullptr || !t->is_string()) return false;
    if (t->get_string() == "ByteLevel") return true;
    if (t->get_string() == "Sequence") {
      const json::value* list = o.if_contains("pretokenizers");
      if (list == nullptr || !list->is_array() || list->get_array().empty()) return false;
      return ends_with_byte_level(list->get_array().back());
    }
    return false;
  }

  // ---- model ----

  // The model object of the DOM has empty "vocab" and "merges": those were streamed into
  // `p.vocab` and `merges` while parsing (see ModelCapture).
  Status model(const json::value& v, Pipeline& p, const MergeList& merges, bool raw_bytes,
               size_t word_cache_entries) {
    const std::string path = "model";
    INFERA_ASSIGN_OR_RETURN(const json::object* o, object(v, path));
    INFERA_ASSIGN_OR_RETURN(std::optional<std::string> type, optional_string(*o, "type", path));
    if (!type) {
      // Untagged (older files): BPE is the one model with merges.
      if (!o->contains("merges")) return unsupported(path, "model", "(untagged, without merges)");
      type = "BPE";
    }
    if (*type != "BPE") return unsupported(path, "model", *type);
    if (const json::value* d = o->if_contains("dropout");
        d != nullptr && !d->is_null() && !(d->is_number() && d->to_number<double>() == 0.0)) {
      return error(path, "BPE dropout is random at encode time and not supported");
    }
    if (!o->contains("vocab")) return error(path, "missing \"vocab\" object");
    BpeOptions opt;
    INFERA_ASSIGN_OR_RETURN(opt.unk_token, optional_string(*o, "unk_token", path));
    INFERA_ASSIGN_OR_RETURN(auto prefix, optional_string(*o, "continuing_subword_prefix", path));
    INFERA_ASSIGN_OR_RETURN(auto suffix, optional_string(*o, "end_of_word_suffix", path));
    opt.continuing_subword_prefix = prefix.value_or("");
    opt.end_of_word_suffix = suffix.value_or("");
    INFERA_ASSIGN_OR_RETURN(opt.fuse_unk, bool_field(*o, "fuse_unk", path, false));
    INFERA_ASSIGN_OR_RETURN(opt.byte_fallback, bool_field(*o, "byte_fallback", path, false));
    INFERA_ASSIGN_OR_RETURN(opt.ignore_merges, bool_field(*o, "ignore_merges", path, false));
    opt.raw_bytes = raw_bytes;
    opt.word_cache_entries = word_cache_entries;
    auto bpe = Bpe::create(p.vocab, merges, std::move(opt));
    if (!bpe.ok()) return error(path, bpe.status().message());
    p.model = std::move(bpe).value();
    return ok_status();
  }

  // Whether the model can consume raw bytes for a final ByteLevel: every byte's stand-in
  // character must be a token and no prefix/suffix decorates characters.
  static bool model_takes_raw_bytes(const json::value& v, const Vocab& vocab) {
    if (!v.is_object()) return false;
    const json::object& o = v.get_object();
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json::value* s = o.if_contains(key);
      if (s != nullptr && s->is_string() && !s->get_string().empty()) return false;
    }
    for (int b = 0; b < 256; ++b) {
      std::string c;
      unicode::append_utf8(c, byte_level_char(static_cast<uint8_t>(b)));
      if (!vocab.find(c)) return false;
    }
    return true;
  }

  // ---- post-processors ----

  Result<std::unique_ptr<PostProcessor>> post_processor(const json::value& v, std::string_view path,
                                                        const Pipeline& p) const {
    INFERA_ASSIGN_OR_RETURN(const json::object* o, object(v, path));
    INFERA_ASSIGN_OR_RETURN(std::string type, type_of(*o, path));
    if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(new NoopPostProcessor());
    if (type == "Sequence") {
      const json::value* list = o->if_contains("processors");
      if (list == nullptr || !list->is_array()) return error(path, "missing \"processors\" array");
      std::vector<std::unique_ptr<PostProcessor>> steps;
      for (size_t i = 0; i < list->get_array().size(); ++i) {
        const std::string sub = std::string(path) + ".processors[" + std::to_string(i) + "]";
        INFERA_ASSIGN_OR_RETURN(auto step, post_processor(list->get_array()[i], sub, p));
        steps.push_back(std::move(step));
      }
      return std::unique_ptr<PostProcessor>(new SequencePostProcessor(std::move(steps)));
    }
    if (type == "TemplateProcessing") return template_processing(*o, path);
    return unsupported(path, "post_processor", type);
  }

  Result<std::unique_ptr<PostProcessor>> template_processing(const json::object& o,
                                                             std::string_view path) const {
    // special_tokens: {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}
    std::vector<std::pair<std::string, std::vector<TokenId>>> specials;
    if (const json::value* st = o.if_contains("special_tokens"); st != nullptr && !st->is_null()) {
      if (!st->is_object()) return error(path, "\"special_tokens\" is not an object");
      for (const auto& kv : st->get_object()) {
        if (!kv.value().is_object()) return error(path, "special_tokens entry is not an object");
        const json::value* ids = kv.value().get_object().if_contains("ids");
        if (ids == nullptr || !ids->is_array()) return error(path, "special_tokens entry without \"ids\"");
        std::vector<TokenId> list;
        for (const json::value& id : ids->get_array()) {
          if ((!id.is_uint64() && !(id.is_int64() && id.get_int64() >= 0)) ||
              id.to_number<uint64_t>() > kMaxTokenId) {
            return error(path, "special token id is not a valid token id");
          }
          list.push_back(static_cast<TokenId>(id.to_number<uint64_t>()));
        }
        INFERA_ASSIGN_OR_RETURN(std::string name,
                                string_field(kv.value().get_object(), "id", path, kv.key()));
        specials.emplace_back(std::move(name), std::move(list));
      }
    }
    const json::value* single = o.if_contains("single");
    if (single == nullptr) return error(path, "missing \"single\" template");
    // Pieces: list form [{"SpecialToken": {"id": ..}}, {"Sequence": {"id": "A"}}] or the string
    // form "<bos> $A" ($A / $B / $ with an optional ":type_id").
    struct Item {
      bool sequence_a = false;
      bool sequence_b = false;
      std::string special;
    };
    std::vector<Item> items;
    if (single->is_string()) {
      const std::string_view s = single->get_string();
      size_t i = 0;
      while (i < s.size()) {
        while (i < s.size() && s[i] == ' ') ++i;
        size_t j = i;
        while (j < s.size() && s[j] != ' ') ++j;
        if (j > i) {
          std::string_view piece = s.substr(i, j - i);
          if (piece.starts_with('$')) {
            const std::string_view id = piece.substr(1, piece.find(':') == std::string_view::npos
                                                            ? std::string_view::npos
                                                            : piece.find(':') - 1);
            Item item;
            if (id.empty() || id == "A" || id == "a" || std::isdigit(static_cast<unsigned char>(id[0]))) {
              item.sequence_a = true;
            } else if (id == "B" || id == "b") {
              item.sequence_b = true;
            } else {
              return error(path, "unknown sequence \"" + std::string(piece) + "\" in template");
            }
            items.push_back(item);
          } else {
            Item item;
            item.special = std::string(piece.substr(0, piece.find(':')));
            items.push_back(item);
          }
        }
        i = j;
      }
    } else if (single->is_array()) {
      for (const json::value& piece : single->get_array()) {
        if (!piece.is_object()) return error(path, "template piece is not an object");
        const json::object& po = piece.get_object();
        if (const json::value* st = po.if_contains("SpecialToken"); st != nullptr && st->is_object()) {
          INFERA_ASSIGN_OR_RETURN(std::string id, string_field(st->get_object(), "id", path));
          items.push_back(Item{false, false, std::move(id)});
        } else if (const json::value* sq = po.if_contains("Sequence"); sq != nullptr && sq->is_object()) {
          INFERA_ASSIGN_OR_RETURN(std::string id, string_field(sq->get_object(), "id", path));
          if (id == "A") {
            items.push_back(Item{true, false, {}});
          } else if (id == "B") {
            items.push_back(Item{false, true, {}});
          } else {
            return error(path, "unknown sequence id \"" + id + "\"");
          }
        } else {
          return error(path, "template piece must be SpecialToken or Sequence");
        }
      }
    } else {
      return error(path, "\"single\" must be a list or a string");
    }
    std::vector<TokenId> before, after;
    bool seen_a = false;
    for (const Item& item : items) {
      if (item.sequence_a) {
        seen_a = true;
        continue;
      }
      if (item.sequence_b) continue;  // a single sequence has no B
      const auto it = std::find_if(specials.begin(), specials.end(),
                                   [&](const auto& s) { return s.first == item.special; });
      if (it == specials.end()) {
        return error(path, "template names special token \"" + item.special +
                               "\" missing from special_tokens");
      }
      auto& target = seen_a ? after : before;
      target.insert(target.end(), it->second.begin(), it->second.end());
    }
    return std::unique_ptr<PostProcessor>(new TemplatePostProcessor(std::move(before), std::move(after)));
  }

  // ---- decoders ----

  Result<std::unique_ptr<Decoder>> decoder(const json::value& v, std::string_view path) {
    INFERA_ASSIGN_OR_RETURN(const json::object* o, object(v, path));
    INFERA_ASSIGN_OR_RETURN(std::string type, type_of(*o, path));
    if (type == "ByteLevel") {
      byte_level_decoder_ = true;
      return std::unique_ptr<Decoder>(new ByteLevelDecoder());
    }
    if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
    if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
    if (type == "Replace") {
      INFERA_ASSIGN_OR_RETURN(Regex p, pattern(*o, path));
      INFERA_ASSIGN_OR_RETURN(std::string content, string_field(*o, "content", path));
      return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(p), std::move(content)));
    }
    if (type == "Strip") {
      INFERA_ASSIGN_OR_RETURN(char32_t content, char_field(*o, "content", path, ' '));
      INFERA_ASSIGN_OR_RETURN(uint64_t start, uint_field(*o, "start", path, 0));
      INFERA_ASSIGN_OR_RETURN(uint64_t stop, uint_field(*o, "stop", path, 0));
      return std::unique_ptr<Decoder>(new StripDecoder(content, start, stop));
    }
    if (type == "Metaspace") {
      INFERA_ASSIGN_OR_RETURN(char32_t replacement, char_field(*o, "replacement", path, 0x2581));
      INFERA_ASSIGN_OR_RETURN(auto scheme, prepend_scheme(*o, path));
      return std::unique_ptr<Decoder>(
          new MetaspaceDecoder(replacement, scheme != MetaspacePreTokenizer::Prepend::kNever));
    }
    if (type == "Sequence") {
      const json::value* list = o->if_contains("decoders");
      if (list == nullptr || !list->is_array()) return error(path, "missing \"decoders\" array");
      std::vector<std::unique_ptr<Decoder>> steps;
      for (size_t i = 0; i < list->get_array().size(); ++i) {
        const std::string sub = std::string(path) + ".decoders[" + std::to_string(i) + "]";
        INFERA_ASSIGN_OR_RETURN(auto step, decoder(list->get_array()[i], sub));
        steps.push_back(std::move(step));
      }
      return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(steps)));
    }
    return unsupported(path, "decoder", type);
  }

  // ---- added tokens ----

  Result<std::vector<AddedToken>> added_tokens(const json::value* v) const {
    std::vector<AddedToken> out;
    if (v == nullptr || v->is_null()) return out;
    if (!v->is_array()) return error("added_tokens", "expected an array");
    for (size_t i = 0; i < v->get_array().size(); ++i) {
      const std::string path = "added_tokens[" + std::to_string(i) + "]";
      INFERA_ASSIGN_OR_RETURN(const json::object* o, object(v->get_array()[i], path));
      AddedToken t;
      INFERA_ASSIGN_OR_RETURN(t.content, string_field(*o, "content", path));
      INFERA_ASSIGN_OR_RETURN(uint64_t id, uint_field(*o, "id", path, UINT64_MAX));
      if (id == UINT64_MAX) return error(path, "missing \"id\"");
      if (id > kMaxTokenId) return error(path, "id " + std::to_string(id) + " is too large");
      t.id = static_cast<TokenId>(id);
      INFERA_ASSIGN_OR_RETURN(t.special, bool_field(*o, "special", path, false));
      // AddedToken::from(content, special): normalized defaults to !special.
      INFERA_ASSIGN_OR_RETURN(t.normalized, bool_field(*o, "normalized", path, !t.special));
      INFERA_ASSIGN_OR_RETURN(t.lstrip, bool_field(*o, "lstrip", path, false));
      INFERA_ASSIGN_OR_RETURN(t.rstrip, bool_field(*o, "rstrip", path, false));
      INFERA_ASSIGN_OR_RETURN(t.single_word, bool_field(*o, "single_word", path, false));
      out.push_back(std::move(t));
    }
    return out;
  }

  bool fused_byte_level() const { return fused_byte_level_; }
  bool byte_level_decoder() const { return byte_level_decoder_; }
  bool origin_sensitive() const { return origin_sensitive_; }

 private:
  std::string_view origin_;
  bool fused_byte_level_ = false;
  bool origin_sensitive_ = false;
  bool byte_level_decoder_ = false;
};

// What the streaming parse pulls out of "model": the vocabulary goes straight into the
// pipeline's Vocab and the merges into a MergeList, never into the DOM. A 150k-entry object in
// a Boost.JSON DOM costs more to build than everything else together.
struct ModelCapture {
  Vocab* vocab = nullptr;
  MergeList merges;
  std::string problem;  // first malformed entry, with its JSON path
};

// A Boost.JSON parse handler that builds the DOM like json::parser does (value_stack), except
// for model.vocab and model.merges, which it captures into ModelCapture and replaces by empty
// containers in the DOM, and for top-level keys tokenizer.json does not define, whose values it
// skips (null in the DOM): some packaged files carry a second copy of the whole tokenizer there.
class CaptureHandler {
 public:
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();

  CaptureHandler(json::storage_ptr sp, ModelCapture* capture) : capture_(capture) {
    st.reset(std::move(sp));
  }

  json::value_stack st;

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) {
    ++depth_;
    if (mode_ == Mode::kNormal && depth_ == 2 && skip_next_) {
      mode_ = Mode::kSkip;
    } else if (mode_ == Mode::kNormal && depth_ == 3 && root_key_ == "model" &&
               model_key_ == "vocab") {
      mode_ = Mode::kVocab;
    } else if (mode_ == Mode::kVocab || mode_ == Mode::kMerges) {
      note("model." + mode_name() + ": unexpected object");
    }
    return true;
  }
  bool on_object_end(std::size_t n, json::error_code&) {
    if (mode_ == Mode::kNormal) {
      st.push_object(n);
    } else if (mode_ == Mode::kVocab && depth_ == 3) {
      st.push_object(0);
      mode_ = Mode::kNormal;
    } else if (mode_ == Mode::kSkip && depth_ == 2) {
      end_skip();
    }
    --depth_;
    return true;
  }
  bool on_array_begin(json::error_code&) {
    ++depth_;
    if (mode_ == Mode::kNormal && depth_ == 2 && skip_next_) {
      mode_ = Mode::kSkip;
    } else if (mode_ == Mode::kNormal && depth_ == 3 && root_key_ == "model" &&
               model_key_ == "merges") {
      mode_ = Mode::kMerges;
    } else if (mode_ == Mode::kMerges && depth_ == 4) {
      pair_size_ = 0;
    } else if (mode_ == Mode::kVocab || mode_ == Mode::kMerges) {
      note("model." + mode_name() + ": unexpected array");
    }
    return true;
  }
  bool on_array_end(std::size_t n, json::error_code&) {
    if (mode_ == Mode::kNormal) {
      st.push_array(n);
    } else if (mode_ == Mode::kMerges && depth_ == 3) {
      st.push_array(0);
      mode_ = Mode::kNormal;
    } else if (mode_ == Mode::kMerges && depth_ == 4) {
      if (pair_size_ == 2) {
        capture_->merges.add(pair_[0], pair_[1]);
      } else {
        note(merge_path() + ": a merge must be \"a b\" or [\"a\", \"b\"]");
      }
      ++merge_index_;
    } else if (mode_ == Mode::kSkip && depth_ == 2) {
      end_skip();
    }
    --depth_;
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    if (mode_ == Mode::kSkip) return true;
    key_.append(s.data(), s.size());
    if (mode_ == Mode::kNormal) st.push_chars(s);
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    if (mode_ == Mode::kSkip) return true;
    key_.append(s.data(), s.size());
    if (mode_ == Mode::kNormal) {
      st.push_key(s);
      if (depth_ == 1) {
        root_key_ = key_;
        skip_next_ = !known_top_level_key(root_key_);
      }
      if (depth_ == 2) model_key_ = key_;
    } else if (mode_ == Mode::kVocab) {
      token_.swap(key_);
    }
    key_.clear();
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    if (mode_ == Mode::kNormal) {
      st.push_chars(s);
    } else if (mode_ != Mode::kSkip) {
      str_.append(s.data(), s.size());
    }
    return true;
  }
  bool on_string(json::string_view s, std::size_t, json::error_code&) {
    if (skipped_scalar()) return true;
    if (mode_ == Mode::kSkip) return true;
    if (mode_ == Mode::kNormal) {
      st.push_string(s);
      return true;
    }
    str_.append(s.data(), s.size());
    if (mode_ == Mode::kMerges && depth_ == 3) {
      // Legacy "a b" lines: "#version" lines are skipped; exactly two parts required.
      const std::string_view line = str_;
      const size_t space = line.find(' ');
      if (!line.starts_with("#version")) {
        if (space == std::string_view::npos ||
            line.find(' ', space + 1) != std::string_view::npos) {
          note(merge_path() + ": a merge line must be two tokens separated by one space");
        } else {
          capture_->merges.add(line.substr(0, space), line.substr(space + 1));
        }
        ++merge_index_;
      }
    } else if (mode_ == Mode::kMerges && depth_ == 4) {
      if (pair_size_ < 2) pair_[pair_size_].assign(str_);
      ++pair_size_;
    } else {
      note("model." + mode_name() + ": unexpected string");
    }
    str_.clear();
    return true;
  }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(std::int64_t i, json::string_view, json::error_code&) {
    if (skipped_scalar() || mode_ == Mode::kSkip) return true;
    if (mode_ == Mode::kNormal) {
      st.push_int64(i);
    } else if (i < 0) {
      note("model.vocab: negative id for \"" + token_ + "\"");
    } else {
      vocab_entry(static_cast<uint64_t>(i));
    }
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code&) {
    if (skipped_scalar() || mode_ == Mode::kSkip) return true;
    if (mode_ == Mode::kNormal) {
      st.push_uint64(u);
    } else {
      vocab_entry(u);
    }
    return true;
  }
  bool on_double(double d, json::string_view, json::error_code&) {
    if (skipped_scalar() || mode_ == Mode::kSkip) return true;
    if (mode_ == Mode::kNormal) {
      st.push_double(d);
    } else {
      note("model." + mode_name() + ": unexpected number");
    }
    return true;
  }
  bool on_bool(bool b, json::error_code&) {
    if (skipped_scalar() || mode_ == Mode::kSkip) return true;
    if (mode_ == Mode::kNormal) {
      st.push_bool(b);
    } else {
      note("model." + mode_name() + ": unexpected boolean");
    }
    return true;
  }
  bool on_null(json::error_code&) {
    if (skipped_scalar() || mode_ == Mode::kSkip) return true;
    if (mode_ == Mode::kNormal) {
      st.push_null();
    } else {
      note("model." + mode_name() + ": unexpected null");
    }
    return true;
  }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }

 private:
  enum class Mode { kNormal, kVocab, kMerges, kSkip };

  static bool known_top_level_key(std::string_view k) {
    for (const char* known : {"version", "truncation", "padding", "added_tokens", "normalizer",
                              "pre_tokenizer", "model", "post_processor", "decoder"}) {
      if (k == known) return true;
    }
    return false;
  }
  // A scalar value of a skipped top-level key: becomes null in the DOM.
  bool skipped_scalar() {
    if (mode_ != Mode::kNormal || depth_ != 1 || !skip_next_) return false;
    st.push_null();
    skip_next_ = false;
    return true;
  }
  void end_skip() {
    st.push_null();
    mode_ = Mode::kNormal;
    skip_next_ = false;
  }
  void vocab_entry(uint64_t id) {
    if (mode_ != Mode::kVocab || depth_ != 3) {
      note("model." + mode_name() + ": unexpected number");
    } else if (id > kMaxTokenId) {
      note("model.vocab: id " + std::to_string(id) + " is too large");
    } else if (!unicode::is_valid_utf8(token_)) {
      note("model.vocab: a token is not UTF-8");
    } else {
      capture_->vocab->add(token_, static_cast<TokenId>(id));
    }
  }
  std::string mode_name() const { return mode_ == Mode::kVocab ? "vocab" : "merges"; }
  std::string merge_path() const { return "model.merges[" + std::to_string(merge_index_) + "]"; }
  void note(std::string what) {
    if (capture_->problem.empty()) capture_->problem = std::move(what);
  }

  ModelCapture* capture_;
  Mode mode_ = Mode::kNormal;
  int depth_ = 0;
  bool skip_next_ = false;  // the value of the current top-level key is to be skipped
  std::string root_key_, model_key_, key_, str_, token_;
  std::string pair_[2];
  size_t pair_size_ = 0;
  size_t merge_index_ = 0;
};

Result<std::unique_ptr<Pipeline>> load(std::string_view text, std::string_view origin,
                                       size_t word_cache_entries) {
  Loader loader(origin);
  auto p = std::make_unique<Pipeline>();
  // The vocabulary streams in before its size is known: reserve from the document size (real
  // files spend 70-110 bytes per token) instead of growing the index step by step.
  p->vocab.reserve(std::min<size_t>(text.size() / 64, size_t{1} << 22), text.size() / 8);
  ModelCapture capture;
  capture.vocab = &p->vocab;
  json::monotonic_resource arena;
  json::parse_options options;
  options.max_depth = 64;
  json::basic_parser<CaptureHandler> parser(options, json::storage_ptr(&arena), &capture);
  json::error_code ec;
  const size_t used = parser.write_some(false, text.data(), text.size(), ec);
  if (ec || used != text.size()) {
    return invalid_argument(std::string(origin) + ": not valid JSON: " +
                            (ec ? ec.message() : std::string("trailing data")));
  }
  const json::value root = parser.handler().st.release();
  if (!capture.problem.empty()) return loader.error(capture.problem, "malformed");
  if (!root.is_object()) return invalid_argument(std::string(origin) + ": not a JSON object");
  const json::object& top = root.get_object();

  const json::value* model = top.if_contains("model");
  if (model == nullptr) return loader.error("model", "missing");
  const json::value* pre = top.if_contains("pre_tokenizer");
  const bool has_pre = pre != nullptr && !pre->is_null();
  const bool raw_bytes = has_pre && Loader::ends_with_byte_level(*pre) &&
                         Loader::model_takes_raw_bytes(*model, p->vocab);

  if (const json::value* n = top.if_contains("normalizer"); n != nullptr && !n->is_null()) {
    INFERA_ASSIGN_OR_RETURN(p->normalizer, loader.normalizer(*n, "normalizer"));
  }
  if (has_pre) {
    INFERA_ASSIGN_OR_RETURN(p->pre_tokenizer,
                            loader.pre_tokenizer(*pre, "pre_tokenizer", /*last=*/true, raw_bytes));
  }
  p->origin_sensitive = loader.origin_sensitive();
  INFERA_RETURN_IF_ERROR(loader.model(*model, *p, capture.merges,
                                      raw_bytes && loader.fused_byte_level(), word_cache_entries));
  INFERA_ASSIGN_OR_RETURN(std::vector<AddedToken> added, loader.added_tokens(top.if_contains("added_tokens")));
  auto av = AddedVocabulary::create(std::move(added), p->normalizer.get());
  if (!av.ok()) return loader.error("added_tokens", av.status().message());
  p->added = std::move(av).value();
  // Distinct token strings over the model vocabulary and the added tokens.
  std::unordered_set<std::string_view> extra;
  for (const AddedToken& t : p->added->tokens()) {
    if (!p->vocab.find(t.content)) extra.insert(t.content);
  }
  p->vocab_size = p->vocab.size() + extra.size();
  if (const json::value* pp = top.if_contains("post_processor"); pp != nullptr && !pp->is_null()) {
    INFERA_ASSIGN_OR_RETURN(p->post_processor, loader.post_processor(*pp, "post_processor", *p));
  }
  if (const json::value* d = top.if_contains("decoder"); d != nullptr && !d->is_null()) {
    INFERA_ASSIGN_OR_RETURN(p->decoder, loader.decoder(*d, "decoder"));
    p->byte_level_decoder = loader.byte_level_decoder();
  }
  return p;
}

}  // namespace

Result<std::unique_ptr<Pipeline>> load_pipeline(std::string_view json, std::string_view origin,
                                                size_t word_cache_entries) {
  try {
    return load(json, origin, word_cache_entries);
  } catch (const std::exception& e) {
    // Boost.JSON reports allocation and size limits by throwing; nothing escapes this API.
    return invalid_argument(std::string(origin) + ": cannot load tokenizer: " + e.what());
  }
}

}  // namespace infera::tokenizer
