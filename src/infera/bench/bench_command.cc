#include <cstdio>
#include <fstream>

#include "infera/bench/commands.h"
#include "infera/bench/http_runner.h"
#include "infera/bench/plot.h"
#include "infera/config/flags.h"

namespace infera::bench {

int run_bench_command(std::span<const std::string> args) {
  std::string url, trace, workload_name, json_path, plot_path, name = "server";
  HttpRunOptions o;
  WorkloadOptions w;
  TraceOptions t;
  double rate_scale = 1.0;
  double rate = -1;
  uint64_t seed = 1;
  uint32_t timeout_s = 600;
  config::FlagSet f(
      "usage: infera bench --url URL (--trace FILE | --workload NAME) [--requests N]\n"
      "                    [--rate R | --concurrency C] --json OUT.json\n\n"
      "Drives a running infera server (or an engine) over HTTP with streaming completions and\n"
      "reports TTFT, inter-token latency, end-to-end latency, throughput, the fleet's prefix\n"
      "hit ratio (from the engines' vllm:prefix_cache_* counters) and the load spread.");
  f.add("--url", &url, "the server or engine to drive", "URL");
  f.add("--trace", &trace, "Mooncake-format trace to replay", "FILE");
  f.add("--workload", &workload_name, "prefix-families, multi-turn, rag or agentic", "NAME");
  f.add("--requests", &w.requests, "workload size (trace: the first N requests)", "N");
  f.add("--rate", &rate, "open-loop arrival rate, requests/s (synthetic workloads)", "R");
  f.add("--rate-scale", &rate_scale, "trace speed-up factor (default 1)", "X");
  f.add("--concurrency", &o.concurrency, "closed loop with C requests in flight", "C");
  f.add("--ramp-s", &o.ramp_s,
        "closed loop: start the C senders evenly over this many seconds (default 0: at once; "
        "thousands of connects at once overflow the listen backlog)",
        "SECONDS");
  f.add("--model", &o.model, "model name to send (default: the first the server lists)", "M");
  f.add("--groups", &w.groups, "prefix-families: number of shared prompts (default 8)", "G");
  f.add("--system-tokens", &w.system_tokens, "shared prompt length (default 2048)", "P");
  f.add("--question-tokens", &w.question_tokens, "per-request tokens (default 128)", "Q");
  f.add("--output-tokens", &w.output_tokens, "tokens generated per request (default 64)", "N");
  f.add("--seed", &seed, "workload seed (default 1)", "S");
  f.add("--admin-token", &o.admin_token, "bearer token of the server's admin API", "TOKEN");
  f.add("--timeout-s", &timeout_s, "per-request deadline (default 600)", "SECONDS");
  f.add("--name", &name, "the policy name in the result (default: server)", "NAME");
  f.add("--json", &json_path, "write the result JSON here", "OUT.json");
  f.add("--plot", &plot_path, "write PNG plots with this path prefix", "PREFIX");
  const Status parsed = f.parse(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "infera bench: %s\n", parsed.message().c_str());
    return 2;
  }
  if (f.help_requested()) {
    std::printf("%s", f.help().c_str());
    return 0;
  }
  if (url.empty() || trace.empty() == workload_name.empty()) {
    std::fprintf(stderr, "infera bench: give --url and exactly one of --trace or --workload\n");
    return 2;
  }
  if (o.ramp_s < 0 || (o.ramp_s > 0 && o.concurrency == 0)) {
    std::fprintf(stderr, "infera bench: --ramp-s needs --concurrency and must be >= 0\n");
    return 2;
  }
  if (rate >= 0 && o.concurrency > 0) {
    std::fprintf(stderr, "infera bench: --rate and --concurrency exclude each other\n");
    return 2;
  }
  Result<Workload> workload = [&]() -> Result<Workload> {
    if (!trace.empty()) {
      t.rate_scale = rate_scale;
      t.seed = seed;
      t.max_requests = w.requests;
      return load_mooncake_trace(trace, t);
    }
    w.seed = seed;
    if (rate >= 0) w.rate_rps = rate;
    return make_workload(workload_name, w);
  }();
  if (!workload.ok()) {
    std::fprintf(stderr, "infera bench: %s\n", workload.status().message().c_str());
    return 2;
  }
  o.url = url;
  o.request_timeout = std::chrono::seconds(timeout_s);
  std::fprintf(stderr, "infera bench: %zu requests (%s) against %s\n", workload->requests.size(),
               workload->name.c_str(), url.c_str());
  auto result = run_http(*workload, o);
  if (!result.ok()) {
    std::fprintf(stderr, "infera bench: %s\n", result.status().message().c_str());
    return 1;
  }
  RunReport report;
  report.policies[name] = result->report;
  report.settings = {{"workload", workload->name},
                     {"requests", std::to_string(workload->requests.size())},
                     {"url", url},
                     {"concurrency", std::to_string(o.concurrency)},
                     {"seed", std::to_string(seed)},
                     {"mode", "bench"}};
  std::printf("%s", format_table(report).c_str());
  if (!json_path.empty()) std::ofstream(json_path) << to_json(report);
  if (!plot_path.empty()) {
    const Status plotted = write_plots(to_json(report), plot_path);
    if (!plotted.ok()) std::fprintf(stderr, "infera bench: plots: %s\n", plotted.message().c_str());
  }
  return result->report.errors == 0 ? 0 : 1;
}

}  // namespace infera::bench
