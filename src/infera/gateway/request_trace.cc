#include "infera/gateway/request_trace.h"

#include <chrono>
#include <cmath>

namespace infera::gateway {
namespace {

// A tracestate longer than the spec's 512 bytes may be dropped whole, which we do.
constexpr size_t kMaxTraceState = 512;

int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

RequestTrace begin_trace(const http::Request& request, bool tracing, double ratio) {
  RequestTrace t;
  const std::optional<trace::ParentContext> parent =
      trace::parse_traceparent(request.header("traceparent"));
  if (parent) t.trace_id = parent->trace_id.hex();
  if (!tracing) return t;
  t.start_unix_ns = unix_now_ns();
  if (parent) {
    t.id = parent->trace_id;
    t.parent_span_id = parent->span_id;
    t.sampled = parent->sampled;  // parent-based: the caller decided for its trace
    const std::string_view state = request.header("tracestate");
    if (state.size() <= kMaxTraceState) t.tracestate = std::string(state);
  } else {
    t.id = trace::new_trace_id();
    t.trace_id = t.id.hex();
    t.sampled = trace::sample_trace(t.id, ratio);
  }
  t.span_id = trace::new_span_id();
  t.traceparent = trace::format_traceparent(t.id, t.span_id, t.sampled);
  return t;
}

int64_t unix_ns_after(const RequestTrace& t, double elapsed_s) {
  return t.start_unix_ns + static_cast<int64_t>(std::llround(elapsed_s * 1e9));
}

trace::Span router_span(const RequestTrace& t, const RequestEnd& e) {
  trace::Span s;
  s.trace_id = t.id;
  s.span_id = t.span_id;
  s.parent_span_id = t.parent_span_id;
  s.trace_state = t.tracestate;
  s.name = "POST " + std::string(e.route);
  s.kind = trace::SpanKind::kServer;
  s.start_unix_ns = t.start_unix_ns;
  s.end_unix_ns = unix_ns_after(t, e.duration_s);
  auto& a = s.attributes;
  a.reserve(16);
  a.push_back({"http.request.method", std::string("POST")});
  a.push_back({"http.route", std::string(e.route)});
  a.push_back({"http.response.status_code", int64_t{e.status}});
  if (!e.model.empty()) a.push_back({"gen_ai.request.model", std::string(e.model)});
  a.push_back({"gen_ai.usage.input_tokens", int64_t{e.prompt_tokens}});
  if (e.output_tokens > 0) {
    a.push_back({"gen_ai.usage.output_tokens", static_cast<int64_t>(e.output_tokens)});
  }
  a.push_back({"infera.request_id", std::string(e.request_id)});
  if (!e.worker.empty()) a.push_back({"infera.worker", std::string(e.worker)});
  a.push_back({"infera.request_blocks", int64_t{e.request_blocks}});
  a.push_back({"infera.predicted_hit_blocks", int64_t{e.hit_blocks}});
  a.push_back({"infera.tokenize_s", e.tokenize_s});
  a.push_back({"infera.hash_s", e.hash_s});
  a.push_back({"infera.score_s", e.score_s});
  a.push_back({"infera.retries", int64_t{e.retries}});
  if (e.ttft_s >= 0) a.push_back({"infera.ttft_s", e.ttft_s});
  if (e.events != nullptr) s.events = *e.events;
  if (e.status >= 500) {
    s.error = true;
    s.status_message = "HTTP " + std::to_string(e.status);
  }
  return s;
}

}  // namespace infera::gateway
