// `infera demo`: the README's first command. Starts N simulated engines and a server on free
// localhost ports (static discovery, KV events over ZMQ), runs the same prefix-families
// workload through the server under round-robin and then kv-aware (and, with
// --compare-load-models, kv-aware with --kv-load-model prefill-aware), prints the comparison,
// writes the plots and stops everything.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "infera/common/subprocess.h"
#include "infera/config/flags.h"
#include "infera/http/client.h"
#include "infera/loadgen/commands.h"
#include "infera/loadgen/http_runner.h"
#include "infera/sim/plot.h"

namespace infera::loadgen {

using sim::format_table;
using sim::make_workload;
using sim::PolicyReport;
using sim::RunReport;
using sim::to_json;
using sim::WorkloadOptions;
using sim::write_plots;

namespace {

namespace fs = std::filesystem;

std::string self_binary() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("infera") : p.string();
}

Result<uint16_t> free_port() {
  // Bind port 0, read it back. The gap before the child binds it is tiny on loopback.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return unavailable("cannot open a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!bound) return unavailable("cannot bind a loopback port to find a free one");
  return ntohs(addr.sin_port);
}

// Waits for a child's "listening on http://HOST:PORT" line in its log; returns the URL.
std::optional<std::string> wait_for_url(Subprocess& child, const fs::path& log,
                                        std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line)) {
      const size_t at = line.find("listening on http://");
      if (at != std::string::npos) {
        std::string url = line.substr(at + 13);
        while (!url.empty() && (url.back() == '\r' || url.back() == ' ')) url.pop_back();
        return url;
      }
    }
    if (!child.running()) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

std::string tail_of(const fs::path& log) {
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  return s.size() > 1500 ? s.substr(s.size() - 1500) : s;
}

struct Fleet {
  std::vector<Subprocess> engines;
  Subprocess server;
  std::string url;
  void stop() {
    server.stop(std::chrono::milliseconds(5000));
    for (auto& e : engines) e.stop(std::chrono::milliseconds(5000));
  }
};

struct DemoOptions {
  uint32_t engines = 4;
  uint32_t num_gpu_blocks = 1280;
  double speedup = 5;
  // Long shared prefixes: one cached prompt saves ~256 blocks of prefill, about what one request
  // in flight adds to a worker's load, so weight 1 (the server's default) ties too often.
  std::string overlap_weight = "4";
  std::string out_dir = ".";
  bool keep_logs = false;
  bool compare_load_models = false;  // also run kv-aware with --kv-load-model prefill-aware
};

// One run of the demo: a policy, and for kv-aware the server's --kv-load-model.
struct DemoRun {
  std::string policy;
  std::string load_model;  // empty: the server's default (active-blocks)
  std::string row() const { return load_model.empty() ? policy : policy + ":" + load_model; }
};

