#include "infera/loadgen/http_runner.h"

#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "infera/common/metrics.h"
#include "infera/http/client.h"
#include "infera/http/event_loop.h"
#include "infera/http/net.h"
#include "infera/http/sse.h"

namespace infera::loadgen {

using sim::Dependencies;
using sim::RequestSpec;
using sim::RunRecorder;
using sim::Workload;

namespace json = boost::json;
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs one coroutine on the loop and waits for its value.
template <typename T, typename Fn>
T run_sync(http::EventLoop& loop, Fn fn) {
  std::promise<T> p;
  // An exception (a bug) must not leave the caller waiting forever on the promise.
  net::co_spawn(loop.context(), [&]() -> net::awaitable<void> {
    try {
      p.set_value(co_await fn());
    } catch (...) {
      p.set_exception(std::current_exception());
    }
  }, net::detached);
  return p.get_future().get();
}

struct FleetCounters {
  bool from_admin = false;
  std::map<std::string, uint64_t> requests;  // worker id -> requests served
  double cache_hits = 0, cache_queries = 0;  // tokens, summed over the fleet
  bool have_cache_counters = false;
  std::string policy;
};

net::awaitable<std::optional<std::string>> get_body(http::Client& client, http::Endpoint ep,
                                                    std::string target, std::string token) {
  http::Request r;
  r.target = std::move(target);
  if (!token.empty()) r.headers.push_back({"Authorization", "Bearer " + token});
  auto resp = co_await client.request(ep, std::move(r));
  if (!resp.ok() || resp->status != 200) co_return std::nullopt;
  co_return std::move(resp->body);
}

void add_cache_counters(std::string_view metrics_text, FleetCounters& out) {
  auto samples = metrics::parse_text(metrics_text);
  if (!samples.ok()) return;
  bool found = false;
  for (const auto& s : *samples) found = found || s.name == "vllm:prefix_cache_queries_total";
  if (!found) return;
  out.have_cache_counters = true;
  out.cache_hits += metrics::sum_of(*samples, "vllm:prefix_cache_hits_total");
  out.cache_queries += metrics::sum_of(*samples, "vllm:prefix_cache_queries_total");
}

// A gateway's /v1/admin/workers: per worker, the requests it routed there and the worker's URL
// (`urls`, when given). from_admin is false when `ep` is not a gateway.
net::awaitable<FleetCounters> read_requests(http::Client& client, http::Endpoint ep,
                                            std::string token,
                                            std::vector<std::string>* urls = nullptr) {
  FleetCounters out;
  auto workers = co_await get_body(client, ep, "/v1/admin/workers", token);
  if (!workers) co_return out;
  boost::system::error_code ec;
  const json::value v = json::parse(*workers, ec);
  const json::value* list = !ec && v.is_object() ? v.get_object().if_contains("workers") : nullptr;
  if (list == nullptr || !list->is_array()) co_return out;
  out.from_admin = true;
  for (const json::value& w : list->get_array()) {
    // Whatever the server sends, a shape we do not expect is skipped, never thrown.
    const json::object* wo = w.if_object();
    if (wo == nullptr) continue;
    const json::value* id = wo->if_contains("worker_id");
    const json::value* n = wo->if_contains("requests");
    const json::value* url = wo->if_contains("url");
    if (!id || !id->is_string() || !url || !url->is_string()) continue;
    out.requests[std::string(id->get_string())] =
        n && n->is_uint64() ? n->get_uint64()
                            : (n && n->is_int64() && n->get_int64() > 0
                                   ? static_cast<uint64_t>(n->get_int64())
                                   : 0);
    if (urls) urls->emplace_back(url->get_string());
  }
  co_return out;
}

// The fleet behind `ep`: a gateway's /v1/admin/workers (then each worker's /metrics), or an
// engine's own /metrics.
net::awaitable<FleetCounters> read_fleet(http::Client& client, http::Endpoint ep, std::string token) {
  std::vector<std::string> urls;
  FleetCounters out = co_await read_requests(client, ep, token, &urls);
  if (out.from_admin) {
    for (const std::string& url : urls) {
      auto wep = http::parse_endpoint(url);
      if (!wep.ok()) continue;
      auto text = co_await get_body(client, *wep, "/metrics", "");
      if (text) add_cache_counters(*text, out);
    }
    co_return out;
  }
  auto text = co_await get_body(client, ep, "/metrics", token);
  if (text) add_cache_counters(*text, out);
  co_return out;
}

// An OpenAI usage object's token counts (0 where absent).
struct Usage {
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;
  uint32_t completion_tokens = 0;
};

Usage read_usage(const json::object& usage) {
  Usage u;
  if (const auto* p = usage.if_contains("prompt_tokens"); p && p->is_number()) {
    u.prompt_tokens = p->to_number<uint32_t>();
  }
  if (const auto* n = usage.if_contains("completion_tokens"); n && n->is_number()) {
    u.completion_tokens = n->to_number<uint32_t>();
  }
  if (const auto* d = usage.if_contains("prompt_tokens_details"); d && d->is_object()) {
    if (const auto* c = d->get_object().if_contains("cached_tokens"); c && c->is_number()) {
      u.cached_tokens = c->to_number<uint32_t>();
    }
  }
  return u;
}

struct Shared {
  std::mutex mu;
  RunRecorder recorder{0};
  uint64_t usage_prompt_tokens = 0, usage_cached_tokens = 0;
  std::string first_error;
  std::atomic<uint64_t> done{0}, errors{0}, started{0};
  std::deque<size_t> ready;  // closed loop: requests ready to send
  std::promise<void> all_done;
  uint64_t total = 0;
};

class Runner {
 public:
  Runner(const Workload& w, const HttpRunOptions& o, std::vector<http::Endpoint> eps,
         std::string model, http::Client& client, http::EventLoop& loop)
      : w_(w),
        o_(o),
        eps_(std::move(eps)),
        model_(std::move(model)),
        client_(client),
        loop_(loop),
        dependencies_(w) {
    s_.total = w_.requests.size();
  }

