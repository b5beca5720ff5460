#include "infera/replica/load_op.h"

#include "infera/events/msgpack.h"

namespace infera::replica {
namespace {

using events::MsgpackInt;
using events::MsgpackReader;
using events::MsgpackWriter;

Status bad(std::string_view why) {
  return invalid_argument("router load op: " + std::string(why));
}

bool parse_kind(std::string_view name, OpKind& out) {
  for (const OpKind kind :
       {OpKind::kAdd, OpKind::kPrefillDone, OpKind::kRelease, OpKind::kHello, OpKind::kBye}) {
    if (name == op_name(kind)) {
      out = kind;
      return true;
    }
  }
  return false;
}

bool read_u64(MsgpackReader& r, uint64_t& out) {
  MsgpackInt v;
  if (!r.read_int(v) || v.negative) return false;
  out = v.bits;
  return true;
}

bool read_u32(MsgpackReader& r, uint32_t& out) {
  uint64_t v = 0;
  if (!read_u64(r, v) || v > UINT32_MAX) return false;
  out = static_cast<uint32_t>(v);
  return true;
}

bool read_blocks(MsgpackReader& r, std::vector<uint64_t>& blocks) {
  uint32_t n = 0;
  if (!r.read_array(n) || n > kMaxOpBlocks) return false;
  blocks.resize(n);
  size_t done = 0;
  while (done < n) {
    done += r.read_u64_run(blocks.data() + done, n - done);
    if (done < n && !read_u64(r, blocks[done++])) return false;
  }
  return true;
}

}  // namespace

std::string_view op_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAdd: return "add";
    case OpKind::kPrefillDone: return "prefill_done";
    case OpKind::kRelease: return "release";
    case OpKind::kHello: return "hello";
    case OpKind::kBye: return "bye";
  }
  return "?";
}

void encode_op(std::string& out, std::string_view router_id, uint64_t seq, const OpFields& op) {
  out.clear();
  MsgpackWriter w(out);
  const bool bare = op.kind == OpKind::kHello || op.kind == OpKind::kBye;  // no worker, request
  const bool add = op.kind == OpKind::kAdd;
  w.map(4u + (bare ? 0u : 2u) + (add ? 3u : 0u));
  w.str("v");
  w.uint(kLoadOpVersion);
  w.str("router_id");
  w.str(router_id);
  w.str("seq");
  w.uint(seq);
  w.str("op");
  w.str(op_name(op.kind));
  if (bare) return;
  w.str("worker");
  w.str(op.worker);
  w.str("request");
  w.uint(op.request);
  if (!add) return;
  w.str("blocks");
  w.array(static_cast<uint32_t>(op.blocks.size()));
  for (const uint64_t h : op.blocks) w.uint(h);
  w.str("uncached");
  w.uint(op.uncached);
  w.str("cached");
  w.uint(op.cached);
}

Result<LoadOp> decode_op(std::span<const uint8_t> bytes, std::vector<uint64_t>& blocks) {
  blocks.clear();
  MsgpackReader r(bytes, events::MsgpackLimits{.max_length = kMaxOpBlocks, .max_depth = 8});
  uint32_t n = 0;
  if (!r.read_map(n)) return bad("not a msgpack map");
  LoadOp op;
  uint64_t version = 0;
  bool has_router = false, has_seq = false, has_op = false, has_worker = false,
       has_request = false, has_blocks = false;
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view key;
    if (!r.read_str(key)) return bad("a key is not a string");
    bool ok = true;
    if (key == "v") {
      ok = read_u64(r, version);
    } else if (key == "router_id") {
      ok = has_router = r.read_str(op.router_id);
    } else if (key == "seq") {
      ok = has_seq = read_u64(r, op.seq);
    } else if (key == "op") {
      std::string_view name;
      if (!r.read_str(name)) return bad("op is not a string");
      if (!parse_kind(name, op.kind)) return bad("unknown op \"" + std::string(name.substr(0, 32)) + "\"");
      has_op = true;
    } else if (key == "worker") {
      ok = has_worker = r.read_str(op.worker);
    } else if (key == "request") {
      ok = has_request = read_u64(r, op.request);
    } else if (key == "blocks") {
      ok = has_blocks = read_blocks(r, blocks);
    } else if (key == "uncached") {
      ok = read_u32(r, op.uncached);
    } else if (key == "cached") {
      ok = read_u32(r, op.cached);
    } else {
      ok = r.skip();
    }
    if (!ok) return bad("field \"" + std::string(key.substr(0, 32)) + "\" is malformed");
  }
  if (version != kLoadOpVersion) return bad("version " + std::to_string(version) + " is not 1");
  if (!has_router || op.router_id.empty() || !has_seq || !has_op) {
    return bad("router_id, seq and op are required");
  }
  if (op.kind == OpKind::kHello || op.kind == OpKind::kBye) return op;
  if (!has_request) return bad("request is required");
  if (op.kind != OpKind::kAdd) {
    blocks.clear();
    return op;
  }
  if (!has_worker || op.worker.empty() || !has_blocks) return bad("an add needs its worker and blocks");
  return op;
}

}  // namespace infera::replica
