#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <thread>

#include "infera/config/flags.h"
#include "infera/config/load_model_flags.h"
#include "infera/routing/load_model.h"
#include "infera/sim/bounds.h"
#include "infera/sim/commands.h"
#include "infera/sim/plot.h"
#include "infera/sim/sim.h"

namespace infera::sim {
namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Everything `infera sim` reads from its flags; the FlagSet points into it.
struct SimFlags {
  std::string trace, workload_name, json_path, plot_path, policies = "round-robin,kv-aware";
  SimOptions sim;
  WorkloadOptions synthetic;
  TraceOptions replay;
  config::LoadModelFlags load;
  double rate_scale = 1.0;
  uint64_t seed = 1;
  uint32_t threads = 2;
  bool compare_aggregated = false;
  bool workers_set = false;  // --workers given explicitly
};

// At most this many replicas: a PeerLoad tracks up to 256 peers (PeerLoad::Options::max_peers).
constexpr uint32_t kMaxRouters = 256;

// A --policies entry: POLICY or POLICY:LOAD_MODEL; the load model's other flags apply to all.
struct Choice {
  std::string policy;
  routing::LoadModelOptions load;
};

// One run per (fleet, policy); the aggregated twin of a disaggregated fleet has P+D workers.
struct Run {
  std::string row;
  std::string policy;
  SimOptions options;
};

config::FlagSet sim_flag_set(SimFlags& s) {
  config::FlagSet f(
      "usage: infera sim (--trace FILE.jsonl | --workload NAME) --workers N --num-gpu-blocks B\n"
      "                  --block-size 16 --policies round-robin,kv-aware,... [--rate-scale X]\n"
      "                  [--seed S] --json OUT.json\n"
      "       infera sim ... --prefill-workers P --decode-workers D [--compare-aggregated]\n"
      "                  [--kv-prefill-overlap-weight 20 --kv-decode-overlap-weight 2]\n\n"
      "Replays a workload in virtual time through the real router and engine model, one run\n"
      "per policy, side by side; prints a table, writes the pinned JSON and optional plots.\n"
      "With --prefill-workers and --decode-workers the fleet is disaggregated (vLLM-style\n"
      "prefill then decode, the blocks pulled over --kv-transfer-bandwidth-gb-s); its rows\n"
      "read like 'kv-aware 2P+2D', and --compare-aggregated adds rows like 'kv-aware agg 4':\n"
      "the same workload on P+D aggregated workers (routed with --kv-overlap-weight).\n"
      "With --routers N (N > 1) each kv-aware row is run three times: one router, and rows like\n"
      "'kv-aware (8 routers, sync 5 ms)' and 'kv-aware (8 routers, no sync)': N replicas that\n"
      "take requests in turn, sharing their load changes --router-sync-latency-ms late, or not.");
  f.add("--trace", &s.trace, "Mooncake-format trace to replay", "FILE");
  f.add("--workload", &s.workload_name,
        "synthetic workload: prefix-families, multi-turn, rag, agentic", "NAME");
  f.add("--workers", &s.sim.workers, "engines in an aggregated fleet (default 8)", "N");
  f.add("--prefill-workers", &s.sim.prefill_workers,
        "prefill engines of a disaggregated fleet (with --decode-workers)", "P");
  f.add("--decode-workers", &s.sim.decode_workers,
        "decode engines of a disaggregated fleet (with --prefill-workers)", "D");
  f.add("--compare-aggregated", &s.compare_aggregated,
        "also run each policy on P+D aggregated engines (disaggregated fleets only)", "");
  f.add("--kv-block-bytes", &s.sim.engine.kv_block_bytes,
        "bytes of one KV block moved by a decode's pull (default 2 MiB)", "BYTES");
  f.add("--kv-transfer-bandwidth-gb-s", &s.sim.engine.kv_transfer_bandwidth_gb_s,
        "prefill-to-decode link, 10^9 bytes/s (default 25)", "GB_S");
  f.add("--num-gpu-blocks", &s.sim.engine.num_gpu_blocks, "KV blocks per engine (default 16384)",
        "B");
  f.add("--block-size", &s.sim.engine.block_size, "tokens per block (default 16)", "N");
  f.add("--max-num-seqs", &s.sim.engine.max_num_seqs, "engine batch size (default 256)", "N");
  f.add("--max-num-batched-tokens", &s.sim.engine.max_num_batched_tokens,
        "tokens per engine step (default 8192)", "N");
  f.add("--speedup-ratio", &s.sim.engine.speedup_ratio, "engine speed multiplier (default 1)", "X");
  f.add("--policies", &s.policies,
        "comma-separated: round-robin, random, least-loaded, kv-aware, approx-prefix; "
        "kv-aware:MODEL runs kv-aware with that --kv-load-model (rows side by side)",
        "LIST");
  f.add("--kv-overlap-weight", &s.sim.router.overlap_weight,
        "kv-aware overlap weight (default 1.0)", "W");
  f.add("--kv-prefill-overlap-weight", &s.sim.router.prefill_overlap_weight,
        "kv-aware weight of the prefill stage (default: --kv-overlap-weight)", "W");
  f.add("--kv-decode-overlap-weight", &s.sim.router.decode_overlap_weight,
        "kv-aware weight of the decode stage (default: --kv-overlap-weight)", "W");
  f.add("--router-temperature", &s.sim.router.temperature, "kv-aware temperature (default 0)", "T");
  config::add_load_model_flags(f, &s.load);
  f.add("--engine-metrics-interval-s", &s.sim.engine_metrics_interval_s,
        "read each engine's own load (waiting, running, KV usage) this often, as the server polls "
        "/metrics; prefill-aware counts requests it did not route (0 = off; default 1)",
        "SECONDS");
  f.add("--hidden-traffic", &s.sim.hidden_fraction,
        "fraction of requests that bypass the router (another router, direct clients): each goes "
        "to a random worker, unseen by the router's own counts (default 0)",
        "F");
  f.add("--routers", &s.sim.routers,
        "router replicas behind one Service, taking requests in turn; N > 1 adds two rows per "
        "kv-aware row: N routers sharing their load, and N routers without (1..256, default 1)",
        "N");
  f.add("--router-sync-latency-ms", &s.sim.router_sync_latency_ms,
        "with --routers > 1: virtual time for a router's load change to reach the others, as "
        "over NATS (0 = before the next request is routed; default 5)",
        "MS");
  f.add("--rate-scale", &s.rate_scale, "trace speed-up factor, or multiplier of --rate (default 1)",
        "X");
  f.add("--requests", &s.synthetic.requests, "synthetic workload size (default: the workload's)",
        "N");
  f.add("--max-requests", &s.replay.max_requests, "replay only the first N trace requests", "N");
  f.add("--rate", &s.synthetic.rate_rps,
        "synthetic arrival rate, requests/s (default 8; multi-turn 3.33, agentic 10: turns and "
        "fan-out included, so waits on earlier turns make it lower)",
        "R");
  f.add("--groups", &s.synthetic.groups, "prefix-families: number of shared prompts (default 8)",
        "G");
  f.add("--system-tokens", &s.synthetic.system_tokens,
        "prefix-families: shared prompt length (default 2048)", "P");
  f.add("--question-tokens", &s.synthetic.question_tokens,
        "prefix-families: per-request tokens (default 128)", "Q");
  f.add("--output-tokens", &s.synthetic.output_tokens, "tokens generated per request (default 64)",
        "N");
  f.add("--tool-tokens", &s.synthetic.tool_tokens,
        "agentic: shared tool-description prompt (default 4096)", "T");
  f.add("--seed", &s.seed, "seed for the workload and tie-breaking (default 1)", "S");
  f.add("--threads", &s.threads, "policies simulated in parallel (default 2)", "N");
  f.add("--json", &s.json_path, "write the result JSON here", "OUT.json");
  f.add("--plot", &s.plot_path, "write PNG plots with this path prefix (python3-matplotlib)",
        "PREFIX");
  return f;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "infera sim: %s\n", message.c_str());
  return 2;
}

