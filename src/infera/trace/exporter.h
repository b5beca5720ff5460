// The OTLP/HTTP span exporter: spans handed over by request threads are queued (bounded) and
// sent in batches as JSON (span.h) to an OpenTelemetry collector's /v1/traces, on a thread of
// the exporter's own. A request never waits for the collector: submit() takes a short lock and
// drops the span, counted, when the queue is full; a batch the collector refuses, or that fails
// or times out, is dropped and counted too (no retry: a trace is worth less than the memory to
// hold it through an outage). Counters, in the registry given:
//   infera_otlp_spans_exported_total, infera_otlp_spans_dropped_total{reason=queue_full|export_failed}.
// submit: any thread. shutdown: one non-exporter thread (the composition root's).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "infera/common/metrics.h"
#include "infera/common/status.h"
#include "infera/trace/span.h"

namespace infera::trace {

struct ExporterOptions {
  // "http://host:port[/path]"; a missing path (or "/") is OTLP/HTTP's /v1/traces.
  std::string endpoint;
  Resource resource;
  size_t max_queue = 4096;  // spans waiting; beyond: dropped (queue_full)
  size_t max_batch = 512;   // spans per export request; a full batch is sent at once
  std::chrono::milliseconds flush_interval{1'000};  // a partial batch waits at most this long
  std::chrono::milliseconds timeout{5'000};         // one export request, connect included
};

class SpanExporter {
 public:
  // Parses the endpoint (an error names what is wrong with it) and starts the thread.
  static Result<std::unique_ptr<SpanExporter>> start(ExporterOptions options,
                                                     metrics::Registry& registry);
  ~SpanExporter();  // shutdown(0) unless already shut down
  SpanExporter(const SpanExporter&) = delete;
  SpanExporter& operator=(const SpanExporter&) = delete;

  // Queues a finished span for export; false when it was dropped (queue full, shut down).
  bool submit(Span span);
  // Sends what is queued, for at most `deadline`, then stops the thread. Idempotent.
  void shutdown(std::chrono::milliseconds deadline);

  struct Impl;

 private:
  explicit SpanExporter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace infera::trace
