#include "infera/events/nats_envelope.h"

#include <cstring>

#include "infera/events/msgpack.h"

namespace infera::events {
namespace {

uint64_t load_be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

Status bad(const char* why) { return invalid_argument(std::string("KV-event envelope: ") + why); }

}  // namespace

std::array<uint8_t, 24> NatsEnvelope::seq_frame() const {
  std::array<uint8_t, 24> f{};
  for (int i = 0; i < 8; ++i) f[static_cast<size_t>(i)] = static_cast<uint8_t>(seq >> (56 - 8 * i));
  if (has_publisher_id) std::memcpy(f.data() + 8, publisher_id.data(), 16);
  return f;
}

std::string encode_envelope(std::string_view worker_id, std::span<const uint8_t> seq_frame,
                            std::string_view topic, std::span<const uint8_t> batch) {
  std::string out;
  encode_envelope_to(out, worker_id, seq_frame, topic, batch);
  return out;
}

void encode_envelope_to(std::string& out, std::string_view worker_id,
                        std::span<const uint8_t> seq_frame, std::string_view topic,
                        std::span<const uint8_t> batch) {
  out.clear();
  out.reserve(batch.size() + worker_id.size() + topic.size() + 64);
  MsgpackWriter w(out);
  const bool with_id = seq_frame.size() == 24;
  w.map(with_id ? 5 : 4);
  w.str("worker_id");
  w.str(worker_id);
  w.str("seq");
  w.uint(seq_frame.size() >= 8 ? load_be64(seq_frame.data()) : 0);
  w.str("topic");
  w.str(topic);
  w.str("batch");
  w.bin(batch);
  if (with_id) {
    w.str("publisher_id");
    w.bin(seq_frame.subspan(8, 16));
  }
}

std::string encode_replay_end() {
  std::string out;
  MsgpackWriter w(out);
  w.map(1);
  w.str("end");
  w.boolean(true);
  return out;
}

Result<NatsEnvelope> decode_envelope(std::span<const uint8_t> bytes) {
  MsgpackReader r(bytes);
  uint32_t n = 0;
  if (!r.read_map(n)) return bad("not a msgpack map");
  NatsEnvelope e;
  bool has_worker = false, has_seq = false, has_batch = false;
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view key;
    if (!r.read_str(key)) return bad("a key is not a string");
    if (key == "worker_id") {
      if (!r.read_str(e.worker_id)) return bad("worker_id is not a string");
      has_worker = true;
    } else if (key == "seq") {
      MsgpackInt v;
      if (!r.read_int(v) || v.negative) return bad("seq is not an unsigned integer");
      e.seq = v.bits;
      has_seq = true;
    } else if (key == "topic") {
      if (!r.read_str(e.topic)) return bad("topic is not a string");
    } else if (key == "batch") {
      if (!r.read_bin(e.batch)) return bad("batch is not bin");
      has_batch = true;
    } else if (key == "publisher_id") {
      std::span<const uint8_t> id;
      if (!r.read_bin(id) || id.size() != 16) return bad("publisher_id is not bin(16)");
      std::memcpy(e.publisher_id.data(), id.data(), 16);
      e.has_publisher_id = true;
    } else if (key == "end") {
      if (!r.read_bool(e.end)) return bad("end is not a bool");
    } else if (!r.skip()) {
      return bad("truncated");
    }
  }
  if (!r.ok()) return bad("truncated");
  if (e.end) return e;
  if (!has_worker || !has_seq || !has_batch) return bad("worker_id, seq and batch are required");
  return e;
}

std::string encode_replay_request(const ReplayRequest& request) {
  std::string out;
  MsgpackWriter w(out);
  w.map(request.dp_rank != 0 ? 2 : 1);
  w.str("from_seq");
  w.uint(request.from_seq);
  if (request.dp_rank != 0) {
    w.str("dp_rank");
    w.sint(request.dp_rank);
  }
  return out;
}

Result<ReplayRequest> decode_replay_request(std::span<const uint8_t> bytes) {
  MsgpackReader r(bytes);
  uint32_t n = 0;
  if (!r.read_map(n)) return invalid_argument("KV replay request: not a msgpack map");
  ReplayRequest req;
  bool has_from = false;
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view key;
    if (!r.read_str(key)) return invalid_argument("KV replay request: a key is not a string");
    MsgpackInt v;
    if (key == "from_seq") {
      if (!r.read_int(v) || v.negative) return invalid_argument("KV replay request: bad from_seq");
      req.from_seq = v.bits;
      has_from = true;
    } else if (key == "dp_rank") {
      if (!r.read_int(v)) return invalid_argument("KV replay request: bad dp_rank");
      req.dp_rank = static_cast<int64_t>(v.bits);
      if (req.dp_rank < 0 || req.dp_rank > 1024) return invalid_argument("KV replay request: dp_rank out of range");
    } else if (!r.skip()) {
      return invalid_argument("KV replay request: truncated");
    }
  }
  if (!r.ok() || !has_from) return invalid_argument("KV replay request: from_seq is required");
  return req;
}

}  // namespace infera::events
