#include "infera/trace/exporter.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "infera/common/log.h"
#include "infera/http/client.h"
#include "infera/http/net.h"

namespace infera::trace {

struct Target {
  http::Endpoint endpoint;
  std::string path;
};

namespace {

Result<Target> parse_target(const std::string& text) {
  if (!text.starts_with("http://")) {
    return invalid_argument("--otlp-traces-endpoint '" + text.substr(0, 200) +
                            "' is not an http://host:port[/path] URL");
  }
  Result<http::Endpoint> endpoint = http::parse_endpoint(text);
  if (!endpoint.ok()) {
    return invalid_argument("--otlp-traces-endpoint: " + endpoint.status().message());
  }
  const size_t slash = text.find('/', 7);
  std::string path = slash == std::string::npos ? std::string() : text.substr(slash);
  if (path.empty() || path == "/") path = "/v1/traces";
  return Target{std::move(*endpoint), std::move(path)};
}

}  // namespace

struct SpanExporter::Impl {
  Impl(ExporterOptions o, Target t, metrics::Registry& r)
      : options(std::move(o)),
        target(std::move(t)),
        exported(r.counter("infera_otlp_spans_exported_total",
                           "Spans the OTLP collector accepted.")),
        dropped_full(r.counter("infera_otlp_spans_dropped_total",
                               "Spans not exported, by reason: the queue was full, or the "
                               "collector refused or did not answer their batch.",
                               {{"reason", "queue_full"}})),
        dropped_failed(r.counter("infera_otlp_spans_dropped_total",
                                 "Spans not exported, by reason: the queue was full, or the "
                                 "collector refused or did not answer their batch.",
                                 {{"reason", "export_failed"}})),
        client(client_options(options)) {}

  static http::ClientOptions client_options(const ExporterOptions& o) {
    http::ClientOptions c;
    c.connect_timeout = o.timeout;
    c.write_timeout = o.timeout;
    c.response_timeout = o.timeout;
    c.read_timeout = o.timeout;
    c.max_body_bytes = size_t{1} << 20;
    c.max_idle_per_endpoint = 1;
    return c;
  }

  net::awaitable<void> run();
  net::awaitable<void> send(std::vector<Span> batch);
  std::vector<Span> take_batch();

  ExporterOptions options;
  Target target;
  metrics::Counter& exported;
  metrics::Counter& dropped_full;
  metrics::Counter& dropped_failed;

  std::mutex mu;
  std::deque<Span> queue;  // guarded by mu
  bool stopping = false;   // guarded by mu
  bool done = false;       // guarded by mu: run() has returned
  std::condition_variable done_cv;
  bool failing = false;  // exporter thread only: the last export failed (log once per streak)

  net::io_context ctx;
  net::steady_timer wake{ctx};
  http::Client client;  // after ctx: destroyed before it
  std::thread thread;
};

Result<std::unique_ptr<SpanExporter>> SpanExporter::start(ExporterOptions options,
                                                          metrics::Registry& registry) {
  INFERA_ASSIGN_OR_RETURN(Target target, parse_target(options.endpoint));
  if (options.max_batch == 0 || options.max_queue == 0) {
    return invalid_argument("the OTLP exporter needs a batch and a queue of at least one span");
  }
  auto impl = std::make_unique<Impl>(std::move(options), std::move(target), registry);
  Impl* i = impl.get();
  net::co_spawn(i->ctx, i->run(), net::detached);
  i->thread = std::thread([i] { i->ctx.run(); });
  return std::unique_ptr<SpanExporter>(new SpanExporter(std::move(impl)));
}

SpanExporter::SpanExporter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SpanExporter::~SpanExporter() { shutdown(std::chrono::milliseconds(0)); }

bool SpanExporter::submit(Span span) {
  Impl& i = *impl_;
  size_t queued = 0;
  {
    std::lock_guard lock(i.mu);
    if (i.stopping || i.queue.size() >= i.options.max_queue) {
      i.dropped_full.inc();
      return false;
    }
    i.queue.push_back(std::move(span));
    queued = i.queue.size();
  }
  // A batch is full: wake the sender now rather than at the end of its interval.
  if (queued == i.options.max_batch) net::post(i.ctx, [&i] { i.wake.cancel(); });
  return true;
}

void SpanExporter::shutdown(std::chrono::milliseconds deadline) {
  Impl& i = *impl_;
  if (!i.thread.joinable()) return;
  {
    std::lock_guard lock(i.mu);
    i.stopping = true;
  }
  net::post(i.ctx, [&i] { i.wake.cancel(); });
  {
    std::unique_lock lock(i.mu);
    i.done_cv.wait_for(lock, deadline, [&i] { return i.done; });
  }
  i.ctx.stop();  // an export still in flight at the deadline is abandoned (its spans dropped)
  i.thread.join();
  std::lock_guard lock(i.mu);
  i.dropped_failed.inc(static_cast<double>(i.queue.size()));
  i.queue.clear();
}

std::vector<Span> SpanExporter::Impl::take_batch() {
  std::lock_guard lock(mu);
  const size_t n = std::min(queue.size(), options.max_batch);
  std::vector<Span> batch(std::make_move_iterator(queue.begin()),
                          std::make_move_iterator(queue.begin() + static_cast<ptrdiff_t>(n)));
  queue.erase(queue.begin(), queue.begin() + static_cast<ptrdiff_t>(n));
  return batch;
}

net::awaitable<void> SpanExporter::Impl::run() {
  for (;;) {
    bool wait = false;
    {
      std::lock_guard lock(mu);
      if (stopping && queue.empty()) break;
      wait = !stopping && queue.size() < options.max_batch;
    }
    if (wait) {
      wake.expires_after(options.flush_interval);
      co_await wake.async_wait(use_nothrow);  // the interval, a full batch or the shutdown
    }
    std::vector<Span> batch = take_batch();
    if (!batch.empty()) co_await send(std::move(batch));
  }
  std::lock_guard lock(mu);
  done = true;
  done_cv.notify_all();
}

net::awaitable<void> SpanExporter::Impl::send(std::vector<Span> batch) {
  http::Request request;
  request.method = http::Method::kPost;
  request.target = target.path;
  request.headers.push_back({"Content-Type", "application/json"});
  request.body = otlp_json(batch, options.resource);
  auto answer = co_await client.request(target.endpoint, std::move(request),
                                        std::chrono::steady_clock::now() + options.timeout);
  const double n = static_cast<double>(batch.size());
  if (answer.ok() && answer->status / 100 == 2) {
    exported.inc(n);
    if (failing) {
      INFERA_LOG(kInfo, "trace").msg("the OTLP collector accepts spans again");
    }
    failing = false;
    co_return;
  }
  dropped_failed.inc(n);
  if (!failing) {
    INFERA_LOG(kWarn, "trace")
        .msg("the OTLP collector did not take a batch of spans; dropping them (counted in "
             "infera_otlp_spans_dropped_total) until it does")
        .kv("endpoint", options.endpoint)
        .kv("error", answer.ok() ? "HTTP " + std::to_string(answer->status) + ": " +
                                       answer->body.substr(0, 200)
                                 : answer.status().message());
  }
  failing = true;
}

}  // namespace infera::trace
