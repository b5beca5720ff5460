// One request's place in a distributed trace (docs/metrics.md, "Traces"): the W3C context
// it continues (the client's traceparent) or the trace the router starts, the router's span id,
// which the worker's call carries as its parent, and the span recorded when the request ends.
// With no collector (--otlp-traces-endpoint unset) nothing is recorded and the client's trace
// headers pass to the worker unchanged: the trace id is only read, for the access line.
// Pure; the caller submits the span (trace::SpanExporter).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "infera/http/message.h"
#include "infera/trace/span.h"

namespace infera::gateway {

struct RequestTrace {
  std::string trace_id;  // 32 hex digits for the access line; "" when there is no trace
  trace::TraceId id;
  uint64_t span_id = 0;  // the router's span; 0 when the router does not trace
  uint64_t parent_span_id = 0;  // the client's span; 0 for a trace the router started
  bool sampled = false;         // the span is recorded and exported
  std::string tracestate;       // the client's, when its trace continues
  std::string traceparent;      // what the worker's calls carry; "" when the router does not trace
  int64_t start_unix_ns = 0;
};

// `tracing`: a collector is configured; `ratio`: --otlp-sample-ratio for traces started here.
RequestTrace begin_trace(const http::Request& request, bool tracing, double ratio);

// What is known of a request when it ends: its access line and its span.
struct RequestEnd {
  std::string_view request_id, route, model, worker;
  int status = 0;
  uint32_t prompt_tokens = 0;
  uint32_t hit_blocks = 0;  // predicted on the chosen worker (cache and predicted-on-route)
  uint32_t request_blocks = 0;
  uint32_t retries = 0;
  uint64_t output_tokens = 0;  // generated, as the relayed answer reports or streams them
  double ttft_s = -1;  // -1: no first byte relayed
  double duration_s = 0;
  double tokenize_s = 0, hash_s = 0, score_s = 0;  // the router's own work
  const std::vector<trace::SpanEvent>* events = nullptr;  // retries, as they happened
};

// The router's span ("POST <route>", kind SERVER) of a request that ended as `end` says:
// HTTP and GenAI semantic-convention attributes plus infera.* ones; status ERROR for a 5xx.
trace::Span router_span(const RequestTrace& t, const RequestEnd& end);

// The wall-clock time `elapsed_s` after the request's start, for span events.
int64_t unix_ns_after(const RequestTrace& t, double elapsed_s);

}  // namespace infera::gateway
