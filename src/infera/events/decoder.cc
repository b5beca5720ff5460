#include "infera/events/decoder.h"

#include <limits>
#include <type_traits>
#include <string>

#include "infera/events/msgpack.h"

namespace infera::events {
namespace {

DecodeError from_msgpack(MsgpackError e) {
  switch (e) {
    case MsgpackError::kNone: return DecodeError::kNone;
    case MsgpackError::kTruncated: return DecodeError::kTruncated;
    case MsgpackError::kInvalidByte: return DecodeError::kInvalidByte;
    case MsgpackError::kWrongType: return DecodeError::kWrongType;
    case MsgpackError::kTooLarge: return DecodeError::kTooLarge;
    case MsgpackError::kTooDeep: return DecodeError::kTooDeep;
  }
  return DecodeError::kWrongType;
}

enum class Tag : uint8_t { kStored, kRemoved, kCleared, kUnknown };

Tag tag_of(std::string_view name) {
  if (name == "BlockStored") return Tag::kStored;
  if (name == "BlockRemoved") return Tag::kRemoved;
  if (name == "AllBlocksCleared") return Tag::kCleared;
  return Tag::kUnknown;
}

// The fields of the current schema (KV_EVENTS.md 1.1), looked up by key: by length first, so
// most keys cost one memcmp.
enum class Field : uint8_t {
  kUnknown, kType, kBlockHashes, kParentBlockHash, kTokenIds, kBlockSize, kLoraId, kMedium,
  kLoraName, kExtraKeys, kGroupIdx, kSpecKind, kSlidingWindow, kLocality, kOwnership, kSessionId,
};

Field field_of(std::string_view k) {
  switch (k.size()) {
    case 4: return k == "type" ? Field::kType : Field::kUnknown;
    case 6: return k == "medium" ? Field::kMedium : Field::kUnknown;
    case 7: return k == "lora_id" ? Field::kLoraId : Field::kUnknown;
    case 8: return k == "locality" ? Field::kLocality : Field::kUnknown;
    case 9:
      if (k == "token_ids") return Field::kTokenIds;
      if (k == "lora_name") return Field::kLoraName;
      if (k == "group_idx") return Field::kGroupIdx;
      if (k == "ownership") return Field::kOwnership;
      return Field::kUnknown;
    case 10:
      if (k == "block_size") return Field::kBlockSize;
      if (k == "extra_keys") return Field::kExtraKeys;
      if (k == "session_id") return Field::kSessionId;
      return Field::kUnknown;
    case 12: return k == "block_hashes" ? Field::kBlockHashes : Field::kUnknown;
    case 17: return k == "parent_block_hash" ? Field::kParentBlockHash : Field::kUnknown;
    case 18: return k == "kv_cache_spec_kind" ? Field::kSpecKind : Field::kUnknown;
    case 28: return k == "kv_cache_spec_sliding_window" ? Field::kSlidingWindow : Field::kUnknown;
    default: return Field::kUnknown;
  }
}

// Decoding state for one payload. Every read returns false on the first error; the reader's
// error (truncation, type) or the decoder's own (value, missing field) is reported at the end.
class Decoder {
 public:
  Decoder(std::span<const uint8_t> payload, const DecodeLimits& limits, DecodeScratch* scratch)
      : r_(payload, MsgpackLimits{limits.max_string, limits.max_depth}),
        limits_(limits),
        scratch_(scratch) {}

  DecodeResult run(EventBatch& out) {
    DecodeResult result;
    const bool ok = decode_batch(out) && (r_.at_end() || bad(DecodeError::kTrailingBytes));
    result.unknown_events = unknown_events_;
    if (!ok) {
      result.error = error_ != DecodeError::kNone ? error_ : from_msgpack(r_.error());
      if (result.error == DecodeError::kNone) result.error = DecodeError::kWrongType;
      result.error_offset = r_.error_position();
    }
    return result;
  }

