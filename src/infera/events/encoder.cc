#include "infera/events/encoder.h"

#include "infera/events/msgpack.h"

namespace infera::events {
namespace {

class Encoder {
 public:
  Encoder(WireFormat format, std::string& out) : format_(format), w_(out) {}

  void batch(const EventBatch& b) {
    // EventBatch is array_like in every released version; data_parallel_rank is a trailing
    // default, so an unset rank gives a 2-element batch. v0.9.0 had no rank field at all.
    const bool rank = b.dp_rank.has_value() && format_ != WireFormat::kVllmArrayV09;
    w_.array(rank ? 3 : 2);
    w_.float64(b.ts);
    w_.array(static_cast<uint32_t>(b.events.size()));
    for (const Event& e : b.events) {
      if (const auto* s = std::get_if<BlockStored>(&e)) {
        format_ == WireFormat::kVllmMap ? stored_map(*s) : stored_array(*s);
      } else if (const auto* r = std::get_if<BlockRemoved>(&e)) {
        format_ == WireFormat::kVllmMap ? removed_map(*r) : removed_array(*r);
      } else {
        if (format_ == WireFormat::kVllmMap) {
          w_.map(1);
          w_.str("type");
        } else {
          w_.array(1);
        }
        w_.str("AllBlocksCleared");
      }
    }
    if (rank) w_.sint(*b.dp_rank);
  }

 private:
  void hash(uint64_t h) {
    if (format_ == WireFormat::kSglangArray) {
      w_.sint(static_cast<int64_t>(h));  // SGLang: first 8 digest bytes as a signed int64
    } else {
      w_.uint(h);
    }
  }
  void hashes(const std::vector<uint64_t>& hs) {
    w_.array(static_cast<uint32_t>(hs.size()));
    for (const uint64_t h : hs) hash(h);
  }
  void opt_hash(const std::optional<uint64_t>& h) { h ? hash(*h) : w_.nil(); }
  void opt_int(const std::optional<int64_t>& v) { v ? w_.sint(*v) : w_.nil(); }
  void opt_str(const std::optional<std::string>& v) { v ? w_.str(*v) : w_.nil(); }
  void tokens(const std::vector<uint32_t>& t) {
    w_.array(static_cast<uint32_t>(t.size()));
    for (const uint32_t id : t) w_.uint(id);
  }
  static bool has_extra_keys(const BlockStored& s) {
    return s.extra_keys_count > 0 || !s.extra_keys_msgpack.empty();
  }
  void extra_keys(const BlockStored& s) {
    if (!s.extra_keys_msgpack.empty()) {
      w_.raw(byte_span(s.extra_keys_msgpack));
    } else if (s.extra_keys_count > 0) {
      w_.array(s.extra_keys_count);
      for (uint32_t i = 0; i < s.extra_keys_count; ++i) w_.nil();
    } else {
      w_.nil();
    }
  }

  void stored_map(const BlockStored& s) {
    // Required fields are always written (nil when None); optional ones only when set.
    const uint32_t n = 8u + (has_extra_keys(s) ? 1u : 0u) + (s.group_idx ? 1u : 0u) +
                       (s.kv_cache_spec_kind ? 1u : 0u) +
                       (s.kv_cache_spec_sliding_window ? 1u : 0u) + (s.locality ? 1u : 0u) +
                       (s.ownership ? 1u : 0u) + (s.session_id ? 1u : 0u);
    w_.map(n);
    w_.str("type");
    w_.str("BlockStored");
    w_.str("block_hashes");
    hashes(s.block_hashes);
    w_.str("parent_block_hash");
    opt_hash(s.parent_block_hash);
    w_.str("token_ids");
    tokens(s.token_ids);
    w_.str("block_size");
    w_.uint(s.block_size);
    w_.str("lora_id");
    opt_int(s.lora_id);
    w_.str("medium");
    opt_str(s.medium);
    w_.str("lora_name");
    opt_str(s.lora_name);
    if (has_extra_keys(s)) {
      w_.str("extra_keys");
      extra_keys(s);
    }
    if (s.group_idx) {
      w_.str("group_idx");
      w_.sint(*s.group_idx);
    }
    if (s.kv_cache_spec_kind) {
      w_.str("kv_cache_spec_kind");
      w_.str(*s.kv_cache_spec_kind);
    }
    if (s.kv_cache_spec_sliding_window) {
      w_.str("kv_cache_spec_sliding_window");
      w_.sint(*s.kv_cache_spec_sliding_window);
    }
    if (s.locality) {
      w_.str("locality");
      w_.str(*s.locality);
    }
    if (s.ownership) {
      w_.str("ownership");
      w_.str(*s.ownership);
    }
    if (s.session_id) {
      w_.str("session_id");
      w_.str(*s.session_id);
    }
  }

