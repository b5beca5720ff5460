#include "infera/gateway/engine_poller.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "infera/common/log.h"
#include "infera/common/metrics.h"
#include "infera/http/net.h"

namespace infera::gateway {

// One worker's polling. The loop runs on the timer's strand; stop() may come from any thread.
struct EnginePoll {
  explicit EnginePoll(const net::any_io_executor& strand) : timer(strand) {}
  net::steady_timer timer;  // the wait for the next poll; used on the strand only
  std::mutex mu;            // orders a poll's record() against stop()'s clear()
  bool stopped = false;     // guarded by mu
  bool paused = false;      // guarded by mu
};

namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

constexpr std::string_view kWaiting = "vllm:num_requests_waiting";
constexpr std::string_view kRunning = "vllm:num_requests_running";
constexpr std::string_view kKvUsage = "vllm:kv_cache_usage_perc";

// The kinds of failure, each logged once per worker until it recovers.
enum class Failure : uint8_t {
  kUnreachable,
  kTimeout,
  kHttpStatus,
  kTooLarge,
  kMalformed,
  kMissing,
  kBadValue
};

std::string_view failure_name(Failure f) {
  switch (f) {
    case Failure::kUnreachable:
      return "unreachable";
    case Failure::kTimeout:
      return "timeout";
    case Failure::kHttpStatus:
      return "http_status";
    case Failure::kTooLarge:
      return "too_large";
    case Failure::kMalformed:
      return "malformed";
    case Failure::kMissing:
      return "missing";
    case Failure::kBadValue:
      return "bad_value";
  }
  return "?";
}

struct PollError {
  Failure kind;
  std::string reason;
};

// A function, not a braced PollError in a co_return: GCC 12 (http/awaitable.h).
std::optional<PollError> failure(Failure kind, std::string reason) {
  return PollError{kind, std::move(reason)};
}

// A failed exchange (http::ClientError's status) or body read.
std::optional<PollError> transport_failure(const Status& s) {
  switch (s.code()) {
    case StatusCode::kDeadlineExceeded:
      return failure(Failure::kTimeout, s.message());
    case StatusCode::kResourceExhausted:
      return failure(Failure::kTooLarge, s.message());
    default:
      return failure(Failure::kUnreachable, s.message());
  }
}

std::optional<PollError> parse_failure(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound:
      return failure(Failure::kMissing, s.message());
    case StatusCode::kOutOfRange:
      return failure(Failure::kBadValue, s.message());
    default:
      return failure(Failure::kMalformed, s.message());
  }
}

uint32_t count_of(double v) {
  return static_cast<uint32_t>(std::llround(std::min(v, double{UINT32_MAX})));
}

// What one worker's loop needs; outlives the loop (the header's rule on the EventLoop).
struct PollContext {
  kv::EngineSignals* signals;
  const kv::ActiveLoad* load;
  http::Client* client;
  proxy::Upstream* via;  // null: HTTP through `client`
  std::chrono::milliseconds interval;
  std::chrono::milliseconds deadline;
  size_t max_body_bytes;
};

// GET /metrics through another transport's fetch (its own body bound applies first).
net::awaitable<std::optional<PollError>> poll_via(proxy::Upstream& via, const http::Endpoint& to,
                                                  SteadyTime deadline, size_t max_body_bytes,
                                                  ReportedLoad& out) {
  http::Request request;
  request.target = "/metrics";
  const auto left = std::chrono::duration_cast<Nanos>(deadline - std::chrono::steady_clock::now());
  const SteadyClock clock;
  auto page = co_await via.fetch(to, std::move(request), clock.now() + left);
  if (!page.ok()) co_return transport_failure(page.error().status);
  if (page->status != 200) {
    co_return failure(Failure::kHttpStatus, "/metrics answered HTTP " + std::to_string(page->status));
  }
  if (page->body.size() > max_body_bytes) {
    co_return failure(Failure::kTooLarge, "/metrics page over " + std::to_string(max_body_bytes) + " bytes");
  }
  Result<ReportedLoad> load = parse_engine_load(page->body);
  if (!load.ok()) co_return parse_failure(load.status());
  out = *load;
  co_return std::nullopt;
}

// GET /metrics, the whole exchange before `deadline`, at most `max_body_bytes` of body.
net::awaitable<std::optional<PollError>> poll_once(http::Client& client, const http::Endpoint& to,
                                                   SteadyTime deadline, size_t max_body_bytes,
                                                   ReportedLoad& out) {
  http::Request request;
  request.target = "/metrics";
  auto opened = co_await client.stream(to, std::move(request), deadline);
  if (!opened.ok()) co_return transport_failure(opened.error().status);
  http::ClientStream& page = opened.value();
  if (page.status() != 200) {
    co_return failure(Failure::kHttpStatus,
                      "/metrics answered HTTP " + std::to_string(page.status()));
  }
  const std::string too_large = "/metrics page over " + std::to_string(max_body_bytes) + " bytes";
  const std::string_view length = page.header("Content-Length");
  size_t announced = 0;
  const std::from_chars_result parsed =
      std::from_chars(length.data(), length.data() + length.size(), announced);
  if (parsed.ec == std::errc() && announced > max_body_bytes) {
    co_return failure(Failure::kTooLarge, too_large);
  }
  std::string body;
  for (;;) {
    Result<std::string_view> piece = co_await page.read(deadline);
    if (!piece.ok()) co_return transport_failure(piece.status());
    if (piece->empty()) break;
    if (piece->size() > max_body_bytes - body.size())
      co_return failure(Failure::kTooLarge, too_large);
    body.append(*piece);
  }
  Result<ReportedLoad> load = parse_engine_load(body);
  if (!load.ok()) co_return parse_failure(load.status());
  out = *load;
  co_return std::nullopt;
}