 private:
  // A decoder-level error; stops the reader too.
  bool bad(DecodeError e) {
    if (error_ == DecodeError::kNone && r_.ok()) error_ = e;
    r_.fail(MsgpackError::kWrongType);
    return false;
  }
  // The next value has a type the field does not allow: classify it as the reader would.
  bool type_error() {
    switch (r_.peek()) {
      case MsgpackType::kEnd: return r_.fail(MsgpackError::kTruncated);
      case MsgpackType::kInvalid: return r_.fail(MsgpackError::kInvalidByte);
      default: return bad(DecodeError::kWrongType);
    }
  }
  bool decode_batch(EventBatch& out) {
    const MsgpackType type = r_.peek();
    size_t count = 0;
    out.ts = 0;
    out.dp_rank.reset();
    if (type == MsgpackType::kArray) {
      uint32_t n = 0;
      if (!read_array(n)) return false;
      if (n < 2) return bad(DecodeError::kMissingField);
      if (!read_ts(out.ts) || !decode_events(out, count)) return false;
      if (n >= 3 && !read_opt_int(out.dp_rank)) return false;
      for (uint32_t i = 3; i < n; ++i) {  // forward compatibility: newer trailing fields
        if (!skip()) return false;
      }
    } else if (type == MsgpackType::kMap) {
      // Tolerated (KV_EVENTS.md 1.1): {ts, events, data_parallel_rank | dp_rank}.
      uint32_t n = 0;
      if (!read_map(n)) return false;
      bool have_events = false;
      for (uint32_t i = 0; i < n; ++i) {
        std::string_view key;
        if (!read_key(key)) return false;
        if (key == "ts") {
          if (!read_ts(out.ts)) return false;
        } else if (key == "events") {
          if (!decode_events(out, count)) return false;
          have_events = true;
        } else if (key == "data_parallel_rank" || key == "dp_rank" || key == "attn_dp_rank") {
          if (!read_opt_int(out.dp_rank)) return false;
        } else if (!skip()) {
          return false;
        }
      }
      if (!have_events) return bad(DecodeError::kMissingField);
    } else {
      return type_error();
    }
    for (size_t i = count; i < out.events.size(); ++i) spare(out.events[i]);
    out.events.erase(out.events.begin() + static_cast<std::ptrdiff_t>(count), out.events.end());
    return true;
  }

  bool read_ts(double& ts) {
    const MsgpackType t = r_.peek();
    if (t != MsgpackType::kFloat && t != MsgpackType::kInt) return type_error();
    return r_.read_number(ts);
  }

  bool decode_events(EventBatch& out, size_t& count) {
    uint32_t n = 0;
    if (!read_array(n)) return false;
    if (n > limits_.max_events) return bad(DecodeError::kTooLarge);
    count = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (!decode_event(out, count)) return false;
    }
    return true;
  }