Result<Workload> load_workload(SimFlags& s) {
  if (!s.trace.empty()) {
    s.replay.rate_scale = s.rate_scale;
    s.replay.seed = s.seed;
    return load_mooncake_trace(s.trace, s.replay);
  }
  s.synthetic.seed = s.seed;
  s.synthetic.rate_scale = s.rate_scale;
  return make_workload(s.workload_name, s.synthetic);
}

Result<std::vector<Choice>> parse_policies(const std::vector<std::string>& names,
                                           const config::LoadModelFlags& load_flags) {
  std::vector<Choice> choices;
  for (const std::string& n : names) {
    const size_t colon = n.find(':');
    Choice choice{n.substr(0, colon), {}};
    auto p = routing::make_policy(choice.policy);
    if (!p.ok()) return p.status();
    config::LoadModelFlags flags = load_flags;
    if (colon != std::string::npos) flags.model = n.substr(colon + 1);
    auto load = routing::resolve_load_options(flags);
    if (!load.ok()) return invalid_argument(n + ": " + load.status().message());
    choice.load = *load;
    choices.push_back(std::move(choice));
  }
  return choices;
}

Status check_fleet(const SimFlags& s) {
  const SimOptions& o = s.sim;
  if (!(o.hidden_fraction >= 0 && o.hidden_fraction <= 1) || !(o.engine_metrics_interval_s >= 0)) {
    return invalid_argument("--hidden-traffic is in [0, 1], --engine-metrics-interval-s >= 0");
  }
  const bool disagg = disaggregated(o);
  if (disagg && (o.prefill_workers == 0 || o.decode_workers == 0)) {
    return invalid_argument("give both --prefill-workers and --decode-workers (>= 1)");
  }
  if (disagg && s.workers_set) {
    return invalid_argument(
        "--workers is the aggregated fleet; a disaggregated fleet has --prefill-workers + "
        "--decode-workers");
  }
  if (s.compare_aggregated && !disagg) {
    return invalid_argument("--compare-aggregated needs --prefill-workers and --decode-workers");
  }
  if (o.routers == 0 || o.routers > kMaxRouters) {
    return invalid_argument("--routers is 1.." + std::to_string(kMaxRouters) + ", got " +
                            std::to_string(o.routers));
  }
  if (!(o.router_sync_latency_ms >= 0 && o.router_sync_latency_ms <= 3.6e6)) {
    return invalid_argument("--router-sync-latency-ms is 0..3600000 (milliseconds)");
  }
  return ok_status();
}

