#include "infera/mock/vllm_metrics.h"

#include <string>
#include <utility>

namespace infera::mock {

using engine::EngineConfig;
using engine::EngineMetrics;

void add_vllm_collector(metrics::Registry& registry, std::function<RunnerSnapshot()> snapshot,
                        const EngineConfig& config, const metrics::Labels& labels) {
  metrics::Labels cache_info = labels;
  cache_info.emplace_back("block_size", std::to_string(config.block_size));
  cache_info.emplace_back("cache_dtype", "auto");
  cache_info.emplace_back("enable_prefix_caching", config.enable_prefix_caching ? "True" : "False");
  cache_info.emplace_back("num_gpu_blocks", std::to_string(config.num_gpu_blocks));
  cache_info.emplace_back("num_cpu_blocks", "None");
  cache_info.emplace_back("prefix_caching_hash_algo", "xxh3");

  registry.add_collector([snapshot = std::move(snapshot), labels, cache_info](
                             metrics::Registry& r) {
    const RunnerSnapshot s = snapshot();
    const EngineMetrics& m = s.engine;
    auto gauge = [&](const char* name, const char* help, double v) {
      r.gauge(name, help, labels).set(v);
    };
    auto counter = [&](const char* name, const char* help, double v) {
      r.counter(name, help, labels).inc(v);
    };
    gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
          m.num_running);
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
          m.num_waiting);
    gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
          m.kv_cache_usage);
    gauge("vllm:gpu_cache_usage_perc",
          "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: use "
          "vllm:kv_cache_usage_perc.",
          m.kv_cache_usage);
    counter("vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            static_cast<double>(m.prefix_cache_queries));
    counter("vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            static_cast<double>(m.prefix_cache_hits));
    counter("vllm:gpu_prefix_cache_queries_total",
            "GPU prefix cache queries, in terms of number of queried tokens. DEPRECATED: use "
            "vllm:prefix_cache_queries.",
            static_cast<double>(m.prefix_cache_queries));
    counter("vllm:gpu_prefix_cache_hits_total",
            "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: use "
            "vllm:prefix_cache_hits.",
            static_cast<double>(m.prefix_cache_hits));
    counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
            static_cast<double>(m.num_preemptions));
    counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
            static_cast<double>(m.prompt_tokens));
    counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
            static_cast<double>(m.generation_tokens));
    const char* success_help = "Count of successfully processed requests.";
    for (const auto& [reason, value] :
         {std::pair<const char*, uint64_t>{"stop", m.requests_finished_stop},
          {"length", m.requests_finished_length},
          {"abort", m.requests_aborted}}) {
      metrics::Labels l = labels;
      l.emplace_back("finished_reason", reason);
      r.counter("vllm:request_success_total", success_help, l).inc(static_cast<double>(value));
    }
    r.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", cache_info)
        .set(1.0);
    // The mock's own health: published KV-event batches, batches a full queue refused, and how
    // far the model's clock trails real time (0 unless the process cannot keep up).
    counter("infera_engine_kv_event_batches_total", "KV-event batches published.",
            static_cast<double>(s.kv_event_batches));
    counter("infera_engine_kv_event_drops_total",
            "KV-event batches dropped because the publisher queue was full.",
            static_cast<double>(s.kv_event_drops));
    // Disaggregation: pulls of a remote prefill's blocks (decode side), the blocks they moved,
    // requests waiting for their pull, finished prefills holding blocks for a remote decode.
    counter("infera_engine_kv_pulls_total", "Pulls of a remote prefill's KV blocks.",
            static_cast<double>(m.kv_pulls));
    counter("infera_engine_kv_pulled_blocks_total", "KV blocks pulled from remote prefills.",
            static_cast<double>(m.kv_pulled_blocks));
    gauge("infera_engine_kv_transferring_requests",
          "Requests waiting for their KV blocks from a remote prefill.", m.num_transferring);
    gauge("infera_engine_kv_held_requests",
          "Finished prefills holding their KV blocks for a remote decode.",
          m.num_held_for_transfer);
    gauge("infera_engine_lag_seconds",
          "How far the last delivered step ended behind the clock.", s.lag_seconds);
  });
}

}  // namespace infera::mock