  void removed_map(const BlockRemoved& r) {
    const uint32_t n =
        3u + (r.group_idx ? 1u : 0u) + (r.locality ? 1u : 0u) + (r.ownership ? 1u : 0u);
    w_.map(n);
    w_.str("type");
    w_.str("BlockRemoved");
    w_.str("block_hashes");
    hashes(r.block_hashes);
    w_.str("medium");
    opt_str(r.medium);
    if (r.group_idx) {
      w_.str("group_idx");
      w_.sint(*r.group_idx);
    }
    if (r.locality) {
      w_.str("locality");
      w_.str(*r.locality);
    }
    if (r.ownership) {
      w_.str("ownership");
      w_.str(*r.ownership);
    }
  }

  void stored_array(const BlockStored& s) {
    // Field count after the tag: required fields, then optional ones up to the last set one
    // (msgspec can only trim trailing defaults in the positional format).
    uint32_t n = 5;  // block_hashes, parent, token_ids, block_size, lora_id
    switch (format_) {
      case WireFormat::kVllmArrayV09: break;
      case WireFormat::kVllmArrayV010: n = 6; break;
      case WireFormat::kSglangArray: n = s.medium ? 6 : 5; break;
      default:
        n = 7;  // + medium, lora_name
        if (has_extra_keys(s)) n = 8;
        if (s.group_idx) n = 9;
        if (s.kv_cache_spec_kind) n = 10;
        if (s.kv_cache_spec_sliding_window) n = 11;
        break;
    }
    w_.array(n + 1);
    w_.str("BlockStored");
    hashes(s.block_hashes);
    opt_hash(s.parent_block_hash);
    tokens(s.token_ids);
    w_.uint(s.block_size);
    opt_int(s.lora_id);
    if (n >= 6) opt_str(s.medium);
    if (n >= 7) opt_str(s.lora_name);
    if (n >= 8) extra_keys(s);
    if (n >= 9) opt_int(s.group_idx);
    if (n >= 10) opt_str(s.kv_cache_spec_kind);
    if (n >= 11) opt_int(s.kv_cache_spec_sliding_window);
  }

  void removed_array(const BlockRemoved& r) {
    uint32_t n = 2;  // block_hashes, medium
    switch (format_) {
      case WireFormat::kVllmArrayV09: n = 1; break;
      case WireFormat::kVllmArrayV010: break;
      case WireFormat::kSglangArray: n = r.medium ? 2 : 1; break;
      default: n = r.group_idx ? 3 : 2; break;
    }
    w_.array(n + 1);
    w_.str("BlockRemoved");
    hashes(r.block_hashes);
    if (n >= 2) opt_str(r.medium);
    if (n >= 3) opt_int(r.group_idx);
  }

  WireFormat format_;
  MsgpackWriter w_;
};

}  // namespace

std::string_view wire_format_name(WireFormat format) {
  switch (format) {
    case WireFormat::kVllmMap: return "vllm-map";
    case WireFormat::kVllmArray: return "vllm-array";
    case WireFormat::kVllmArrayV010: return "vllm-array-v0.10";
    case WireFormat::kVllmArrayV09: return "vllm-array-v0.9";
    case WireFormat::kSglangArray: return "sglang-array";
  }
  return "?";
}

Result<WireFormat> parse_wire_format(std::string_view name) {
  for (const WireFormat f : {WireFormat::kVllmMap, WireFormat::kVllmArray, WireFormat::kVllmArrayV010,
                             WireFormat::kVllmArrayV09, WireFormat::kSglangArray}) {
    if (name == wire_format_name(f)) return f;
  }
  return invalid_argument("unknown KV-event wire format '" + std::string(name) +
                          "' (vllm-map, vllm-array, vllm-array-v0.10, vllm-array-v0.9, "
                          "sglang-array)");
}

void encode_batch(const EventBatch& batch, WireFormat format, std::string& out) {
  Encoder(format, out).batch(batch);
}

std::string encode_batch(const EventBatch& batch, WireFormat format) {
  std::string out;
  encode_batch(batch, format, out);
  return out;
}

}  // namespace infera::events
