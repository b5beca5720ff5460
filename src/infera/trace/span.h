// A finished span as the router records it, and its OTLP/HTTP JSON encoding (the
// ExportTraceServiceRequest of opentelemetry-proto, in the protobuf JSON mapping OTLP/HTTP
// specifies: trace and span ids as lowercase hex, 64-bit integers as decimal strings, enums as
// numbers). Pure; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "infera/trace/context.h"

namespace infera::trace {

enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };

struct Attribute {
  std::string_view key;  // a string literal: attribute names are the code's, never input
  std::variant<std::string, int64_t, double, bool> value;
};

struct SpanEvent {
  std::string name;
  int64_t time_unix_ns = 0;
  std::vector<Attribute> attributes;
};

struct Span {
  TraceId trace_id;
  uint64_t span_id = 0;
  uint64_t parent_span_id = 0;  // 0: a root span
  std::string trace_state;      // the caller's `tracestate`, as received
  std::string name;
  SpanKind kind = SpanKind::kServer;
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  std::vector<Attribute> attributes;
  std::vector<SpanEvent> events;
  bool error = false;  // status ERROR (else UNSET)
  std::string status_message;
};

// The service the spans come from (the resource's service.name and service.version).
struct Resource {
  std::string service_name = "infera";
  std::string service_version;
  std::string instance_id;  // service.instance.id; "" leaves it out
};

// One export request carrying `spans` under one resource and the "infera" scope.
std::string otlp_json(std::span<const Span> spans, const Resource& resource);

}  // namespace infera::trace