// "5", "0.5": a latency as a row name shows it.
std::string format_ms(double ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", ms);
  return text;
}

// --routers N > 1: each kv-aware run also as N replicas with their load shared and without.
std::vector<Run> add_replica_runs(const SimFlags& s, std::vector<Run> runs) {
  const uint32_t n = s.sim.routers;
  std::vector<Run> out;
  for (Run& run : runs) {
    const bool replicate = n > 1 && run.policy == "kv-aware";
    Run one = run;
    one.options.routers = 1;
    out.push_back(std::move(one));
    if (!replicate) continue;
    const std::string prefix = run.row + " (" + std::to_string(n) + " routers, ";
    Run synced = run;
    synced.row = prefix + "sync " + format_ms(s.sim.router_sync_latency_ms) + " ms)";
    synced.options.sync_routers = true;
    out.push_back(std::move(synced));
    Run apart = std::move(run);
    apart.row = prefix + "no sync)";
    apart.options.sync_routers = false;
    out.push_back(std::move(apart));
  }
  return out;
}

std::vector<Run> make_runs(const SimFlags& s, const std::vector<std::string>& names,
                           const std::vector<Choice>& choices) {
  const SimOptions& o = s.sim;
  const bool disagg = disaggregated(o);
  const uint32_t workers = fleet_size(o);
  std::vector<Run> runs;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    SimOptions with = o;
    with.router.load = choices[i].load;
    const std::string& policy = choices[i].policy;
    if (!disagg) {
      runs.push_back(Run{n, policy, with});
      continue;
    }
    if (s.compare_aggregated) {
      SimOptions agg = with;
      agg.workers = workers;
      agg.prefill_workers = agg.decode_workers = 0;
      runs.push_back(Run{n + " agg " + std::to_string(workers), policy, agg});
    }
    runs.push_back(Run{
        n + " " + std::to_string(o.prefill_workers) + "P+" + std::to_string(o.decode_workers) + "D",
        policy, with});
  }
  return runs;
}

