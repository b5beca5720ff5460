#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "infera/common/heap.h"
#include "infera/config/flags.h"
#include "infera/loadgen/commands.h"
#include "infera/loadgen/http_runner.h"
#include "infera/sim/plot.h"

namespace infera::loadgen {

using sim::format_table;
using sim::load_mooncake_trace;
using sim::make_workload;
using sim::PolicyReport;
using sim::RunReport;
using sim::to_json;
using sim::TraceOptions;
using sim::Workload;
using sim::WorkloadOptions;
using sim::write_plots;

namespace {

// What the soak watches of a process on this machine (the server under test).
struct ProcessUse {
  uint64_t rss_kb = 0;
  uint64_t fds = 0;
  bool ok = false;
};

ProcessUse process_use(int64_t pid) {
  ProcessUse u;
  const std::string dir = "/proc/" + std::to_string(pid);
  u.rss_kb = resident_bytes(pid).value_or(0) / 1024;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++u.fds;
  }
  u.ok = u.rss_kb > 0 && !ec;
  return u;
}

struct SoakOptions {
  double capacity_fraction = 0;  // of the throughput measured by the calibration run
  double duration_s = 60;
  uint32_t calibrate_requests = 400;
  uint32_t calibrate_concurrency = 32;
  int64_t watch_pid = 0;         // 0: none
  double max_rss_growth = 0.05;  // a fraction of the RSS before the soak
  uint32_t max_fd_growth = 0;    // open fds beyond the count before the soak
  double settle_s = 75;          // how long the server may take to close the run's connections
  double window_s = 60;          // TTFT percentiles, RSS and fds per window of the soak
  double warmup_s = -1;          // RSS growth is judged from here (default: 10 % of the soak)
  double max_shed = 0.01;        // share of requests the gateway may refuse with 429/503
  // "open": capacity is the highest open-loop rate the fleet keeps up with, searched below the
  // closed-loop figure with probes; "closed": the closed-loop throughput itself.
  std::string calibrate_mode = "open";
  double probe_s = 10;             // length of each open-loop probe
  double probe_max_ttft_ms = 500;  // a probe keeps up: TTFT p99 within this, nothing shed/failed
};

// One open-loop probe at `rate`: did the fleet keep up (every request answered, none shed or
// failed, TTFT p99 within the bound, completions at >= 90 % of the offered rate: Poisson
// arrivals of a short probe stray by a few per cent)?
bool probe_keeps_up(const std::string& workload_name, WorkloadOptions w, HttpRunOptions o,
                    const SoakOptions& so, double rate, uint64_t seed) {
  w.requests = static_cast<uint32_t>(std::max(1.0, rate * so.probe_s));
  w.rate_rps = rate;
  w.seed = seed;
  Result<Workload> probe = make_workload(workload_name, w);
  if (!probe.ok()) return false;
  o.concurrency = 0;
  auto run = run_http(*probe, o);
  if (!run.ok()) return false;
  const PolicyReport& r = run->report;
  const bool kept = r.errors == 0 && r.shed == 0 && r.requests == probe->requests.size() &&
                    r.ttft_p99_ms <= so.probe_max_ttft_ms && r.throughput_rps >= 0.9 * rate;
  std::fprintf(stderr,
               "infera bench: probe %.0f/s for %.0f s: %s (answered %llu of %zu, shed %llu, "
               "errors %llu, TTFT p99 %.1f ms, %.0f completed/s)\n",
               rate, so.probe_s, kept ? "kept up" : "fell behind",
               static_cast<unsigned long long>(r.requests), probe->requests.size(),
               static_cast<unsigned long long>(r.shed), static_cast<unsigned long long>(r.errors),
               r.ttft_p99_ms, r.throughput_rps);
  return kept;
}

// The highest open-loop rate kept up with, at most `closed_rps`: a probe at the closed-loop
// figure, then halving until a probe keeps up, then bisection (5 % resolution).
double search_open_capacity(const std::string& workload_name, const WorkloadOptions& w,
                            const HttpRunOptions& o, const SoakOptions& so, double closed_rps) {
  uint64_t seed = w.seed + 1000;
  if (probe_keeps_up(workload_name, w, o, so, closed_rps, seed++)) return closed_rps;
  double hi = closed_rps, lo = closed_rps / 2;
  while (!probe_keeps_up(workload_name, w, o, so, lo, seed++)) {
    hi = lo;
    lo /= 2;
    if (lo < 1) return 0;
  }
  while (hi - lo > 0.05 * hi) {
    const double mid = (lo + hi) / 2;
    if (probe_keeps_up(workload_name, w, o, so, mid, seed++)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The watched process's RSS and fds every `every`, on a thread, until stop().
class ProcessSampler {
 public:
  struct Sample {
    double at_s;
    ProcessUse use;
  };
  ProcessSampler(int64_t pid, double every_s) : pid_(pid) {
    if (pid_ == 0) return;
    thread_ = std::thread([this, every_s] {
      const auto t0 = std::chrono::steady_clock::now();
      const auto every = std::chrono::milliseconds(static_cast<int64_t>(every_s * 1000));
      std::unique_lock lock(mu_);
      for (auto next = t0; !stop_; next += every) {
        if (cv_.wait_until(lock, next, [this] { return stop_; })) break;
        const double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        samples_.push_back({at, process_use(pid_)});
      }
    });
  }
  ~ProcessSampler() { stop(); }
  std::vector<Sample> stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    return samples_;
  }

 private:
  int64_t pid_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<Sample> samples_;
  std::thread thread_;
};

// What the soak's calibration measured.
struct Capacity {
  PolicyReport calibration;  // the closed-loop run
  double closed_rps = 0;
  double capacity_rps = 0;  // what the soak's rate is a fraction of
};

// The calibration: a closed loop at --calibrate-concurrency, then (by default) the open-loop
// search below its throughput. Failures are printed; none means exit code 1.
std::optional<Capacity> measure_capacity(const Workload& calibration,
                                         const std::string& workload_name, const WorkloadOptions& w,
                                         const HttpRunOptions& o, const SoakOptions& so) {
  HttpRunOptions co = o;
  co.concurrency = so.calibrate_concurrency;
  auto capacity = run_http(calibration, co);
  if (!capacity.ok() || capacity->report.throughput_rps <= 0) {
    std::fprintf(stderr, "infera bench: calibration failed: %s\n",
                 capacity.ok() ? "no request completed" : capacity.status().message().c_str());
    return std::nullopt;
  }
  const double closed_rps = capacity->report.throughput_rps;
  std::fprintf(stderr, "infera bench: closed loop, %u in flight: %.1f requests/s\n",
               so.calibrate_concurrency, closed_rps);
  // A closed loop keeps every process busy and batching (many ready sockets per wake-up); an
  // open loop at the same rate pays a wake-up per token and falls behind well below it on
  // shared cores. The soak's capacity is by default what an open loop keeps up with.
  const double capacity_rps = so.calibrate_mode == "open"
                                  ? search_open_capacity(workload_name, w, o, so, closed_rps)
                                  : closed_rps;
  if (capacity_rps <= 0) {
    std::fprintf(stderr, "infera bench: calibration failed: no open-loop rate kept up\n");
    return std::nullopt;
  }
  return Capacity{capacity->report, closed_rps, capacity_rps};
}

// The soak's run and the watched process around it.
struct WatchedRun {
  PolicyReport report;
  std::vector<ProcessSampler::Sample> samples;  // one per window
  ProcessUse before;
  ProcessUse after;  // once the server closed the run's connections (or --settle-s passed)
};

// Runs the soak while sampling the watched process. A failed run is printed; none means exit
// code 1.
std::optional<WatchedRun> run_watched(const Workload& soak, const HttpRunOptions& o,
                                      const SoakOptions& so) {
  const ProcessUse before = so.watch_pid ? process_use(so.watch_pid) : ProcessUse{};
  ProcessSampler sampler(so.watch_pid, so.window_s);
  auto result = run_http(soak, o);
  std::vector<ProcessSampler::Sample> samples = sampler.stop();
  if (!result.ok()) {
    std::fprintf(stderr, "infera bench: %s\n", result.status().message().c_str());
    return std::nullopt;
  }
  // The run's connections are closed now; the server lets go of its side within its client
  // idle timeout (60 s by default): poll for up to --settle-s.
  ProcessUse after = so.watch_pid ? process_use(so.watch_pid) : ProcessUse{};
  const auto settle_until = std::chrono::steady_clock::now() +
                            std::chrono::milliseconds(static_cast<int64_t>(so.settle_s * 1000));
  while (after.ok && after.fds > before.fds + so.max_fd_growth &&
         std::chrono::steady_clock::now() < settle_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling another process
    after = process_use(so.watch_pid);
  }
  return WatchedRun{std::move(result->report), std::move(samples), before, after};
}

void print_soak_tables(const std::string& workload_name, const HttpRunOptions& o,
                       const Capacity& capacity, const WatchedRun& run) {
  RunReport report;
  report.policies["calibration"] = capacity.calibration;
  report.policies["soak"] = run.report;
  report.settings = {{"workload", workload_name},
                     {"mode", "soak"},
                     {"stream_fraction", std::to_string(o.stream_fraction)}};
  std::printf("%s", format_table(report).c_str());
  const PolicyReport& r = run.report;
  // Per window: TTFT of the requests that arrived in it, the watched process at its end.
  std::printf("%8s %9s %12s %12s %10s %6s\n", "window", "requests", "ttft p50", "ttft p99",
              "rss", "fds");
  for (size_t i = 0; i < r.windows.size(); ++i) {
    const PolicyReport::Window& win = r.windows[i];
    const ProcessUse use = i < run.samples.size() ? run.samples[i].use : ProcessUse{};
    std::printf("%7.0fs %9llu %10.1fms %10.1fms %8.1fMB %6llu\n", win.start_s,
                static_cast<unsigned long long>(win.requests), win.ttft_p50_ms, win.ttft_p99_ms,
                static_cast<double>(use.rss_kb) / 1024, static_cast<unsigned long long>(use.fds));
  }
}

// Prints the `SOAK {json}` line and the verdict: the exit code.
int judge_soak(const Capacity& capacity, double rate, uint64_t total, const HttpRunOptions& o,
               const SoakOptions& so, const WatchedRun& run) {
  const PolicyReport& r = run.report;
  const ProcessUse& before = run.before;
  const ProcessUse& after = run.after;
  // RSS is judged after the warm-up (caches and the KV mirror filling up, pools growing to
  // their working size): from the first sample at or after it to the end.
  const double warmup_s = so.warmup_s >= 0 ? so.warmup_s : 0.1 * so.duration_s;
  ProcessUse warm = before;
  for (const ProcessSampler::Sample& sample : run.samples) {
    if (sample.at_s >= warmup_s && sample.use.ok) {
      warm = sample.use;
      break;
    }
  }
  auto growth_from = [&](const ProcessUse& from) {
    return from.ok && after.ok && from.rss_kb > 0
               ? static_cast<double>(after.rss_kb) / static_cast<double>(from.rss_kb) - 1
               : 0;
  };
  const double growth = growth_from(warm);
  const uint64_t lost = total - std::min<uint64_t>(total, r.requests + r.shed);
  std::printf(
      "SOAK {\"capacity_rps\":%.2f,\"closed_loop_rps\":%.2f,\"rate_rps\":%.2f,"
      "\"duration_s\":%.1f,\"sent\":%llu,\"requests\":%llu,\"shed\":%llu,\"errors\":%llu,"
      "\"lost\":%llu,\"stream_fraction\":%.2f,\"ttft_p50_ms\":%.1f,\"ttft_p99_ms\":%.1f,"
      "\"e2e_p50_ms\":%.1f,\"rss_kb_before\":%llu,\"rss_kb_after_warmup\":%llu,"
      "\"rss_kb_after\":%llu,\"rss_growth_from_start\":%.4f,\"rss_growth\":%.4f,"
      "\"fds_before\":%llu,\"fds_after\":%llu}\n",
      capacity.capacity_rps, capacity.closed_rps, rate, r.duration_s,
      static_cast<unsigned long long>(total), static_cast<unsigned long long>(r.requests),
      static_cast<unsigned long long>(r.shed), static_cast<unsigned long long>(r.errors),
      static_cast<unsigned long long>(lost), o.stream_fraction, r.ttft_p50_ms, r.ttft_p99_ms,
      r.e2e_p50_ms, static_cast<unsigned long long>(before.rss_kb),
      static_cast<unsigned long long>(warm.rss_kb), static_cast<unsigned long long>(after.rss_kb),
      growth_from(before), growth, static_cast<unsigned long long>(before.fds),
      static_cast<unsigned long long>(after.fds));
  bool pass = r.errors == 0 && lost == 0 &&
              static_cast<double>(r.shed) <= so.max_shed * static_cast<double>(total);
  if (so.watch_pid) {
    pass = pass && before.ok && after.ok && growth <= so.max_rss_growth &&
           after.fds <= before.fds + so.max_fd_growth;
  }
  std::fprintf(stderr, "infera bench: soak %s\n", pass ? "passed" : "FAILED");
  return pass ? 0 : 1;
}

// The soak mode: measure capacity with a closed loop, then send an open-loop mix at a fraction
// of it for a while; nothing may be lost (every request answered in full), and the watched
// process may not grow its RSS nor its open fds beyond the limits once the client's
// connections are closed. Prints a table per phase and one `SOAK {json}` line.
int run_soak(const std::string& workload_name, WorkloadOptions w, HttpRunOptions o,
             const SoakOptions& so) {
  w.requests = so.calibrate_requests;
  Result<Workload> calibration = make_workload(workload_name, w);
  if (!calibration.ok()) {
    std::fprintf(stderr, "infera bench: %s\n", calibration.status().message().c_str());
    return 2;
  }
  const std::optional<Capacity> capacity = measure_capacity(*calibration, workload_name, w, o, so);
  if (!capacity) return 1;
  const double rate = so.capacity_fraction * capacity->capacity_rps;
  std::fprintf(stderr, "infera bench: capacity %.1f requests/s (%s); soak at %.1f/s for %.0f s\n",
               capacity->capacity_rps,
               so.calibrate_mode == "open" ? "highest open-loop rate kept up" : "closed loop", rate,
               so.duration_s);

  w.requests = static_cast<uint32_t>(std::max(1.0, rate * so.duration_s));
  w.rate_rps = rate;
  w.seed += 1;  // new prompts, the same families
  Result<Workload> soak = make_workload(workload_name, w);
  if (!soak.ok()) {
    std::fprintf(stderr, "infera bench: %s\n", soak.status().message().c_str());
    return 2;
  }
  o.concurrency = 0;
  o.window_s = so.window_s;
  const std::optional<WatchedRun> run = run_watched(*soak, o, so);
  if (!run) return 1;
  print_soak_tables(workload_name, o, *capacity, *run);
  return judge_soak(*capacity, rate, soak->requests.size(), o, so, *run);
}

// Everything `infera bench` reads from its flags; the FlagSet points into it.
struct BenchFlags {
  std::string url, trace, workload_name, json_path, plot_path, name = "server";
  std::vector<std::string> urls;  // --url, repeatable: url is the first
  HttpRunOptions http;
  WorkloadOptions synthetic;
  TraceOptions replay;
  SoakOptions soak;
  double rate_scale = 1.0;
  double rate = -1;  // < 0: unset
  uint64_t seed = 1;
  uint32_t timeout_s = 600;
};

config::FlagSet bench_flag_set(BenchFlags& b) {
  config::FlagSet f(
      "usage: infera bench --url URL (--trace FILE | --workload NAME) [--requests N]\n"
      "                    [--rate R | --concurrency C] --json OUT.json\n\n"
      "Drives a running infera server (or an engine) over HTTP with streaming completions and\n"
      "reports TTFT, inter-token latency, end-to-end latency, throughput, the fleet's prefix\n"
      "hit ratio (from the engines' vllm:prefix_cache_* counters) and the load spread.");
  f.add("--url", &b.urls,
        "the server or engine to drive; repeat it for router replicas of one fleet: requests "
        "are spread across them in turn, as a Service does (the fleet's counters are read "
        "through the first)",
        "URL");
  f.add("--trace", &b.trace, "Mooncake-format trace to replay", "FILE");
  f.add("--workload", &b.workload_name, "prefix-families, multi-turn, rag or agentic", "NAME");
  f.add("--requests", &b.synthetic.requests, "workload size (trace: the first N requests)", "N");
  f.add("--rate", &b.rate,
        "open-loop arrival rate, requests/s (synthetic workloads; default 8, multi-turn 3.33, "
        "agentic 10: turns and fan-out included, so waits on earlier turns make it lower)",
        "R");
  f.add("--rate-scale", &b.rate_scale, "trace speed-up factor (default 1)", "X");
  f.add("--concurrency", &b.http.concurrency, "closed loop with C requests in flight", "C");
  f.add("--ramp-s", &b.http.ramp_s,
        "closed loop: start the C senders evenly over this many seconds (default 0: at once; "
        "thousands of connects at once overflow the listen backlog)",
        "SECONDS");
  f.add("--model", &b.http.model, "model name to send (default: the first the server lists)", "M");
  f.add("--groups", &b.synthetic.groups, "prefix-families: number of shared prompts (default 8)",
        "G");
  f.add("--system-tokens", &b.synthetic.system_tokens, "shared prompt length (default 2048)", "P");
  f.add("--question-tokens", &b.synthetic.question_tokens, "per-request tokens (default 128)", "Q");
  f.add("--output-tokens", &b.synthetic.output_tokens, "tokens generated per request (default 64)",
        "N");
  f.add("--tool-tokens", &b.synthetic.tool_tokens,
        "agentic: shared tool-description prompt (default 4096)", "T");
  f.add("--seed", &b.seed, "workload seed (default 1)", "S");
  f.add("--admin-token", &b.http.admin_token, "bearer token of the server's admin API", "TOKEN");
  f.add("--timeout-s", &b.timeout_s, "per-request deadline (default 600)", "SECONDS");
  f.add("--name", &b.name, "the policy name in the result (default: server)", "NAME");
  f.add("--json", &b.json_path, "write the result JSON here", "OUT.json");
  f.add("--plot", &b.plot_path, "write PNG plots with this path prefix", "PREFIX");
  f.add("--stream-fraction", &b.http.stream_fraction,
        "share of requests streamed (default 1); the others get one JSON answer", "F");
  f.add("--capacity-fraction", &b.soak.capacity_fraction,
        "soak: measure capacity first (see --calibrate-mode), then send --workload open-loop at "
        "this fraction of it for --duration-s; fails on any lost request",
        "X");
  f.add("--calibrate-mode", &b.soak.calibrate_mode,
        "soak: open (default): capacity is the highest open-loop rate kept up with, searched "
        "with --probe-s probes below the closed-loop throughput of --calibrate-requests at "
        "--calibrate-concurrency; closed: that closed-loop throughput itself",
        "MODE");
  f.add("--probe-s", &b.soak.probe_s, "soak: length of each open-loop capacity probe (default 10)",
        "SECONDS");
  f.add("--probe-max-ttft-ms", &b.soak.probe_max_ttft_ms,
        "soak: a probe keeps up when nothing is shed or failed and TTFT p99 stays within this "
        "(default 500)",
        "MS");
  f.add("--duration-s", &b.soak.duration_s, "soak: how long the open-loop phase lasts (default 60)",
        "SECONDS");
  f.add("--calibrate-requests", &b.soak.calibrate_requests,
        "soak: requests of the capacity measurement (default 400)", "N");
  f.add("--calibrate-concurrency", &b.soak.calibrate_concurrency,
        "soak: requests in flight while measuring capacity (default 32)", "C");
  f.add("--watch-pid", &b.soak.watch_pid,
        "soak: this process (the server, on this machine) may not grow its RSS by more than "
        "--max-rss-growth nor end with more than --max-fd-growth open fds more than before",
        "PID");
  f.add("--settle-s", &b.soak.settle_s,
        "soak: how long the watched server may take to close the run's connections (default 75, "
        "beyond the server's default client idle timeout)",
        "SECONDS");
  f.add("--max-rss-growth", &b.soak.max_rss_growth,
        "soak: RSS growth allowed after the warm-up, a fraction (default 0.05)", "F");
  f.add("--warmup-s", &b.soak.warmup_s,
        "soak: RSS growth is measured from the first sample after this many seconds (default "
        "10 % of --duration-s: caches, the KV mirror and pools reach their working size)",
        "SECONDS");
  f.add("--window-s", &b.soak.window_s,
        "soak: TTFT percentiles, RSS and fds reported per window of this length (default 60)",
        "SECONDS");
  f.add("--max-shed", &b.soak.max_shed,
        "soak: share of requests the gateway may refuse with 429/503 (default 0.01)", "F");
  f.add("--max-fd-growth", &b.soak.max_fd_growth,
        "soak: open fds allowed beyond the count before (default 0; a server keeps up to its "
        "upstream pool's idle connections)",
        "N");
  return f;
}

// The checks of every run, then those of the soak or of a plain run.
Status check_bench_flags(const BenchFlags& b) {
  if (b.url.empty() || b.trace.empty() == b.workload_name.empty()) {
    return invalid_argument("give --url and exactly one of --trace or --workload");
  }
  if (b.http.ramp_s < 0 || (b.http.ramp_s > 0 && b.http.concurrency == 0)) {
    return invalid_argument("--ramp-s needs --concurrency and must be >= 0");
  }
  const SoakOptions& so = b.soak;
  if (so.capacity_fraction > 0) {
    if (b.workload_name.empty() || so.duration_s <= 0) {
      return invalid_argument("the soak needs --workload and --duration-s > 0");
    }
    if (so.calibrate_mode != "open" && so.calibrate_mode != "closed") {
      return invalid_argument("--calibrate-mode must be open or closed");
    }
    if (!(so.probe_s >= 1) || !(so.probe_max_ttft_ms > 0)) {
      return invalid_argument("--probe-s must be >= 1 and --probe-max-ttft-ms > 0");
    }
    if (!(so.window_s >= 0.1) || !(so.max_shed >= 0 && so.max_shed <= 1)) {
      return invalid_argument("--window-s must be >= 0.1 and --max-shed in [0, 1]");
    }
    return ok_status();
  }
  if (b.rate >= 0 && b.http.concurrency > 0) {
    return invalid_argument("--rate and --concurrency exclude each other");
  }
  return ok_status();
}

Result<Workload> load_workload(BenchFlags& b) {
  if (!b.trace.empty()) {
    b.replay.rate_scale = b.rate_scale;
    b.replay.seed = b.seed;
    b.replay.max_requests = b.synthetic.requests;
    return load_mooncake_trace(b.trace, b.replay);
  }
  b.synthetic.seed = b.seed;
  if (b.rate >= 0) b.synthetic.rate_rps = b.rate;
  return make_workload(b.workload_name, b.synthetic);
}

// One run of the workload: a table, the JSON and plots; exit code 1 when a request failed.
int run_bench(BenchFlags& b) {
  Result<Workload> workload = load_workload(b);
  if (!workload.ok()) {
    std::fprintf(stderr, "infera bench: %s\n", workload.status().message().c_str());
    return 2;
  }
  std::fprintf(stderr, "infera bench: %zu requests (%s) against %s\n", workload->requests.size(),
               workload->name.c_str(), b.url.c_str());
  auto result = run_http(*workload, b.http);
  if (!result.ok()) {
    std::fprintf(stderr, "infera bench: %s\n", result.status().message().c_str());
    return 1;
  }
  RunReport report;
  report.policies[b.name] = result->report;
  report.settings = {{"workload", workload->name},
                     {"requests", std::to_string(workload->requests.size())},
                     {"url", b.url},
                     {"concurrency", std::to_string(b.http.concurrency)},
                     {"seed", std::to_string(b.seed)},
                     {"mode", "bench"}};
  std::printf("%s", format_table(report).c_str());
  if (!b.json_path.empty()) std::ofstream(b.json_path) << to_json(report);
  if (!b.plot_path.empty()) {
    const Status plotted = write_plots(to_json(report), b.plot_path);
    if (!plotted.ok()) std::fprintf(stderr, "infera bench: plots: %s\n", plotted.message().c_str());
  }
  return result->report.errors == 0 ? 0 : 1;
}

}  // namespace

int run_bench_command(std::span<const std::string> args) {
  BenchFlags flags;
  config::FlagSet f = bench_flag_set(flags);
  f.enable_config_sources(config::process_config_sources());
  const Status parsed = f.parse(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "infera bench: %s\n", parsed.message().c_str());
    return 2;
  }
  if (f.help_requested()) {
    std::printf("%s", f.help().c_str());
    return 0;
  }
  if (!flags.urls.empty()) flags.url = flags.urls.front();
  if (const Status checked = check_bench_flags(flags); !checked.ok()) {
    std::fprintf(stderr, "infera bench: %s\n", checked.message().c_str());
    return 2;
  }
  flags.http.url = flags.url;
  if (flags.urls.size() > 1) flags.http.replica_urls.assign(flags.urls.begin() + 1, flags.urls.end());
  flags.http.request_timeout = std::chrono::seconds(flags.timeout_s);
  if (flags.soak.capacity_fraction > 0) {
    flags.synthetic.seed = flags.seed;
    return run_soak(flags.workload_name, flags.synthetic, flags.http, flags.soak);
  }
  return run_bench(flags);
}

}  // namespace infera::loadgen