// Polls `m` every interval until its poll is stopped. A poll slower than the interval makes the
// next one wait for the following tick: polls of one worker never overlap or pile up.
net::awaitable<void> poll_loop(PollContext c, FleetMember m, std::shared_ptr<EnginePoll> poll) {
  uint32_t logged = 0;  // kinds of failure logged since the last reading (bit per Failure)
  bool failing = false;
  SteadyTime next = std::chrono::steady_clock::now();
  for (;;) {
    {
      // Checked on the strand right before the wait that stop()'s posted cancel aborts.
      std::lock_guard lock(poll->mu);
      if (poll->stopped) co_return;
    }
    poll->timer.expires_at(next);
    auto [ec] = co_await poll->timer.async_wait(use_nothrow);
    if (ec) continue;  // cancelled by stop()
    const SteadyTime started = std::chrono::steady_clock::now();
    bool paused = false;
    {
      std::lock_guard lock(poll->mu);
      paused = poll->paused;
    }
    if (!paused) {
      ReportedLoad load;
      // Two statements, not a conditional: GCC 12 destroys a co_await's result in a ?: too early.
      std::optional<PollError> failed;
      if (c.via) {
        failed = co_await poll_via(*c.via, m.endpoint, started + c.deadline, c.max_body_bytes, load);
      } else {
        failed = co_await poll_once(*c.client, m.endpoint, started + c.deadline, c.max_body_bytes, load);
      }
      {
        std::lock_guard lock(poll->mu);
        if (poll->stopped) co_return;  // it left: its slot may belong to another worker now
        if (!failed) {
          const kv::WorkerLoad ours = c.load->load(m.slot);  // ours now, as the page was read
          c.signals->record(m.slot, load.waiting, load.running, load.kv_usage, ours.active_requests,
                            ours.prefill_requests);
        }
      }
      {
        std::lock_guard lock(m.rt->mu);
        m.rt->engine_metrics_error = failed ? failed->reason : std::string();
      }
      if (failed) {
        const uint32_t bit = 1u << static_cast<unsigned>(failed->kind);
        if ((logged & bit) == 0) {
          logged |= bit;
          INFERA_LOG(kWarn, "fleet")
              .msg("cannot read the engine's load from its /metrics; the last reading ages out")
              .kv("worker", m.info.id)
              .kv("failure", failure_name(failed->kind))
              .kv("reason", failed->reason);
        }
        failing = true;
      } else if (failing) {
        INFERA_LOG(kInfo, "fleet")
            .msg("reading the engine's load from its /metrics again")
            .kv("worker", m.info.id);
        failing = false;
        logged = 0;
      }
    }
    next += c.interval;
    const SteadyTime now = std::chrono::steady_clock::now();
    if (next <= now) next += c.interval * ((now - next) / c.interval + 1);
  }
}

}  // namespace

Result<ReportedLoad> parse_engine_load(std::string_view page) {
  auto samples = metrics::parse_text(page);
  if (!samples.ok()) return invalid_argument("/metrics: " + samples.status().message());
  constexpr std::string_view kNames[] = {kWaiting, kRunning, kKvUsage};
  size_t series[3] = {0, 0, 0};
  for (const metrics::Sample& s : *samples) {
    for (size_t i = 0; i < 3; ++i) {
      if (s.name != kNames[i]) continue;
      if (!std::isfinite(s.value) || s.value < 0) {
        return out_of_range("/metrics: " + s.name + " is " + std::to_string(s.value));
      }
      ++series[i];
    }
  }
  for (size_t i = 0; i < 3; ++i) {
    if (series[i] == 0) return not_found("/metrics has no " + std::string(kNames[i]));
  }
  ReportedLoad load;
  load.waiting = count_of(metrics::sum_of(*samples, kWaiting));
  load.running = count_of(metrics::sum_of(*samples, kRunning));
  load.kv_usage = metrics::sum_of(*samples, kKvUsage) / static_cast<double>(series[2]);
  return load;
}

EnginePoller::EnginePoller(Options options, kv::EngineSignals& signals, const kv::ActiveLoad& load,
                           http::EventLoop& loop, http::Client& client)
    : options_(options), signals_(signals), load_(load), loop_(loop), client_(client) {}

std::chrono::milliseconds EnginePoller::deadline() const {
  return std::clamp(options_.interval, std::chrono::milliseconds(200),
                    std::chrono::milliseconds(1'000));
}

void EnginePoller::start(const FleetMember& member) {
  if (options_.interval.count() <= 0 || member.endpoint.port == 0) return;
  auto poll = std::make_shared<EnginePoll>(net::make_strand(loop_.context()));
  member.rt->engine_poll = poll;
  const PollContext c{&signals_,         &load_,     &client_,       options_.via,
                      options_.interval, deadline(), options_.max_body_bytes};
  net::co_spawn(
      poll->timer.get_executor(), poll_loop(c, member, poll),
      [id = member.info.id](const std::exception_ptr& e) {
        if (e) {
          INFERA_LOG(kError, "fleet").msg("polling the worker's /metrics stopped").kv("worker", id);
        }
      });
}

void EnginePoller::pause(const FleetMember& member) {
  if (const std::shared_ptr<EnginePoll> poll = member.rt->engine_poll) {
    std::lock_guard lock(poll->mu);
    poll->paused = true;
  }
}

void EnginePoller::stop(const FleetMember& member) {
  if (const std::shared_ptr<EnginePoll> poll = member.rt->engine_poll) {
    {
      std::lock_guard lock(poll->mu);
      poll->stopped = true;
    }
    net::post(poll->timer.get_executor(), [poll] { poll->timer.cancel(); });
  }
  signals_.clear(member.slot);
}

}  // namespace infera::gateway
