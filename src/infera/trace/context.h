// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header read from a
// client and written to a worker, ids made here, and the sampling decision of a trace the
// router starts. Pure functions over bytes (the header is untrusted: malformed means absent);
// new ids come from a per-thread generator seeded from the OS. Any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace infera::trace {

// A 128-bit trace id; all zeros is invalid (the spec's "no trace").
struct TraceId {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool valid() const { return hi != 0 || lo != 0; }
  std::string hex() const;  // 32 lowercase hex digits
  friend bool operator==(const TraceId&, const TraceId&) = default;
};

// What a valid `traceparent` says: the caller's trace, its span (our parent) and whether the
// caller records this trace (the sampled flag).
struct ParentContext {
  TraceId trace_id;
  uint64_t span_id = 0;
  bool sampled = false;
};

// Parses `traceparent` as the spec's version 00 and its forward-compatibility rule (a higher
// version is read by its first four fields when what follows them starts with '-'). Empty on
// anything else: wrong length, uppercase or non-hex digits, version ff, an all-zero trace or
// parent id. The spec then says: start a new trace and ignore `tracestate`.
std::optional<ParentContext> parse_traceparent(std::string_view header);

// "00-<trace id>-<span id>-<01 | 00>".
std::string format_traceparent(const TraceId& trace, uint64_t span_id, bool sampled);

std::string hex16(uint64_t id);  // 16 lowercase hex digits
void append_hex16(std::string& out, uint64_t id);  // the same digits appended to `out`

// Random, never zero.
TraceId new_trace_id();
uint64_t new_span_id();

// Whether a trace this router starts is recorded at `ratio` (0..1): decided by the trace id's
// low 64 bits, as OpenTelemetry's TraceIdRatioBased sampler does, so every service sampling by
// the same ratio keeps the same traces.
bool sample_trace(const TraceId& trace, double ratio);

}  // namespace infera::trace
