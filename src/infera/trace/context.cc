#include "infera/trace/context.h"

#include <random>

#include "infera/common/random.h"

namespace infera::trace {
namespace {

constexpr char kHex[] = "0123456789abcdef";

// Lowercase hex only, as the spec requires; -1 otherwise.
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// `text` (at most 16 digits) as a number; empty when a digit is not lowercase hex.
std::optional<uint64_t> parse_hex(std::string_view text) {
  uint64_t v = 0;
  for (const char c : text) {
    const int d = hex_value(c);
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

Rng& thread_rng() {
  thread_local Rng rng([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }());
  return rng;
}

}  // namespace

std::string TraceId::hex() const {
  std::string out;
  out.reserve(32);
  append_hex16(out, hi);
  append_hex16(out, lo);
  return out;
}

void append_hex16(std::string& out, uint64_t v) {
  char buf[16];
  for (int i = 15; i >= 0; --i, v >>= 4) buf[i] = kHex[v & 0xf];
  out.append(buf, 16);
}

std::string hex16(uint64_t id) {
  std::string out;
  out.reserve(16);
  append_hex16(out, id);
  return out;
}

std::optional<ParentContext> parse_traceparent(std::string_view h) {
  // version(2) '-' trace-id(32) '-' parent-id(16) '-' flags(2) = 55 bytes
  if (h.size() < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-') return std::nullopt;
  const std::optional<uint64_t> version = parse_hex(h.substr(0, 2));
  if (!version || *version == 0xff) return std::nullopt;
  if (*version == 0 ? h.size() != 55 : (h.size() > 55 && h[55] != '-')) return std::nullopt;
  const auto hi = parse_hex(h.substr(3, 16));
  const auto lo = parse_hex(h.substr(19, 16));
  const auto span = parse_hex(h.substr(36, 16));
  const auto flags = parse_hex(h.substr(53, 2));
  if (!hi || !lo || !span || !flags) return std::nullopt;
  ParentContext p{.trace_id = {*hi, *lo}, .span_id = *span, .sampled = (*flags & 1) != 0};
  if (!p.trace_id.valid() || p.span_id == 0) return std::nullopt;
  return p;
}

std::string format_traceparent(const TraceId& trace, uint64_t span_id, bool sampled) {
  std::string out;
  out.reserve(55);
  out += "00-";
  append_hex16(out, trace.hi);
  append_hex16(out, trace.lo);
  out += '-';
  append_hex16(out, span_id);
  out += sampled ? "-01" : "-00";
  return out;
}

TraceId new_trace_id() {
  TraceId id{thread_rng().next(), thread_rng().next()};
  if (!id.valid()) id.lo = 1;
  return id;
}

uint64_t new_span_id() {
  const uint64_t id = thread_rng().next();
  return id != 0 ? id : 1;
}

bool sample_trace(const TraceId& trace, double ratio) {
  if (ratio >= 1.0) return true;
  if (ratio <= 0.0) return false;
  // TraceIdRatioBased: the low 63 bits below ratio * 2^63.
  const auto bound = static_cast<uint64_t>(ratio * 9223372036854775808.0);
  return (trace.lo & 0x7fffffffffffffffULL) < bound;
}

}  // namespace infera::trace
