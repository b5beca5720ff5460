#include <charconv>
#include <cmath>

#include "infera/common/json_string.h"
#include "infera/trace/context.h"
#include "infera/trace/span.h"

namespace infera::trace {
namespace {

// Attribute and field names are the code's literals: plain ASCII, appended as they are.
void append_key(std::string& out, std::string_view key) {
  out += '"';
  out += key;
  out += "\":";
}

template <typename Number>
void append_number(std::string& out, Number v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

void append_u64_string(std::string& out, uint64_t v) {
  out += '"';
  append_number(out, v);
  out += '"';
}

void append_value(std::string& out, const Attribute& a) {
  out += '{';
  if (const auto* s = std::get_if<std::string>(&a.value)) {
    append_key(out, "stringValue");
    append_json_string(out, *s);
  } else if (const auto* i = std::get_if<int64_t>(&a.value)) {
    out += "\"intValue\":\"";
    append_number(out, *i);
    out += '"';
  } else if (const auto* d = std::get_if<double>(&a.value)) {
    out += "\"doubleValue\":";
    append_number(out, std::isfinite(*d) ? *d : 0.0);  // JSON has no NaN or infinity
  } else {
    out += std::get<bool>(a.value) ? "\"boolValue\":true" : "\"boolValue\":false";
  }
  out += '}';
}

void append_attributes(std::string& out, const std::vector<Attribute>& attributes) {
  append_key(out, "attributes");
  out += '[';
  for (size_t i = 0; i < attributes.size(); ++i) {
    if (i != 0) out += ',';
    out += "{\"key\":\"";
    out += attributes[i].key;
    out += "\",\"value\":";
    append_value(out, attributes[i]);
    out += '}';
  }
  out += ']';
}

void append_events(std::string& out, const std::vector<SpanEvent>& events) {
  append_key(out, "events");
  out += '[';
  for (size_t i = 0; i < events.size(); ++i) {
    if (i != 0) out += ',';
    out += "{\"timeUnixNano\":";
    append_u64_string(out, static_cast<uint64_t>(events[i].time_unix_ns));
    out += ",\"name\":";
    append_json_string(out, events[i].name);
    out += ',';
    append_attributes(out, events[i].attributes);
    out += '}';
  }
  out += ']';
}

void append_span(std::string& out, const Span& s) {
  out += "{\"traceId\":\"";
  append_hex16(out, s.trace_id.hi);
  append_hex16(out, s.trace_id.lo);
  out += "\",\"spanId\":\"";
  append_hex16(out, s.span_id);
  out += '"';
  if (s.parent_span_id != 0) {
    out += ",\"parentSpanId\":\"";
    append_hex16(out, s.parent_span_id);
    out += '"';
  }
  if (!s.trace_state.empty()) {
    out += ",\"traceState\":";
    append_json_string(out, s.trace_state);
  }
  out += ",\"name\":";
  append_json_string(out, s.name);
  out += ",\"kind\":";
  append_number(out, static_cast<int>(s.kind));
  out += ",\"startTimeUnixNano\":";
  append_u64_string(out, static_cast<uint64_t>(s.start_unix_ns));
  out += ",\"endTimeUnixNano\":";
  append_u64_string(out, static_cast<uint64_t>(s.end_unix_ns));
  out += ',';
  append_attributes(out, s.attributes);
  out += ',';
  append_events(out, s.events);
  out += ",\"status\":{";
  if (s.error) {
    out += "\"code\":2,\"message\":";  // STATUS_CODE_ERROR
    append_json_string(out, s.status_message);
  }
  out += "}}";
}

std::vector<Attribute> resource_attributes(const Resource& r) {
  std::vector<Attribute> a{{"service.name", r.service_name}, {"telemetry.sdk.name", std::string("infera")},
                           {"telemetry.sdk.language", std::string("cpp")}};
  if (!r.service_version.empty()) a.push_back({"service.version", r.service_version});
  if (!r.instance_id.empty()) a.push_back({"service.instance.id", r.instance_id});
  return a;
}

}  // namespace

std::string otlp_json(std::span<const Span> spans, const Resource& resource) {
  std::string out;
  out.reserve(512 + spans.size() * 900);
  out += "{\"resourceSpans\":[{\"resource\":{";
  append_attributes(out, resource_attributes(resource));
  out += "},\"scopeSpans\":[{\"scope\":{\"name\":\"infera\"";
  if (!resource.service_version.empty()) {
    out += ",\"version\":";
    append_json_string(out, resource.service_version);
  }
  out += "},\"spans\":[";
  for (size_t i = 0; i < spans.size(); ++i) {
    if (i != 0) out += ',';
    append_span(out, spans[i]);
  }
  out += "]}]}]}";
  return out;
}

}  // namespace infera::trace
