// The golden vectors of shared/wire/vllm_kv_events_golden.json (copied into
// tests/testdata/events/ with provenance): every profile and case decodes to the object the
// generator encoded, and the encoder reproduces the payload byte for byte wherever the format
// can carry the case (int hashes; the forward-compatibility case carries unknown extras).
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fstream>
#include <sstream>

#include "infera/events/decoder.h"
#include "infera/events/encoder.h"
#include "infera/events/msgpack.h"

namespace infera::events {
namespace {

namespace json = boost::json;

json::value load_golden() {
  std::ifstream in(INFERA_TESTDATA_DIR "/events/vllm_kv_events_golden.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::string unhex(std::string_view h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

std::string to_hex(const std::string& s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (const char c : s) {
    out.push_back(kDigits[static_cast<uint8_t>(c) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(c) & 15]);
  }
  return out;
}

// ---- an independent reading of the generator's JSON objects into the expected structs ----

uint64_t json_hash(const json::value& v) {
  if (v.is_uint64()) return v.as_uint64();
  if (v.is_int64()) return static_cast<uint64_t>(v.as_int64());  // SGLang: the bit pattern
  // {"$bytes": hex}: vLLM's int form is the last 8 bytes, big-endian.
  const std::string raw = unhex(v.as_object().at("$bytes").as_string());
  uint64_t h = 0;
  for (size_t i = raw.size() >= 8 ? raw.size() - 8 : 0; i < raw.size(); ++i) {
    h = (h << 8) | static_cast<uint8_t>(raw[i]);
  }
  return h;
}

// Boost.JSON keeps non-negative numbers as int64 when they fit, as uint64 only above that.
int64_t json_int(const json::value& v) {
  return v.is_uint64() ? static_cast<int64_t>(v.as_uint64()) : v.as_int64();
}
uint64_t json_u64(const json::value& v) {
  return v.is_uint64() ? v.as_uint64() : static_cast<uint64_t>(v.as_int64());
}

void to_msgpack(const json::value& v, MsgpackWriter& w) {
  if (v.is_null()) {
    w.nil();
  } else if (v.is_string()) {
    w.str(v.as_string());
  } else if (v.is_uint64()) {
    w.uint(v.as_uint64());
  } else if (v.is_int64()) {
    w.sint(v.as_int64());
  } else if (v.is_array()) {
    w.array(static_cast<uint32_t>(v.as_array().size()));
    for (const auto& e : v.as_array()) to_msgpack(e, w);
  } else {
    FAIL() << "unexpected JSON in extra_keys: " << json::serialize(v);
  }
}

std::optional<std::string> opt_str(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return std::nullopt;
  return std::string(v->as_string());
}
std::optional<int64_t> opt_int(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return std::nullopt;
  return json_int(*v);
}

// Positional events name their fields in declaration order (KV_EVENTS.md 1.1; SGLang uses the
// same order up to medium).
json::object named(const json::array& a) {
  static const char* kStored[] = {"block_hashes", "parent_block_hash", "token_ids", "block_size",
                                  "lora_id", "medium", "lora_name", "extra_keys", "group_idx",
                                  "kv_cache_spec_kind", "kv_cache_spec_sliding_window"};
  static const char* kRemoved[] = {"block_hashes", "medium", "group_idx"};
  json::object o;
  o["type"] = a.at(0);
  const std::string_view tag = a.at(0).as_string();
  for (size_t i = 1; i < a.size(); ++i) {
    o[tag == "BlockStored" ? kStored[i - 1] : kRemoved[i - 1]] = a[i];
  }
  return o;
}

Event expected_event(const json::value& v) {
  const json::object o = v.is_array() ? named(v.as_array()) : v.as_object();
  const std::string_view type = o.at("type").as_string();
  if (type == "BlockStored") {
    BlockStored s;
    for (const auto& h : o.at("block_hashes").as_array()) s.block_hashes.push_back(json_hash(h));
    if (!o.at("parent_block_hash").is_null()) s.parent_block_hash = json_hash(o.at("parent_block_hash"));
    for (const auto& t : o.at("token_ids").as_array()) {
      s.token_ids.push_back(static_cast<uint32_t>(json_u64(t)));
    }
    s.block_size = static_cast<uint32_t>(json_u64(o.at("block_size")));
    s.lora_id = opt_int(o, "lora_id");
    s.medium = opt_str(o, "medium");
    s.lora_name = opt_str(o, "lora_name");
    if (const auto* ek = o.if_contains("extra_keys"); ek && !ek->is_null()) {
      s.extra_keys_count = static_cast<uint32_t>(ek->as_array().size());
      bool any = false;
      for (const auto& e : ek->as_array()) any = any || !e.is_null();
      if (any) {
        MsgpackWriter w(s.extra_keys_msgpack);
        to_msgpack(*ek, w);
      }
    }
    s.group_idx = opt_int(o, "group_idx");
    s.kv_cache_spec_kind = opt_str(o, "kv_cache_spec_kind");
    s.kv_cache_spec_sliding_window = opt_int(o, "kv_cache_spec_sliding_window");
    s.locality = opt_str(o, "locality");
    s.ownership = opt_str(o, "ownership");
    s.session_id = opt_str(o, "session_id");
    return s;
  }
  if (type == "BlockRemoved") {
    BlockRemoved r;
    for (const auto& h : o.at("block_hashes").as_array()) r.block_hashes.push_back(json_hash(h));
    r.medium = opt_str(o, "medium");
    r.group_idx = opt_int(o, "group_idx");
    r.locality = opt_str(o, "locality");
    r.ownership = opt_str(o, "ownership");
    return r;
  }
  EXPECT_EQ(type, "AllBlocksCleared");
  return AllBlocksCleared{};
}

EventBatch expected_batch(const json::value& v) {
  const json::array& a = v.as_array();
  EventBatch b;
  b.ts = a.at(0).to_number<double>();
  for (const auto& e : a.at(1).as_array()) b.events.push_back(expected_event(e));
  if (a.size() >= 3 && !a[2].is_null()) b.dp_rank = json_int(a[2]);
  return b;
}

std::optional<WireFormat> format_of(std::string_view profile) {
  if (profile == "vllm_map") return WireFormat::kVllmMap;
  if (profile == "vllm_last_array") return WireFormat::kVllmArray;
  if (profile == "vllm_v0_10_array") return WireFormat::kVllmArrayV010;
  if (profile == "vllm_v0_9_0_array") return WireFormat::kVllmArrayV09;
  if (profile == "sglang_array") return WireFormat::kSglangArray;
  return std::nullopt;  // bytes-hash profiles: the encoder writes the int form only
}

TEST(GoldenVectorsTest, EveryProfileAndCaseDecodesToTheEncodedObject) {
  const json::value golden = load_golden();
  size_t cases = 0;
  for (const auto& [profile, profile_cases] : golden.at("vectors").as_object()) {
    for (const auto& [name, c] : profile_cases.as_object()) {
      SCOPED_TRACE(std::string(profile) + "/" + std::string(name));
      const std::string payload = unhex(c.at("hex").as_string());
      auto decoded = decode_batch(byte_span(payload));
      ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
      EXPECT_EQ(*decoded, expected_batch(c.at("object")));
      ++cases;
      if (const auto* unset = c.as_object().if_contains("hex_dp_rank_unset")) {
        const std::string raw = unhex(unset->as_string());
        auto d2 = decode_batch(byte_span(raw));
        ASSERT_TRUE(d2.ok());
        EventBatch want = expected_batch(c.at("object"));
        want.dp_rank.reset();
        EXPECT_EQ(*d2, want);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 35u);  // 7 profiles x 4 cases, + 2 vllm_map extras, + 5 dp-unset variants
}

TEST(GoldenVectorsTest, EncoderReproducesThePayloadsByteForByte) {
  const json::value golden = load_golden();
  size_t checked = 0;
  for (const auto& [profile, profile_cases] : golden.at("vectors").as_object()) {
    const auto format = format_of(profile);
    if (!format) continue;
    for (const auto& [name, c] : profile_cases.as_object()) {
      if (name == "f_forward_compat_must_decode") continue;  // unknown keys are not re-encoded
      SCOPED_TRACE(std::string(profile) + "/" + std::string(name));
      const EventBatch batch = expected_batch(c.at("object"));
      EXPECT_EQ(to_hex(encode_batch(batch, *format)), c.at("hex").as_string());
      ++checked;
      if (const auto* unset = c.as_object().if_contains("hex_dp_rank_unset")) {
        EventBatch no_rank = batch;
        no_rank.dp_rank.reset();
        EXPECT_EQ(to_hex(encode_batch(no_rank, *format)), unset->as_string());
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 24u);  // 5 int-hash profiles x 4, + e_upstream_contract_example, + 3 unset
}

TEST(GoldenVectorsTest, BytesHashesNormaliseToTheIntForm) {
  // vLLM's int form is the last 8 digest bytes; the bytes profiles carry the whole digest.
  const json::value golden = load_golden();
  for (const char* profile : {"vllm_map", "vllm_last_array"}) {
    const auto& ints = golden.at("vectors").at(profile).as_object();
    const auto& bytes = golden.at("vectors").at(std::string(profile) + "_byteshashes").as_object();
    for (const auto& [name, c] : bytes) {
      if (!ints.contains(name)) continue;
      SCOPED_TRACE(std::string(profile) + "/" + std::string(name));
      auto from_bytes = decode_batch(byte_span(unhex(c.at("hex").as_string())));
      auto from_ints = decode_batch(byte_span(unhex(ints.at(name).at("hex").as_string())));
      ASSERT_TRUE(from_bytes.ok() && from_ints.ok());
      EXPECT_EQ(*from_bytes, *from_ints);
    }
  }
  // And the documented numbers: block 0 of the sha256_cbor chain.
  const auto& ext = golden.at("hashes").at("sha256_cbor").at("blocks_int64_external").as_array();
  EXPECT_EQ(ext.at(0).as_uint64(), 10136020141402768972ull);
}

TEST(GoldenVectorsTest, SglangNegativeHashesKeepTheirBitPattern) {
  const json::value golden = load_golden();
  const auto& c = golden.at("vectors").at("sglang_array").at("a_block_stored");
  auto decoded = decode_batch(byte_span(unhex(c.at("hex").as_string())));
  ASSERT_TRUE(decoded.ok());
  const auto& events = golden.at("hashes").at("sglang_sha256_page").at("events_int64").as_array();
  const auto& second = std::get<BlockStored>(decoded->events.at(1));
  EXPECT_EQ(static_cast<int64_t>(second.block_hashes.at(0)), events.at(1).as_int64());
  EXPECT_LT(events.at(1).as_int64(), 0);
  EXPECT_EQ(static_cast<int64_t>(*second.parent_block_hash), events.at(0).as_int64());
}

TEST(GoldenVectorsTest, ZmqFramingExamplesMatchOurSequenceEncoding) {
  const json::value golden = load_golden();
  for (const auto& [seq, hex] : golden.at("zmq").at("seq_examples").as_object()) {
    const uint64_t s = std::stoull(std::string(seq));
    std::string be;
    for (int i = 7; i >= 0; --i) be.push_back(static_cast<char>(static_cast<uint8_t>(s >> (8 * i))));
    EXPECT_EQ(to_hex(be), hex.as_string());
  }
  const auto& msg = golden.at("zmq").at("pub_message_seq0").as_array();
  EXPECT_EQ(unhex(msg.at(0).as_string()), "kv-events");
  EXPECT_EQ(msg.at(2).as_string(),
            golden.at("vectors").at("vllm_map").at("a_block_stored").at("hex").as_string());
}

}  // namespace
}  // namespace infera::events
