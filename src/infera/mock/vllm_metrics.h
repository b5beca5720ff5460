// vLLM's Prometheus series for the simulated engine's /metrics (vllm/v1/metrics/loggers.py
// names and labels: model_name, engine), computed at scrape time from the runner's snapshot:
// request gauges, KV-cache usage, prefix-cache queries and hits, token and preemption counters,
// finished requests by reason, and vllm:cache_config_info whose labels carry the block size (a
// router discovers the engine's block size from it). The histograms (TTFT, inter-token, e2e)
// are observed live by EngineRunner in the same registry. Registration at startup; the
// collector runs on whichever thread renders the registry.
#pragma once

#include <functional>

#include "infera/common/metrics.h"
#include "infera/engine/engine_config.h"
#include "infera/mock/engine_runner.h"

namespace infera::mock {

// `labels`: {{"model_name", NAME}, {"engine", "0"}}.
void add_vllm_collector(metrics::Registry& registry, std::function<RunnerSnapshot()> snapshot,
                        const engine::EngineConfig& config, const metrics::Labels& labels);

}  // namespace infera::mock
