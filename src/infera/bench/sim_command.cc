#include <cstdio>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "infera/bench/bounds.h"
#include "infera/bench/commands.h"
#include "infera/bench/plot.h"
#include "infera/bench/sim.h"
#include "infera/config/flags.h"
#include "infera/config/load_model_flags.h"
#include "infera/routing/load_model.h"

namespace infera::bench {
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

}  // namespace

int run_sim_command(std::span<const std::string> args) {
  std::string trace, workload_name, json_path, plot_path, policies = "round-robin,kv-aware";
  SimOptions o;
  WorkloadOptions w;
  TraceOptions t;
  double rate_scale = 1.0;
  uint64_t seed = 1;
  uint32_t threads = 2;
  bool compare_aggregated = false;
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
      "the same workload on P+D aggregated workers (routed with --kv-overlap-weight).");
  f.add("--trace", &trace, "Mooncake-format trace to replay", "FILE");
  f.add("--workload", &workload_name, "synthetic workload: prefix-families, multi-turn, rag, agentic",
        "NAME");
  f.add("--workers", &o.workers, "engines in an aggregated fleet (default 8)", "N");
  f.add("--prefill-workers", &o.prefill_workers,
        "prefill engines of a disaggregated fleet (with --decode-workers)", "P");
  f.add("--decode-workers", &o.decode_workers,
        "decode engines of a disaggregated fleet (with --prefill-workers)", "D");
  f.add("--compare-aggregated", &compare_aggregated,
        "also run each policy on P+D aggregated engines (disaggregated fleets only)", "");
  f.add("--kv-block-bytes", &o.engine.kv_block_bytes,
        "bytes of one KV block moved by a decode's pull (default 2 MiB)", "BYTES");
  f.add("--kv-transfer-bandwidth-gb-s", &o.engine.kv_transfer_bandwidth_gb_s,
        "prefill-to-decode link, 10^9 bytes/s (default 25)", "GB_S");
  f.add("--num-gpu-blocks", &o.engine.num_gpu_blocks, "KV blocks per engine (default 16384)", "B");
  f.add("--block-size", &o.engine.block_size, "tokens per block (default 16)", "N");
  f.add("--max-num-seqs", &o.engine.max_num_seqs, "engine batch size (default 256)", "N");
  f.add("--max-num-batched-tokens", &o.engine.max_num_batched_tokens,
        "tokens per engine step (default 8192)", "N");
  f.add("--speedup-ratio", &o.engine.speedup_ratio, "engine speed multiplier (default 1)", "X");
  f.add("--policies", &policies,
        "comma-separated: round-robin, random, least-loaded, kv-aware, approx-prefix; "
        "kv-aware:MODEL runs kv-aware with that --kv-load-model (rows side by side)",
        "LIST");
  f.add("--kv-overlap-weight", &o.router.overlap_weight, "kv-aware overlap weight (default 1.0)",
        "W");
  f.add("--kv-prefill-overlap-weight", &o.router.prefill_overlap_weight,
        "kv-aware weight of the prefill stage (default: --kv-overlap-weight)", "W");
  f.add("--kv-decode-overlap-weight", &o.router.decode_overlap_weight,
        "kv-aware weight of the decode stage (default: --kv-overlap-weight)", "W");
  f.add("--router-temperature", &o.router.temperature, "kv-aware temperature (default 0)", "T");
  config::LoadModelFlags load_flags;
  config::add_load_model_flags(f, &load_flags);
  f.add("--engine-metrics-interval-s", &o.engine_metrics_interval_s,
        "read each engine's own load (waiting, running, KV usage) this often, as the server polls "
        "/metrics; prefill-aware counts requests it did not route (0 = off; default 1)",
        "SECONDS");
  f.add("--hidden-traffic", &o.hidden_fraction,
        "fraction of requests that bypass the router (another router, direct clients): each goes "
        "to a random worker, unseen by the router's own counts (default 0)",
        "F");
  f.add("--rate-scale", &rate_scale, "trace speed-up factor, or multiplier of --rate (default 1)",
        "X");
  f.add("--requests", &w.requests, "synthetic workload size (default: the workload's)", "N");
  f.add("--max-requests", &t.max_requests, "replay only the first N trace requests", "N");
  f.add("--rate", &w.rate_rps,
        "synthetic arrival rate, requests/s (default 8; multi-turn 3.33, agentic 10: turns and "
        "fan-out included, so waits on earlier turns make it lower)",
        "R");
  f.add("--groups", &w.groups, "prefix-families: number of shared prompts (default 8)", "G");
  f.add("--system-tokens", &w.system_tokens, "prefix-families: shared prompt length (default 2048)",
        "P");
  f.add("--question-tokens", &w.question_tokens, "prefix-families: per-request tokens (default 128)",
        "Q");
  f.add("--output-tokens", &w.output_tokens, "tokens generated per request (default 64)", "N");
  f.add("--tool-tokens", &w.tool_tokens, "agentic: shared tool-description prompt (default 4096)",
        "T");
  f.add("--seed", &seed, "seed for the workload and tie-breaking (default 1)", "S");
  f.add("--threads", &threads, "policies simulated in parallel (default 2)", "N");
  f.add("--json", &json_path, "write the result JSON here", "OUT.json");
  f.add("--plot", &plot_path, "write PNG plots with this path prefix (python3-matplotlib)", "PREFIX");
  const Status parsed = f.parse(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "infera sim: %s\n", parsed.message().c_str());
    return 2;
  }
  if (f.help_requested()) {
    std::printf("%s", f.help().c_str());
    return 0;
  }
  if (trace.empty() == workload_name.empty()) {
    std::fprintf(stderr, "infera sim: give exactly one of --trace or --workload\n");
    return 2;
  }
  Result<Workload> workload = [&]() -> Result<Workload> {
    if (!trace.empty()) {
      t.rate_scale = rate_scale;
      t.seed = seed;
      return load_mooncake_trace(trace, t);
    }
    w.seed = seed;
    w.rate_scale = rate_scale;
    return make_workload(workload_name, w);
  }();
  if (!workload.ok()) {
    std::fprintf(stderr, "infera sim: %s\n", workload.status().message().c_str());
    return 2;
  }
  o.router.seed = seed;
  const std::vector<std::string> names = split_list(policies);
  if (names.empty()) {
    std::fprintf(stderr, "infera sim: --policies is empty\n");
    return 2;
  }
  // Each entry is POLICY or POLICY:LOAD_MODEL; the load model's other flags apply to all.
  struct Choice {
    std::string policy;
    routing::LoadModelOptions load;
  };
  std::vector<Choice> choices;
  for (const std::string& n : names) {
    const size_t colon = n.find(':');
    Choice choice{n.substr(0, colon), {}};
    auto p = routing::make_policy(choice.policy);
    if (!p.ok()) {
      std::fprintf(stderr, "infera sim: %s\n", p.status().message().c_str());
      return 2;
    }
    config::LoadModelFlags flags = load_flags;
    if (colon != std::string::npos) flags.model = n.substr(colon + 1);
    auto load = routing::resolve_load_options(flags);
    if (!load.ok()) {
      std::fprintf(stderr, "infera sim: %s: %s\n", n.c_str(), load.status().message().c_str());
      return 2;
    }
    choice.load = *load;
    choices.push_back(std::move(choice));
  }
  if (!(o.hidden_fraction >= 0 && o.hidden_fraction <= 1) || !(o.engine_metrics_interval_s >= 0)) {
    std::fprintf(stderr,
                 "infera sim: --hidden-traffic is in [0, 1], --engine-metrics-interval-s >= 0\n");
    return 2;
  }
  const bool disagg = disaggregated(o);
  if (disagg && (o.prefill_workers == 0 || o.decode_workers == 0)) {
    std::fprintf(stderr, "infera sim: give both --prefill-workers and --decode-workers (>= 1)\n");
    return 2;
  }
  if (disagg && f.was_set("--workers")) {
    std::fprintf(stderr, "infera sim: --workers is the aggregated fleet; a disaggregated fleet "
                         "has --prefill-workers + --decode-workers\n");
    return 2;
  }
  if (compare_aggregated && !disagg) {
    std::fprintf(stderr, "infera sim: --compare-aggregated needs --prefill-workers and "
                         "--decode-workers\n");
    return 2;
  }
  const uint32_t workers = fleet_size(o);
  // One run per (fleet, policy); the aggregated twin of a disaggregated fleet has P+D workers.
  struct Run {
    std::string row;
    std::string policy;
    SimOptions options;
  };
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
    if (compare_aggregated) {
      SimOptions agg = with;
      agg.workers = workers;
      agg.prefill_workers = agg.decode_workers = 0;
      runs.push_back(Run{n + " agg " + std::to_string(workers), policy, agg});
    }
    runs.push_back(Run{
        n + " " + std::to_string(o.prefill_workers) + "P+" + std::to_string(o.decode_workers) + "D",
        policy, with});
  }
  const std::string fleet = disagg ? std::to_string(o.prefill_workers) + " prefill + " +
                                         std::to_string(o.decode_workers) + " decode"
                                   : std::to_string(workers);
  std::fprintf(stderr, "infera sim: %zu requests (%s), %s workers x %u blocks, policies %s\n",
               workload->requests.size(), workload->name.c_str(), fleet.c_str(),
               o.engine.num_gpu_blocks, policies.c_str());

  RunReport report;
  // Runs go side by side on `threads` threads; each simulation is independent.
  std::vector<std::future<Result<SimResult>>> futures;
  std::vector<Result<SimResult>> results;
  size_t next = 0;
  while (next < runs.size() || !futures.empty()) {
    while (next < runs.size() && futures.size() < std::max(1u, threads)) {
      futures.push_back(std::async(std::launch::async, [&, run = &runs[next]] {
        return simulate(*workload, run->options, run->policy);
      }));
      ++next;
    }
    results.push_back(futures.front().get());
    futures.erase(futures.begin());
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!results[i].ok()) {
      std::fprintf(stderr, "infera sim: %s: %s\n", runs[i].row.c_str(),
                   results[i].status().message().c_str());
      return 1;
    }
    report.policies[runs[i].row] = results[i]->report;
    std::fprintf(stderr, "  %-22s simulated in %.1f s (%llu engine steps)\n", runs[i].row.c_str(),
                 results[i]->wall_s, static_cast<unsigned long long>(results[i]->engine_steps));
  }
  const uint64_t capacity = uint64_t{workers} * (o.engine.num_gpu_blocks - 1);
  report.bounds = Bounds{infinite_cache_hit_ratio(*workload, o.engine.block_size),
                         pooled_lru_hit_ratio(*workload, o.engine.block_size, capacity)};
  const TtftQuantiles lower = ttft_lower_bound(*workload, o.engine);
  report.bounds->ttft_lower_p50_ms = lower.p50_ms;
  report.bounds->ttft_lower_p90_ms = lower.p90_ms;
  report.bounds->ttft_lower_p99_ms = lower.p99_ms;
  report.settings = {
      {"workload", workload->name},
      {"requests", std::to_string(workload->requests.size())},
      {"workers", std::to_string(workers)},
      {"num_gpu_blocks", std::to_string(o.engine.num_gpu_blocks)},
      {"block_size", std::to_string(o.engine.block_size)},
      {"rate_scale", std::to_string(rate_scale)},
      {"kv_overlap_weight", std::to_string(o.router.overlap_weight)},
      {"kv_load_model", load_flags.model},
      {"seed", std::to_string(seed)},
      {"kv_block_bytes", std::to_string(o.engine.kv_block_bytes)},
      {"kv_transfer_bandwidth_gb_s", std::to_string(o.engine.kv_transfer_bandwidth_gb_s)},
      {"mode", "sim"}};
  if (disagg) {
    report.settings["prefill_workers"] = std::to_string(o.prefill_workers);
    report.settings["decode_workers"] = std::to_string(o.decode_workers);
    report.settings["kv_prefill_overlap_weight"] =
        std::to_string(routing::stage_overlap_weight(o.router, routing::Stage::kPrefill));
    report.settings["kv_decode_overlap_weight"] =
        std::to_string(routing::stage_overlap_weight(o.router, routing::Stage::kDecode));
  }
  std::printf("%s", format_table(report).c_str());
  if (!json_path.empty()) {
    std::ofstream(json_path) << to_json(report);
    std::fprintf(stderr, "infera sim: wrote %s\n", json_path.c_str());
  }
  if (!plot_path.empty()) {
    const Status plotted = write_plots(to_json(report), plot_path);
    if (!plotted.ok()) {
      std::fprintf(stderr, "infera sim: plots: %s\n", plotted.message().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace infera::bench