  void run() {
    t0_ = Clock::now();
    if (s_.total == 0) return;
    auto finished = s_.all_done.get_future();
    if (o_.concurrency == 0) {
      net::co_spawn(loop_.context(), open_loop(), net::detached);
    } else {
      {
        std::lock_guard lock(s_.mu);
        for (size_t i = 0; i < w_.requests.size(); ++i) {
          if (dependencies_.independent(i)) s_.ready.push_back(i);
        }
      }
      for (uint32_t c = 0; c < o_.concurrency; ++c) {
        const double start_s = o_.ramp_s * c / o_.concurrency;
        net::co_spawn(loop_.next_context(), closed_loop_worker(start_s), net::detached);
      }
    }
    const bool tty = o_.progress && ::isatty(STDERR_FILENO);
    while (finished.wait_for(std::chrono::milliseconds(200)) != std::future_status::ready) {
      if (tty) progress();
    }
    if (tty) {
      progress();
      std::fprintf(stderr, "\n");
    }
  }

  Shared& shared() { return s_; }
  double elapsed() const { return since(t0_); }

 private:
  void progress() {
    const uint64_t done = s_.done.load();
    const int width = 30;
    const int filled = static_cast<int>(width * done / std::max<uint64_t>(1, s_.total));
    std::fprintf(stderr, "\r  [%s%s] %llu/%llu requests, %llu errors, %.1f s ",
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(width - filled), '.').c_str(),
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(s_.total),
                 static_cast<unsigned long long>(s_.errors.load()), since(t0_));
  }