  // Returns a reset event of type T at position `count` of the batch, reusing what is there,
  // or a spare of that type from the scratch (events change type from batch to batch: a store,
  // then a removal), so their vectors keep their capacity.
  template <typename T>
  T& slot(EventBatch& out, size_t& count) {
    const size_t i = count++;
    if (i == out.events.size()) out.events.emplace_back(std::in_place_type<AllBlocksCleared>);
    Event& e = out.events[i];
    if (T* existing = std::get_if<T>(&e)) {
      reset(*existing);
      return *existing;
    }
    spare(e);
    T& fresh = e.template emplace<T>();
    if constexpr (!std::is_same_v<T, AllBlocksCleared>) {
      auto& pool = spares<T>();
      if (!pool.empty()) {
        fresh = std::move(pool.back());
        pool.pop_back();
        reset(fresh);
      }
    }
    return fresh;
  }
  // Keeps the buffers of an event about to be overwritten or dropped.
  void spare(Event& e) {
    if (scratch_ == nullptr) return;
    constexpr size_t kMaxSpares = 64;  // bounds what a burst of large events leaves behind
    if (auto* s = std::get_if<BlockStored>(&e); s && scratch_->stored.size() < kMaxSpares) {
      scratch_->stored.push_back(std::move(*s));
    } else if (auto* r = std::get_if<BlockRemoved>(&e); r && scratch_->removed.size() < kMaxSpares) {
      scratch_->removed.push_back(std::move(*r));
    }
  }
  template <typename T>
  std::vector<T>& spares() {
    static_assert(std::is_same_v<T, BlockStored> || std::is_same_v<T, BlockRemoved>);
    if constexpr (std::is_same_v<T, BlockStored>) {
      return scratch_ ? scratch_->stored : no_spares_stored_;
    } else {
      return scratch_ ? scratch_->removed : no_spares_removed_;
    }
  }
  static void reset(BlockStored& s) {
    s.block_hashes.clear();
    s.parent_block_hash.reset();
    s.token_ids.clear();
    s.block_size = 0;
    s.lora_id.reset();
    s.medium.reset();
    s.lora_name.reset();
    s.group_idx.reset();
    s.kv_cache_spec_kind.reset();
    s.kv_cache_spec_sliding_window.reset();
    s.extra_keys_count = 0;
    s.locality.reset();
    s.ownership.reset();
    s.session_id.reset();
    s.extra_keys_msgpack.clear();
  }
  static void reset(BlockRemoved& r) {
    r.block_hashes.clear();
    r.medium.reset();
    r.group_idx.reset();
    r.locality.reset();
    r.ownership.reset();
  }
  static void reset(AllBlocksCleared&) {}

  bool decode_event(EventBatch& out, size_t& count) {
    const MsgpackType type = r_.peek();
    if (type == MsgpackType::kArray) return decode_array_event(out, count);
    if (type == MsgpackType::kMap) return decode_map_event(out, count);
    return type_error();
  }

  // Positional events: [tag, field1, field2, ...] in declaration order (KV_EVENTS.md 1.1).
  bool decode_array_event(EventBatch& out, size_t& count) {
    uint32_t n = 0;
    if (!read_array(n)) return false;
    if (n == 0) return bad(DecodeError::kMissingField);
    std::string_view name;
    if (!read_str(name)) return false;
    uint32_t i = 1;
    switch (tag_of(name)) {
      case Tag::kStored: {
        if (n < 2) return bad(DecodeError::kMissingField);
        BlockStored& s = slot<BlockStored>(out, count);
        for (; i < n && i <= 11; ++i) {
          bool ok = true;
          switch (i) {
            case 1: ok = read_hashes(s.block_hashes); break;
            case 2: ok = read_opt_hash(s.parent_block_hash); break;
            case 3: ok = read_tokens(s.token_ids); break;
            case 4: ok = read_u32(s.block_size); break;
            case 5: ok = read_opt_int(s.lora_id); break;
            case 6: ok = read_opt_str(s.medium); break;
            case 7:
              // SGLang's BlockStoredWithMetadata puts a metadata map ({"cache_salt": ...}) after
              // medium where vLLM has lora_name: tolerated, ignored with what follows.
              if (r_.peek() == MsgpackType::kMap) {
                for (; i < n; ++i) {
                  if (!skip()) return false;
                }
                return true;
              }
              ok = read_opt_str(s.lora_name);
              break;
            case 8: ok = read_extra_keys(s); break;
            case 9: ok = read_opt_int(s.group_idx); break;
            case 10: ok = read_opt_str(s.kv_cache_spec_kind); break;
            case 11: ok = read_opt_int(s.kv_cache_spec_sliding_window); break;
          }
          if (!ok) return false;
        }
        break;
      }
      case Tag::kRemoved: {
        if (n < 2) return bad(DecodeError::kMissingField);
        BlockRemoved& rm = slot<BlockRemoved>(out, count);
        for (; i < n && i <= 3; ++i) {
          bool ok = true;
          switch (i) {
            case 1: ok = read_hashes(rm.block_hashes); break;
            case 2: ok = read_opt_str(rm.medium); break;
            case 3: ok = read_opt_int(rm.group_idx); break;
          }
          if (!ok) return false;
        }
        break;
      }
      case Tag::kCleared: slot<AllBlocksCleared>(out, count); break;
      case Tag::kUnknown: ++unknown_events_; break;
    }
    for (; i < n; ++i) {  // trailing fields of a newer schema, or an unknown event's fields
      if (!skip()) return false;
    }
    return true;
  }