// The runs the flags ask for, once every flag is checked (a bad one is a usage error).
Result<std::vector<Run>> plan_runs(SimFlags& s) {
  s.sim.router.seed = s.seed;
  const std::vector<std::string> names = split_list(s.policies);
  if (names.empty()) return invalid_argument("--policies is empty");
  INFERA_ASSIGN_OR_RETURN(const std::vector<Choice> choices, parse_policies(names, s.load));
  INFERA_RETURN_IF_ERROR(check_fleet(s));
  return add_replica_runs(s, make_runs(s, names, choices));
}

void print_plan(const Workload& workload, const SimFlags& s) {
  const SimOptions& o = s.sim;
  const std::string fleet = disaggregated(o) ? std::to_string(o.prefill_workers) + " prefill + " +
                                                   std::to_string(o.decode_workers) + " decode"
                                             : std::to_string(fleet_size(o));
  std::fprintf(stderr, "infera sim: %zu requests (%s), %s workers x %u blocks, policies %s\n",
               workload.requests.size(), workload.name.c_str(), fleet.c_str(),
               o.engine.num_gpu_blocks, s.policies.c_str());
  if (o.routers > 1) {
    std::fprintf(stderr, "infera sim: kv-aware also on %u routers, sync latency %s ms\n", o.routers,
                 format_ms(o.router_sync_latency_ms).c_str());
  }
}

// Runs go side by side on `threads` threads; each simulation is independent. Results are in
// the order of `runs`.
std::vector<Result<SimResult>> simulate_runs(const Workload& workload, const std::vector<Run>& runs,
                                             uint32_t threads) {
  std::vector<std::future<Result<SimResult>>> futures;
  std::vector<Result<SimResult>> results;
  size_t next = 0;
  while (next < runs.size() || !futures.empty()) {
    while (next < runs.size() && futures.size() < std::max(1u, threads)) {
      futures.push_back(std::async(std::launch::async, [&, run = &runs[next]] {
        return simulate(workload, run->options, run->policy);
      }));
      ++next;
    }
    results.push_back(futures.front().get());
    futures.erase(futures.begin());
  }
  return results;
}

// The bounds no policy can beat on this workload and fleet.
Bounds workload_bounds(const Workload& workload, const SimOptions& o) {
  const uint64_t capacity = uint64_t{fleet_size(o)} * (o.engine.num_gpu_blocks - 1);
  Bounds bounds{infinite_cache_hit_ratio(workload, o.engine.block_size),
                pooled_lru_hit_ratio(workload, o.engine.block_size, capacity)};
  const TtftQuantiles lower = ttft_lower_bound(workload, o.engine);
  bounds.ttft_lower_p50_ms = lower.p50_ms;
  bounds.ttft_lower_p90_ms = lower.p90_ms;
  bounds.ttft_lower_p99_ms = lower.p99_ms;
  return bounds;
}