  net::awaitable<void> pause_until(double at_s) {
    const double wait = at_s - since(t0_);
    if (wait <= 0) co_return;
    net::steady_timer t(co_await net::this_coro::executor);
    t.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait)));
    (void)co_await t.async_wait(use_nothrow);
  }

  net::awaitable<void> open_loop() {
    for (size_t i = 0; i < w_.requests.size(); ++i) {
      if (!dependencies_.independent(i)) continue;
      co_await pause_until(w_.requests[i].arrival_s);
      net::co_spawn(loop_.next_context(), send(i), net::detached);
    }
  }

  net::awaitable<void> closed_loop_worker(double start_s) {
    co_await pause_until(start_s);
    for (;;) {
      std::optional<size_t> next;
      {
        std::lock_guard lock(s_.mu);
        if (!s_.ready.empty()) {
          next = s_.ready.front();
          s_.ready.pop_front();
        }
      }
      if (next) {
        co_await send(*next);
        continue;
      }
      if (s_.done.load() >= s_.total) co_return;
      // Waiting for a conversation's next turn to become ready.
      net::steady_timer t(co_await net::this_coro::executor);
      t.expires_after(std::chrono::milliseconds(5));
      (void)co_await t.async_wait(use_nothrow);
    }
  }

  // Requests whose last dependency was request `i` become ready after their think time.
  void release_dependents(size_t i) {
    std::vector<size_t> ready;
    {
      std::lock_guard lock(s_.mu);
      dependencies_.finished(w_.requests[i].id, ready);
    }
    for (size_t d : ready) {
      const double ready_at = since(t0_) + w_.requests[d].think_s;
      if (o_.concurrency == 0) {
        net::co_spawn(
            loop_.next_context(),
            [this, d, ready_at]() -> net::awaitable<void> {
              co_await pause_until(ready_at);
              co_await send(d);
            },
            net::detached);
      } else {
        net::co_spawn(loop_.context(), [this, d, ready_at]() -> net::awaitable<void> {
          co_await pause_until(ready_at);
          std::lock_guard lock(s_.mu);
          s_.ready.push_back(d);
        }, net::detached);
      }
    }
  }

  void finish_one() {
    if (s_.done.fetch_add(1) + 1 == s_.total) s_.all_done.set_value();
  }

  void fail(const std::string& why) {
    s_.errors.fetch_add(1);
    std::lock_guard lock(s_.mu);
    s_.recorder.error();
    if (s_.first_error.empty()) s_.first_error = why;
  }

  // Whether request `i` is streamed: a fixed hash of its index against stream_fraction, so a
  // run's mix is the same every time.
  bool streamed(size_t i) const {
    const uint64_t h = (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull;
    return static_cast<double>(h >> 11) * 0x1.0p-53 < o_.stream_fraction;
  }

  // A POST /v1/completions of request `spec`'s prompt as token ids.
  http::Request completion_request(const RequestSpec& spec, bool stream) const {
    std::vector<uint32_t> tokens;
    spec.prompt.tokens(tokens);
    json::array prompt;
    prompt.reserve(tokens.size());
    for (uint32_t id : tokens) prompt.push_back(id);
    json::object body{{"model", model_},
                      {"prompt", std::move(prompt)},
                      {"max_tokens", spec.max_tokens},
                      {"ignore_eos", true},
                      {"stream", stream}};
    if (stream) body["stream_options"] = json::object{{"include_usage", true}};
    http::Request req;
    req.method = http::Method::kPost;
    req.target = "/v1/completions";
    req.headers.push_back({"Content-Type", "application/json"});
    req.body = json::serialize(body);
    return req;
  }

  net::awaitable<void> send(size_t i) {
    const bool stream = streamed(i);
    http::Request req = completion_request(w_.requests[i], stream);
    s_.started.fetch_add(1);
    const double sent = since(t0_);
    const http::Endpoint& ep = eps_[next_ep_.fetch_add(1, std::memory_order_relaxed) % eps_.size()];
    auto opened = co_await client_.stream(ep, std::move(req));
    if (opened.ok() && (opened->status() == 429 || opened->status() == 503)) {
      // Shed by the gateway (its in-flight cap or queue bound): a clean, immediate refusal.
      {
        std::lock_guard lock(s_.mu);
        s_.recorder.shed();
      }
      release_dependents(i);
      finish_one();
      co_return;
    }
    if (!opened.ok() || opened->status() != 200) {
      std::string why =
          opened.ok() ? "HTTP " + std::to_string(opened->status()) : opened.status().message();
      if (opened.ok() && s_.first_error.empty()) {
        // The first error's body (bounded) says why, e.g. an OpenAI error message.
        std::string text;
        while (text.size() < 512) {
          auto piece = co_await opened->read();
          if (!piece.ok() || piece->empty()) break;
          text.append(*piece);
        }
        if (!text.empty()) why += ": " + text.substr(0, 512);
      }
      fail(why);
      release_dependents(i);
      finish_one();
      co_return;
    }
    if (stream) {
      co_await receive_stream(i, opened.value(), sent);
    } else {
      co_await receive_whole(i, opened.value(), sent);
    }
  }

  // A streamed answer: TTFT at the first event with choices, a gap per later one, usage from
  // the last.
  net::awaitable<void> receive_stream(size_t i, http::ClientStream& up, double sent) {
    const RequestSpec& spec = w_.requests[i];
    http::SseParser parser;
    http::SseEvent ev;
    double first = -1, last = 0;
    uint32_t outputs = 0, prompt_tokens = 0, cached = 0;
    bool ok = true, done = false;
    std::vector<double> gaps;
    while (ok && !done) {
      auto piece = co_await up.read();
      if (!piece.ok()) {
        fail("stream: " + piece.status().message());
        ok = false;
        break;
      }
      if (piece->empty()) break;
      parser.feed(*piece);
      while (parser.next(ev)) {
        if (ev.done()) {
          done = true;
          break;
        }
        boost::system::error_code ec;
        const json::value v = json::parse(ev.data, ec);
        if (ec || !v.is_object()) continue;
        const json::object& o = v.get_object();
        if (o.if_contains("error")) {
          fail("error event: " + std::string(ev.data.substr(0, 200)));
          ok = false;
          break;
        }
        if (const json::value* u = o.if_contains("usage"); u && u->is_object()) {
          const Usage usage = read_usage(u->get_object());
          prompt_tokens = usage.prompt_tokens;
          cached = usage.cached_tokens;
        }
        const json::value* choices = o.if_contains("choices");
        if (!choices || !choices->is_array() || choices->get_array().empty()) continue;
        const double now = since(t0_);
        if (first < 0) {
          first = now;
        } else {
          gaps.push_back(now - last);
        }
        last = now;
        ++outputs;
      }
    }
    // Read the body's end after [DONE] (bounded), so the connection goes back to the pool
    // instead of being closed and the next request reconnecting.
    for (size_t drained = 0; ok && done && !up.done() && drained < 65536;) {
      auto rest = co_await up.read();
      if (!rest.ok() || rest->empty()) break;
      drained += rest->size();
    }
    if (ok && (first < 0 || !done)) {
      fail(first < 0 ? "no tokens in the stream" : "stream ended without [DONE]");
      ok = false;
    }
    if (ok) {
      std::lock_guard lock(s_.mu);
      s_.recorder.request(sent, first, last, static_cast<uint32_t>(spec.prompt.size()), cached,
                          outputs, 0);
      for (double g : gaps) s_.recorder.inter_token_gap(g);
      s_.usage_prompt_tokens += prompt_tokens ? prompt_tokens : spec.prompt.size();
      s_.usage_cached_tokens += cached;
    }
    release_dependents(i);
    finish_one();
  }

  // A non-streamed answer: the whole JSON body, its choices and usage.
  net::awaitable<void> receive_whole(size_t i, http::ClientStream& up, double sent) {
    const RequestSpec& spec = w_.requests[i];
    std::string text;
    for (;;) {
      auto piece = co_await up.read();
      if (!piece.ok()) {
        fail("body: " + piece.status().message());
        break;
      }
      if (piece->empty()) break;
      text.append(*piece);
    }
    if (up.done()) {
      boost::system::error_code ec;
      const json::value v = json::parse(text, ec);
      const json::object* o = !ec ? v.if_object() : nullptr;
      const json::value* choices = o ? o->if_contains("choices") : nullptr;
      const json::value* usage = o ? o->if_contains("usage") : nullptr;
      if (!choices || !choices->is_array() || choices->get_array().empty() || !usage ||
          !usage->is_object()) {
        fail("answer without choices or usage: " + text.substr(0, 200));
      } else {
        const Usage u = read_usage(usage->get_object());
        const double now = since(t0_);
        std::lock_guard lock(s_.mu);
        s_.recorder.request(sent, now, now, static_cast<uint32_t>(spec.prompt.size()),
                            u.cached_tokens, u.completion_tokens, 0);
        s_.usage_prompt_tokens += u.prompt_tokens ? u.prompt_tokens : spec.prompt.size();
        s_.usage_cached_tokens += u.cached_tokens;
      }
    }
    release_dependents(i);
    finish_one();
  }

  const Workload& w_;
  const HttpRunOptions& o_;
  std::vector<http::Endpoint> eps_;  // the server, then its other replicas: taken in turn
  std::atomic<uint64_t> next_ep_{0};
  std::string model_;
  http::Client& client_;
  http::EventLoop& loop_;
  Shared s_;
  Clock::time_point t0_;
  Dependencies dependencies_;  // guarded by s_.mu
};

}  // namespace