  // Tagged maps: {"type": name, field: value, ...}; key order is not part of the contract, so
  // when "type" is not the first key a first pass finds it.
  bool decode_map_event(EventBatch& out, size_t& count) {
    uint32_t n = 0;
    if (!read_map(n)) return false;
    const size_t fields_start = r_.position();
    std::string_view name;
    bool have_tag = false;
    bool tag_first = false;
    if (n > 0 && r_.peek() == MsgpackType::kStr) {
      std::string_view key;
      if (!r_.read_str(key)) return false;
      if (key == "type") {
        if (!read_str(name)) return false;
        have_tag = tag_first = true;
      }
    }
    if (!have_tag) {
      r_.rewind(fields_start);
      for (uint32_t i = 0; i < n; ++i) {
        std::string_view key;
        if (!read_key(key)) return false;
        if (key == "type" && !have_tag) {
          if (!read_str(name)) return false;
          have_tag = true;
        } else if (!skip()) {
          return false;
        }
      }
      if (!have_tag) return bad(DecodeError::kMissingField);
      r_.rewind(fields_start);
    }
    const uint32_t first = tag_first ? 1 : 0;
    const Tag tag = tag_of(name);
    switch (tag) {
      case Tag::kStored: {
        BlockStored& s = slot<BlockStored>(out, count);
        bool have_hashes = false;
        for (uint32_t i = first; i < n; ++i) {
          std::string_view key;
          if (!read_key(key)) return false;
          bool ok = true;
          switch (field_of(key)) {
            case Field::kBlockHashes:
              ok = read_hashes(s.block_hashes);
              have_hashes = true;
              break;
            case Field::kParentBlockHash: ok = read_opt_hash(s.parent_block_hash); break;
            case Field::kTokenIds: ok = read_tokens(s.token_ids); break;
            case Field::kBlockSize: ok = read_u32(s.block_size); break;
            case Field::kLoraId: ok = read_opt_int(s.lora_id); break;
            case Field::kMedium: ok = read_opt_str(s.medium); break;
            case Field::kLoraName: ok = read_opt_str(s.lora_name); break;
            case Field::kExtraKeys: ok = read_extra_keys(s); break;
            case Field::kGroupIdx: ok = read_opt_int(s.group_idx); break;
            case Field::kSpecKind: ok = read_opt_str(s.kv_cache_spec_kind); break;
            case Field::kSlidingWindow: ok = read_opt_int(s.kv_cache_spec_sliding_window); break;
            case Field::kLocality: ok = read_opt_str(s.locality); break;
            case Field::kOwnership: ok = read_opt_str(s.ownership); break;
            case Field::kSessionId: ok = read_opt_str(s.session_id); break;
            case Field::kType:  // the tag, on the second pass
            case Field::kUnknown: ok = skip(); break;
          }
          if (!ok) return false;
        }
        if (!have_hashes) return bad(DecodeError::kMissingField);
        return true;
      }
      case Tag::kRemoved: {
        BlockRemoved& rm = slot<BlockRemoved>(out, count);
        bool have_hashes = false;
        for (uint32_t i = first; i < n; ++i) {
          std::string_view key;
          if (!read_key(key)) return false;
          bool ok = true;
          switch (field_of(key)) {
            case Field::kBlockHashes:
              ok = read_hashes(rm.block_hashes);
              have_hashes = true;
              break;
            case Field::kMedium: ok = read_opt_str(rm.medium); break;
            case Field::kGroupIdx: ok = read_opt_int(rm.group_idx); break;
            case Field::kLocality: ok = read_opt_str(rm.locality); break;
            case Field::kOwnership: ok = read_opt_str(rm.ownership); break;
            default: ok = skip(); break;
          }
          if (!ok) return false;
        }
        if (!have_hashes) return bad(DecodeError::kMissingField);
        return true;
      }
      case Tag::kCleared:
      case Tag::kUnknown:
        if (tag == Tag::kCleared) {
          slot<AllBlocksCleared>(out, count);
        } else {
          ++unknown_events_;
        }
        for (uint32_t i = first; i < n; ++i) {
          if (!skip() || !skip()) return false;
        }
        return true;
    }
    return true;
  }