std::map<std::string, std::string> report_settings(const Workload& workload, const SimFlags& s) {
  const SimOptions& o = s.sim;
  std::map<std::string, std::string> settings = {
      {"workload", workload.name},
      {"requests", std::to_string(workload.requests.size())},
      {"workers", std::to_string(fleet_size(o))},
      {"num_gpu_blocks", std::to_string(o.engine.num_gpu_blocks)},
      {"block_size", std::to_string(o.engine.block_size)},
      {"rate_scale", std::to_string(s.rate_scale)},
      {"kv_overlap_weight", std::to_string(o.router.overlap_weight)},
      {"kv_load_model", s.load.model},
      {"seed", std::to_string(s.seed)},
      {"kv_block_bytes", std::to_string(o.engine.kv_block_bytes)},
      {"kv_transfer_bandwidth_gb_s", std::to_string(o.engine.kv_transfer_bandwidth_gb_s)},
      {"mode", "sim"}};
  if (o.routers > 1) {
    settings["routers"] = std::to_string(o.routers);
    settings["router_sync_latency_ms"] = format_ms(o.router_sync_latency_ms);
  }
  if (disaggregated(o)) {
    settings["prefill_workers"] = std::to_string(o.prefill_workers);
    settings["decode_workers"] = std::to_string(o.decode_workers);
    settings["kv_prefill_overlap_weight"] =
        std::to_string(routing::stage_overlap_weight(o.router, routing::Stage::kPrefill));
    settings["kv_decode_overlap_weight"] =
        std::to_string(routing::stage_overlap_weight(o.router, routing::Stage::kDecode));
  }
  return settings;
}

// Prints the table and writes the JSON and plots: the exit code, 1 when a run failed.
int report_runs(const Workload& workload, const SimFlags& s, const std::vector<Run>& runs,
                const std::vector<Result<SimResult>>& results) {
  RunReport report;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!results[i].ok()) {
      std::fprintf(stderr, "infera sim: %s: %s\n", runs[i].row.c_str(),
                   results[i].status().message().c_str());
      return 1;
    }
    report.policies[runs[i].row] = results[i]->report;
    std::fprintf(stderr, "  %-22s simulated in %.1f s (%llu engine steps)\n", runs[i].row.c_str(),
                 results[i]->wall_s, static_cast<unsigned long long>(results[i]->engine_steps));
    const SyncStats& sync = results[i]->sync;
    if (sync.sent > 0) {
      std::fprintf(stderr, "  %-22s load ops: %llu sent, %llu applied by peers, %llu not applied\n",
                   runs[i].row.c_str(), static_cast<unsigned long long>(sync.sent),
                   static_cast<unsigned long long>(sync.applied),
                   static_cast<unsigned long long>(sync.not_applied));
    }
  }
  report.bounds = workload_bounds(workload, s.sim);
  report.settings = report_settings(workload, s);
  std::printf("%s", format_table(report).c_str());
  if (!s.json_path.empty()) {
    std::ofstream(s.json_path) << to_json(report);
    std::fprintf(stderr, "infera sim: wrote %s\n", s.json_path.c_str());
  }
  if (!s.plot_path.empty()) {
    const Status plotted = write_plots(to_json(report), s.plot_path);
    if (!plotted.ok()) {
      std::fprintf(stderr, "infera sim: plots: %s\n", plotted.message().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int run_sim_command(std::span<const std::string> args) {
  SimFlags flags;
  config::FlagSet f = sim_flag_set(flags);
  f.enable_config_sources(config::process_config_sources());
  const Status parsed = f.parse(args);
  if (!parsed.ok()) return usage_error(parsed.message());
  if (f.help_requested()) {
    std::printf("%s", f.help().c_str());
    return 0;
  }
  flags.workers_set = f.was_set("--workers");
  if (flags.trace.empty() == flags.workload_name.empty()) {
    return usage_error("give exactly one of --trace or --workload");
  }
  const Result<Workload> workload = load_workload(flags);
  if (!workload.ok()) return usage_error(workload.status().message());
  const Result<std::vector<Run>> runs = plan_runs(flags);
  if (!runs.ok()) return usage_error(runs.status().message());
  print_plan(*workload, flags);
  return report_runs(*workload, flags, *runs, simulate_runs(*workload, *runs, flags.threads));
}

}  // namespace infera::sim