// Per-worker request counts over every replica (each counts only what it routed).
void add_replica_requests(FleetCounters& total, const FleetCounters& replica) {
  for (const auto& [id, n] : replica.requests) total.requests[id] += n;
}

Result<HttpRunResult> run_http(const Workload& workload, const HttpRunOptions& o) {
  INFERA_ASSIGN_OR_RETURN(http::Endpoint ep, http::parse_endpoint(o.url));
  std::vector<http::Endpoint> eps = {ep};
  for (const std::string& url : o.replica_urls) {
    INFERA_ASSIGN_OR_RETURN(http::Endpoint more, http::parse_endpoint(url));
    eps.push_back(std::move(more));
  }
  http::EventLoop loop(std::max(1, o.threads));
  http::ClientOptions co;
  co.response_timeout = o.request_timeout;
  co.read_timeout = o.request_timeout;
  // Every closed-loop sender keeps its connection between requests: thousands reconnecting at
  // once would overflow the listen backlog.
  co.max_idle_per_endpoint = std::max<size_t>(4096, o.concurrency);
  http::Client client(co);
  // The fleet's counters before and after the run: short deadlines, so a busy or dead worker
  // costs seconds, not the run's request timeout.
  http::ClientOptions admin_co;
  admin_co.connect_timeout = std::chrono::seconds(3);
  admin_co.response_timeout = std::chrono::seconds(10);
  admin_co.read_timeout = std::chrono::seconds(10);
  http::Client admin_client(admin_co);

  std::string model = o.model;
  if (model.empty()) {
    auto models = run_sync<std::optional<std::string>>(
        loop, [&] { return get_body(admin_client, ep, "/v1/models", ""); });
    if (!models) return unavailable("cannot reach " + o.url + "/v1/models");
    boost::system::error_code ec;
    const json::value v = json::parse(*models, ec);
    if (!ec && v.is_object() && v.get_object().if_contains("data") && v.at("data").is_array() &&
        !v.at("data").as_array().empty()) {
      const json::value& first = v.at("data").as_array()[0];
      const json::value* id = first.is_object() ? first.get_object().if_contains("id") : nullptr;
      if (id != nullptr && id->is_string()) model = std::string(id->get_string());
    }
  }
  auto read_all = [&] {
    FleetCounters total =
        run_sync<FleetCounters>(loop, [&] { return read_fleet(admin_client, ep, o.admin_token); });
    for (size_t i = 1; i < eps.size(); ++i) {
      const FleetCounters more = run_sync<FleetCounters>(
          loop, [&] { return read_requests(admin_client, eps[i], o.admin_token); });
      add_replica_requests(total, more);
    }
    return total;
  };
  const FleetCounters before = read_all();

  Runner runner(workload, o, eps, model, client, loop);
  runner.run();
  const double elapsed = runner.elapsed();
  const FleetCounters after = read_all();

  Shared& s = runner.shared();
  HttpRunResult result;
  {
    std::lock_guard lock(s.mu);
    result.report = s.recorder.summarize(o.window_s);
    if (!s.first_error.empty()) {
      std::fprintf(stderr, "infera bench: first error: %s\n", s.first_error.c_str());
    }
    // Hit ratio from the engines' counters when we can read them, else from usage.
    const double dq = after.cache_queries - before.cache_queries;
    if (after.have_cache_counters && dq > 0) {
      result.report.hit_ratio = (after.cache_hits - before.cache_hits) / dq;
    } else if (s.usage_prompt_tokens > 0) {
      result.report.hit_ratio =
          static_cast<double>(s.usage_cached_tokens) / static_cast<double>(s.usage_prompt_tokens);
    }
  }
  if (after.from_admin) {
    result.report.requests_per_worker.clear();
    uint64_t total = 0, most = 0;
    for (const auto& [id, n] : after.requests) {
      auto b = before.requests.find(id);
      const uint64_t d = n - (b == before.requests.end() ? 0 : b->second);
      result.report.requests_per_worker.push_back(d);
      total += d;
      most = std::max(most, d);
    }
    if (total > 0) {
      result.report.load_spread =
          static_cast<double>(most) /
          (static_cast<double>(total) / static_cast<double>(result.report.requests_per_worker.size()));
    }
  }
  if (result.report.duration_s <= 0) result.report.duration_s = elapsed;
  loop.stop();
  return result;
}

}  // namespace infera::loadgen