  // ---- fields ----

  bool read_array(uint32_t& n) {
    if (r_.peek() != MsgpackType::kArray) return type_error();
    return r_.read_array(n);
  }
  bool read_map(uint32_t& n) {
    if (r_.peek() != MsgpackType::kMap) return type_error();
    return r_.read_map(n);
  }
  bool read_str(std::string_view& s) {
    if (r_.peek() != MsgpackType::kStr) return type_error();
    return r_.read_str(s);
  }
  // A map key: a string, or (tolerated) any other value, which then matches no field.
  bool read_key(std::string_view& key) {
    if (r_.peek() == MsgpackType::kStr) return r_.read_str(key);
    key = {};
    return skip();
  }
  bool skip() { return r_.skip(); }

  bool read_opt_str(std::optional<std::string>& out) {
    if (r_.skip_nil()) {
      out.reset();
      return true;
    }
    std::string_view s;
    if (!read_str(s)) return false;
    out.emplace(s);
    return true;
  }

  bool read_opt_int(std::optional<int64_t>& out) {
    if (r_.skip_nil()) {
      out.reset();
      return true;
    }
    if (r_.peek() != MsgpackType::kInt) return type_error();
    MsgpackInt v;
    if (!r_.read_int(v)) return false;
    if (!v.negative && v.bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad(DecodeError::kBadValue);
    }
    out = static_cast<int64_t>(v.bits);
    return true;
  }

  bool read_u32(uint32_t& out) {
    if (r_.skip_nil()) {
      out = 0;
      return true;
    }
    if (r_.peek() != MsgpackType::kInt) return type_error();
    MsgpackInt v;
    if (!r_.read_int(v)) return false;
    if (v.negative || v.bits > std::numeric_limits<uint32_t>::max()) {
      return bad(DecodeError::kBadValue);
    }
    out = static_cast<uint32_t>(v.bits);
    return true;
  }

  // Hashes: unsigned ints as they are, signed ints as their two's-complement bit pattern (SGLang
  // int64, vLLM v0.9 builtin hash), bytes (or a string) as vLLM's int form (KV_EVENTS.md 1.7).
  bool read_hash(uint64_t& out) {
    switch (r_.peek()) {
      case MsgpackType::kInt: {
        MsgpackInt v;
        if (!r_.read_int(v)) return false;
        out = v.bits;
        return true;
      }
      case MsgpackType::kBin: {
        std::span<const uint8_t> b;
        if (!r_.read_bin(b)) return false;
        out = hash_from_bytes(b);
        return true;
      }
      case MsgpackType::kStr: {
        std::string_view s;
        if (!r_.read_str(s)) return false;
        out = hash_from_bytes(byte_span(s));
        return true;
      }
      default: return type_error();
    }
  }

  bool read_opt_hash(std::optional<uint64_t>& out) {
    if (r_.skip_nil()) {
      out.reset();
      return true;
    }
    uint64_t h = 0;
    if (!read_hash(h)) return false;
    out = h;
    return true;
  }

  bool read_hashes(std::vector<uint64_t>& out) {
    uint32_t n = 0;
    if (!read_array(n)) return false;
    if (n > limits_.max_blocks) return bad(DecodeError::kTooLarge);
    out.resize(n);
    uint32_t i = 0;
    while (true) {
      i += static_cast<uint32_t>(r_.read_u64_run(out.data() + i, n - i));
      if (i == n) return true;
      if (!read_hash(out[i++])) return false;
    }
  }