Result<Fleet> start_fleet(const DemoOptions& d, const DemoRun& run, const fs::path& logs) {
  const std::string policy = run.row();
  Fleet f;
  const std::string bin = self_binary();
  std::vector<std::string> workers;
  for (uint32_t i = 0; i < d.engines; ++i) {
    INFERA_ASSIGN_OR_RETURN(const uint16_t kv, free_port());
    INFERA_ASSIGN_OR_RETURN(const uint16_t replay, free_port());
    const std::string kv_ep = "tcp://127.0.0.1:" + std::to_string(kv);
    const std::string replay_ep = "tcp://127.0.0.1:" + std::to_string(replay);
    // As in vLLM, the engine binds its PUB socket only for a wildcard endpoint (otherwise it
    // connects); the server's SUB connects to the loopback address. Replay always binds.
    const std::string events = std::string(R"({"enable_kv_cache_events":true,"publisher":"zmq","endpoint":")") +
                               "tcp://*:" + std::to_string(kv) + R"(","replay_endpoint":")" +
                               replay_ep +
                               R"(","topic":"kv-events"})";
    const fs::path log = logs / (policy + "-engine-" + std::to_string(i) + ".log");
    SpawnOptions so;
    so.stdout_path = log.string();
    so.stderr_path = "stdout";
    INFERA_ASSIGN_OR_RETURN(
        Subprocess e,
        Subprocess::spawn({bin, "engine", "mock", "--model", "infera-demo", "--host", "127.0.0.1",
                           "--port", "0", "--num-gpu-blocks", std::to_string(d.num_gpu_blocks),
                           "--speedup-ratio", std::to_string(d.speedup), "--seed", std::to_string(i),
                           "--enable-kv-events", "--kv-events-config", events, "--log-level", "warn",
                           // one machine, no broker: HTTP requests and ZMQ events
                           "--request-transport", "http", "--kv-event-transport", "zmq"},
                          so));
    auto url = wait_for_url(e, log, std::chrono::seconds(30));
    if (!url) return unavailable("engine " + std::to_string(i) + " did not start:\n" + tail_of(log));
    std::string& worker = workers.emplace_back(std::move(*url));
    worker.append(",kv=").append(kv_ep).append(",replay=").append(replay_ep);
    worker.append(",topic=kv-events");
    f.engines.push_back(std::move(e));
  }
  std::vector<std::string> args{bin,
                                "server",
                                "--host",
                                "127.0.0.1",
                                "--port",
                                "0",
                                "--router-policy",
                                run.policy,
                                "--kv-overlap-weight",
                                d.overlap_weight,
                                "--log-level",
                                "warn"};
  if (!run.load_model.empty()) {
    args.push_back("--kv-load-model");
    args.push_back(run.load_model);
  }
  for (const auto& w : workers) {
    args.push_back("--worker");
    args.push_back(w);
  }
  const fs::path log = logs / (policy + "-server.log");
  SpawnOptions so;
  so.stdout_path = log.string();
  so.stderr_path = "stdout";
  INFERA_ASSIGN_OR_RETURN(f.server, Subprocess::spawn(args, so));
  auto url = wait_for_url(f.server, log, std::chrono::seconds(30));
  if (!url) return unavailable("the server did not start:\n" + tail_of(log));
  f.url = *url;
  return f;
}

}  // namespace