  bool read_tokens(std::vector<uint32_t>& out) {
    if (r_.skip_nil()) {  // tokenless stores (CPU offload) may send nil as well as []
      out.clear();
      return true;
    }
    uint32_t n = 0;
    if (!read_array(n)) return false;
    if (n > limits_.max_tokens) return bad(DecodeError::kTooLarge);
    out.resize(n);
    uint32_t* dst = out.data();
    uint32_t i = 0;
    while (true) {
      i += static_cast<uint32_t>(r_.read_u32_run(dst + i, n - i));
      if (i == n) return true;
      // Anything the fast path does not take: the last few bytes, or another int encoding.
      MsgpackInt v;
      if (r_.peek() != MsgpackType::kInt) return type_error();
      if (!r_.read_int(v)) return false;
      if (v.negative || v.bits > std::numeric_limits<uint32_t>::max()) {
        return bad(DecodeError::kBadValue);
      }
      dst[i++] = static_cast<uint32_t>(v.bits);
    }
  }

  // extra_keys: one entry per block, nil or the tuple vLLM hashed (LoRA name, mm ids, salt).
  // Only the count matters to the router; non-nil contents are kept verbatim for re-encoding.
  bool read_extra_keys(BlockStored& s) {
    s.extra_keys_count = 0;
    s.extra_keys_msgpack.clear();
    if (r_.skip_nil()) return true;
    const size_t start = r_.position();
    uint32_t n = 0;
    if (!read_array(n)) return false;
    bool any = false;
    for (uint32_t i = 0; i < n; ++i) {
      if (r_.skip_nil()) continue;
      any = true;
      if (!skip()) return false;
    }
    s.extra_keys_count = n;
    if (any) {
      const auto raw = r_.bytes_from(start);
      s.extra_keys_msgpack.assign(reinterpret_cast<const char*>(raw.data()), raw.size());
    }
    return true;
  }

  MsgpackReader r_;
  const DecodeLimits& limits_;
  DecodeScratch* scratch_;
  std::vector<BlockStored> no_spares_stored_;  // always empty: callers without a scratch
  std::vector<BlockRemoved> no_spares_removed_;
  DecodeError error_ = DecodeError::kNone;
  uint32_t unknown_events_ = 0;
};

}  // namespace

std::string_view decode_error_name(DecodeError error) {
  switch (error) {
    case DecodeError::kNone: return "none";
    case DecodeError::kTruncated: return "truncated";
    case DecodeError::kInvalidByte: return "invalid_byte";
    case DecodeError::kWrongType: return "wrong_type";
    case DecodeError::kTooLarge: return "too_large";
    case DecodeError::kTooDeep: return "too_deep";
    case DecodeError::kBadValue: return "bad_value";
    case DecodeError::kMissingField: return "missing_field";
    case DecodeError::kTrailingBytes: return "trailing_bytes";
  }
  return "?";
}

uint64_t hash_from_bytes(std::span<const uint8_t> bytes) {
  const size_t n = bytes.size() < 8 ? bytes.size() : 8;
  return load_be(bytes.data() + bytes.size() - n, n);
}

DecodeResult decode_batch(std::span<const uint8_t> payload, EventBatch& out,
                          const DecodeLimits& limits, DecodeScratch* scratch) {
  if (payload.size() > limits.max_payload_bytes) {
    DecodeResult result;
    result.error = DecodeError::kTooLarge;
    return result;
  }
  return Decoder(payload, limits, scratch).run(out);
}

Result<EventBatch> decode_batch(std::span<const uint8_t> payload, const DecodeLimits& limits) {
  EventBatch batch;
  const DecodeResult result = decode_batch(payload, batch, limits);
  if (!result.ok()) {
    return invalid_argument("KV-event payload: " + std::string(decode_error_name(result.error)) +
                            " at byte " + std::to_string(result.error_offset));
  }
  return batch;
}

}  // namespace infera::events