int run_demo_command(std::span<const std::string> args) {
  DemoOptions d;
  WorkloadOptions w;
  w.groups = 16;
  w.system_tokens = 4096;
  w.question_tokens = 64;
  w.output_tokens = 32;
  w.rate_rps = 16;
  w.requests = 400;
  w.seed = 7;
  config::FlagSet f(
      "usage: infera demo [flags]\n\n"
      "Starts simulated engines and an infera server on free localhost ports, runs the same\n"
      "shared-prefix workload under round-robin and then kv-aware, prints the comparison and\n"
      "writes plots (infera-demo-*.png). Takes about a minute.");
  f.add("--engines", &d.engines, "simulated engines (default 4)", "N");
  f.add("--num-gpu-blocks", &d.num_gpu_blocks, "KV blocks per engine (default 1280)", "B");
  f.add("--speedup-ratio", &d.speedup, "engine speed multiplier (default 5)", "X");
  f.add("--requests", &w.requests, "requests per policy (default 400)", "N");
  f.add("--rate", &w.rate_rps, "arrival rate, requests/s (default 16)", "R");
  f.add("--groups", &w.groups, "shared prompts (default 16)", "G");
  f.add("--system-tokens", &w.system_tokens, "shared prompt length in tokens (default 4096)", "P");
  f.add("--kv-overlap-weight", &d.overlap_weight,
        "kv-aware's cache-vs-load weight (default 4; the server's own default is 1.0)", "W");
  f.add("--out-dir", &d.out_dir, "where the plots, JSON and logs go (default .)", "DIR");
  f.add("--keep-logs", &d.keep_logs, "keep the engines' and server's logs", "");
  f.add("--compare-load-models", &d.compare_load_models,
        "also run kv-aware with --kv-load-model prefill-aware, beside the default active-blocks",
        "");
  f.enable_config_sources(config::process_config_sources());
  const Status parsed = f.parse(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "infera demo: %s\n", parsed.message().c_str());
    return 2;
  }
  if (f.help_requested()) {
    std::printf("%s", f.help().c_str());
    return 0;
  }
  auto workload = make_workload("prefix-families", w);
  if (!workload.ok()) {
    std::fprintf(stderr, "infera demo: %s\n", workload.status().message().c_str());
    return 2;
  }
  std::error_code ec;
  fs::create_directories(d.out_dir, ec);
  const fs::path logs = fs::path(d.out_dir) / "infera-demo-logs";
  fs::create_directories(logs, ec);
  std::printf(
      "infera demo: %u simulated engines (%u KV blocks of 16 tokens each, speedup %.0fx) behind "
      "one infera server.\nWorkload: %u requests at %.0f req/s; %u groups share %u-token system "
      "prompts, each request adds a %u-token question and generates %u tokens.\nkv-aware runs "
      "with --kv-overlap-weight %s.\n\n",
      d.engines, d.num_gpu_blocks, d.speedup, w.requests, *w.rate_rps, w.groups, w.system_tokens,
      w.question_tokens, w.output_tokens, d.overlap_weight.c_str());
  std::fflush(stdout);

  RunReport report;
  std::vector<DemoRun> runs{{"round-robin", ""}, {"kv-aware", ""}};
  if (d.compare_load_models) runs.push_back({"kv-aware", "prefill-aware"});
  for (const DemoRun& run : runs) {
    const std::string policy = run.row();
    std::printf("== %s ==\n", policy.c_str());
    std::fflush(stdout);
    auto fleet = start_fleet(d, run, logs);
    if (!fleet.ok()) {
      std::fprintf(stderr, "infera demo: %s\n", fleet.status().message().c_str());
      return 1;
    }
    HttpRunOptions o;
    o.url = fleet->url;
    o.model = "infera-demo";
    auto result = run_http(*workload, o);
    fleet->stop();
    if (!result.ok()) {
      std::fprintf(stderr, "infera demo: %s\n", result.status().message().c_str());
      return 1;
    }
    report.policies[policy] = result->report;
  }
  report.settings = {{"workload", "prefix-families (demo)"},
                     {"requests", std::to_string(w.requests)},
                     {"engines", std::to_string(d.engines)},
                     {"mode", "demo"}};
  std::printf("\n%s", format_table(report).c_str());
  const PolicyReport& rr = report.policies["round-robin"];
  const PolicyReport& kv = report.policies["kv-aware"];
  for (const DemoRun& run : runs) {
    if (run.policy == "round-robin") continue;
    const PolicyReport& p = report.policies[run.row()];
    if (p.ttft_p50_ms <= 0) continue;
    std::printf(
        "%s%s vs round-robin: TTFT p50 %.1fx lower, p99 %.1fx lower; prefix hit ratio "
        "%.0f%% vs %.0f%%.\n",
        run.row() == "kv-aware" ? "\n" : "", run.row().c_str(), rr.ttft_p50_ms / p.ttft_p50_ms,
        rr.ttft_p99_ms / std::max(1e-9, p.ttft_p99_ms), p.hit_ratio * 100, rr.hit_ratio * 100);
  }
  const std::string prefix = (fs::path(d.out_dir) / "infera-demo").string();
  std::ofstream(prefix + ".json") << to_json(report);
  const Status plotted = write_plots(to_json(report), prefix);
  if (plotted.ok()) {
    std::printf("Plots: %s-ttft-cdf.png, %s-hit-ratio.png, %s-load.png; data: %s.json\n",
                prefix.c_str(), prefix.c_str(), prefix.c_str(), prefix.c_str());
  } else {
    std::fprintf(stderr, "infera demo: plots: %s\n", plotted.message().c_str());
  }
  if (!d.keep_logs) fs::remove_all(logs, ec);
  bool clean = rr.errors == 0 && kv.errors == 0;
  for (const auto& [name, p] : report.policies) clean = clean && p.errors == 0;
  return clean ? 0 : 1;
}

}  // namespace infera::loadgen
