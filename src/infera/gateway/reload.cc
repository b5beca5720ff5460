#include "infera/gateway/reload.h"

#include <map>
#include <memory>
#include <utility>

#include "infera/gateway/context.h"

namespace infera::gateway {
namespace {

using config::ServerConfig;

// The records of `specs` (--worker values) by id, the first of a repeated id winning (as
// Fleet::update keeps the first).
Result<std::map<std::string, discovery::WorkerInfo>> workers_by_id(
    const std::vector<std::string>& specs, discovery::WorkerSet* in_order) {
  std::map<std::string, discovery::WorkerInfo> out;
  for (const std::string& spec : specs) {
    INFERA_ASSIGN_OR_RETURN(discovery::WorkerInfo w, discovery::parse_worker_flag(spec));
    if (out.count(w.id)) continue;
    if (in_order != nullptr) in_order->push_back(w);
    out.emplace(w.id, std::move(w));
  }
  return out;
}

// Static discovery's new worker list: parsed, and what it adds, removes and changes by id.
Status plan_workers(const ServerConfig& running, const ServerConfig& next, ReloadPlan& plan) {
  INFERA_ASSIGN_OR_RETURN(const auto before, workers_by_id(running.workers, nullptr));
  discovery::WorkerSet set;
  INFERA_ASSIGN_OR_RETURN(const auto after, workers_by_id(next.workers, &set));
  for (const auto& [id, w] : after) {
    auto it = before.find(id);
    if (it == before.end()) {
      plan.workers_added.push_back(id);
    } else if (!(it->second == w)) {
      plan.workers_changed.push_back(id);
    }
  }
  for (const auto& [id, w] : before) {
    if (!after.count(id)) plan.workers_removed.push_back(id);
  }
  if (!plan.workers_added.empty() || !plan.workers_removed.empty() ||
      !plan.workers_changed.empty()) {
    plan.workers = std::move(set);
  }
  return ok_status();
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ",") + w;
  return out;
}

// Calls `field(flag, &ServerConfig::member)` for every setting with a flag, in --help order, and
// `load_field(flag, &LoadModelFlags::member)` for the load model's.
template <typename Field, typename LoadField>
void each_setting(Field&& field, LoadField&& load_field) {
  field("--host", &ServerConfig::host);
  field("--port", &ServerConfig::port);
  field("--io-threads", &ServerConfig::io_threads);
  field("--router-policy", &ServerConfig::router_policy);
  field("--router-tokenizer-path", &ServerConfig::tokenizer_path);
  field("--kv-overlap-weight", &ServerConfig::kv_overlap_weight);
  field("--kv-prefill-overlap-weight", &ServerConfig::kv_prefill_overlap_weight);
  field("--kv-decode-overlap-weight", &ServerConfig::kv_decode_overlap_weight);
  field("--router-temperature", &ServerConfig::router_temperature);
  field("--router-seed", &ServerConfig::router_seed);
  field("--block-size", &ServerConfig::block_size);
  field("--active-block-ttl-s", &ServerConfig::active_block_ttl_s);
  field("--engine-metrics-interval-s", &ServerConfig::engine_metrics_interval_s);
  load_field("--kv-load-model", &config::LoadModelFlags::model);
  load_field("--kv-predicted-ttl-s", &config::LoadModelFlags::predicted_ttl_s);
  load_field("--kv-tier-credit", &config::LoadModelFlags::tier_credit);
  load_field("--kv-prefill-load-weight", &config::LoadModelFlags::prefill_weight);
  load_field("--kv-decode-load-weight", &config::LoadModelFlags::decode_weight);
  load_field("--kv-overload-threshold", &config::LoadModelFlags::overload_threshold);
  field("--discovery-backend", &ServerConfig::discovery_backend);
  field("--etcd-endpoint", &ServerConfig::etcd_endpoint);
  field("--etcd-prefix", &ServerConfig::etcd_prefix);
  field("--worker", &ServerConfig::workers);
  field("--kubeconfig", &ServerConfig::kubeconfig);
  field("--k8s-namespace", &ServerConfig::k8s_namespace);
  field("--k8s-selector", &ServerConfig::k8s_selector);
  field("--k8s-prefill-selector", &ServerConfig::k8s_prefill_selector);
  field("--k8s-decode-selector", &ServerConfig::k8s_decode_selector);
  field("--k8s-inference-pool", &ServerConfig::k8s_inference_pool);
  field("--request-transport", &ServerConfig::request_transport);
  field("--kv-event-transport", &ServerConfig::kv_event_transport);
  field("--nats-server", &ServerConfig::nats_server);
  field("--namespace", &ServerConfig::nats_namespace);
  field("--peer", &ServerConfig::peers);
  field("--kv-events-bind", &ServerConfig::kv_events_bind);
  field("--max-body-bytes", &ServerConfig::max_body_bytes);
  field("--max-header-bytes", &ServerConfig::max_header_bytes);
  field("--max-prompt-tokens", &ServerConfig::max_prompt_tokens);
  field("--max-messages", &ServerConfig::max_messages);
  field("--max-json-depth", &ServerConfig::max_json_depth);
  field("--client-idle-timeout-s", &ServerConfig::client_idle_timeout_s);
  field("--upstream-connect-timeout-s", &ServerConfig::upstream_connect_timeout_s);
  field("--upstream-first-byte-timeout-s", &ServerConfig::upstream_first_byte_timeout_s);
  field("--upstream-idle-timeout-s", &ServerConfig::upstream_idle_timeout_s);
  field("--request-timeout-s", &ServerConfig::request_timeout_s);
  field("--retries", &ServerConfig::retries);
  field("--max-inflight-per-worker", &ServerConfig::max_inflight_per_worker);
  field("--max-queue", &ServerConfig::max_queue);
  field("--max-queue-wait-s", &ServerConfig::max_queue_wait_s);
  field("--shutdown-grace-s", &ServerConfig::shutdown_grace_s);
  field("--drain-delay-s", &ServerConfig::drain_delay_s);
  field("--api-key", &ServerConfig::api_keys);
  field("--api-key-file", &ServerConfig::api_key_file);
  field("--strip-authorization", &ServerConfig::strip_authorization);
  field("--allowed-origins", &ServerConfig::allowed_origins);
  field("--ssl-certfile", &ServerConfig::ssl_certfile);
  field("--ssl-keyfile", &ServerConfig::ssl_keyfile);
  field("--upstream-ca-file", &ServerConfig::upstream_ca_file);
  field("--admin-token", &ServerConfig::admin_token);
  field("--admin-token-file", &ServerConfig::admin_token_file);
  field("--admin-host", &ServerConfig::admin_host);
  field("--admin-port", &ServerConfig::admin_port);
  field("--log-level", &ServerConfig::log_level);
  field("--log-format", &ServerConfig::log_format);
  field("--access-log", &ServerConfig::access_log);
  field("--otlp-traces-endpoint", &ServerConfig::otlp_traces_endpoint);
  field("--otlp-sample-ratio", &ServerConfig::otlp_sample_ratio);
}

}  // namespace

std::vector<std::string> differing_flags(const ServerConfig& a, const ServerConfig& b) {
  std::vector<std::string> out;
  // `rest` is `a` with every setting named here taken from `b`: what still differs then is a
  // setting the list does not name (one added since), reported as "other settings".
  ServerConfig rest = a;
  each_setting(
      [&](const char* flag, auto member) {
        if (!(a.*member == b.*member)) out.emplace_back(flag);
        rest.*member = b.*member;
      },
      [&](const char* flag, auto member) {
        if (!(a.load_model.*member == b.load_model.*member)) out.emplace_back(flag);
        rest.load_model.*member = b.load_model.*member;
      });
  if (!(rest == b)) out.emplace_back("other settings");
  return out;
}

std::vector<std::string> compared_flags() {
  std::vector<std::string> out;
  auto name = [&](const char* flag, auto) { out.emplace_back(flag); };
  each_setting(name, name);
  return out;
}

Result<ReloadPlan> plan_reload(const ServerConfig& running, const ServerConfig& next) {
  ReloadPlan plan;
  plan.running_after = running;
  ServerConfig& after = plan.running_after;
  if (next.log_level != running.log_level) {
    plan.log_level = next.log_level;
    after.log_level = next.log_level;
  }
  const OverlapWeights now{running.kv_overlap_weight, running.kv_prefill_overlap_weight,
                           running.kv_decode_overlap_weight};
  const OverlapWeights wanted{next.kv_overlap_weight, next.kv_prefill_overlap_weight,
                              next.kv_decode_overlap_weight};
  if (wanted != now) {
    plan.weights = wanted;
    after.kv_overlap_weight = wanted.overlap;
    after.kv_prefill_overlap_weight = wanted.prefill;
    after.kv_decode_overlap_weight = wanted.decode;
  }
  // The token as parsed: --admin-token's, or --admin-token-file's contents, read again now.
  if (next.admin_token != running.admin_token) {
    plan.admin_token = next.admin_token;
    after.admin_token = next.admin_token;
  }
  after.admin_token_file = next.admin_token_file;
  // The keys as parsed: --api-key's and --api-key-file's, read again now (key rotation).
  if (next.api_keys != running.api_keys) {
    plan.api_keys = next.api_keys;
    after.api_keys = next.api_keys;
  }
  after.api_key_file = next.api_key_file;
  // Read by the main thread when SIGTERM comes, from the config it runs with.
  after.drain_delay_s = next.drain_delay_s;
  after.shutdown_grace_s = next.shutdown_grace_s;
  // A static fleet takes a new --worker list; with discovery (or a change of backend) the
  // workers come from elsewhere, and a different list needs a restart.
  const bool static_fleet = running.discovery_backend == config::DiscoveryBackend::kStatic &&
                            next.discovery_backend == config::DiscoveryBackend::kStatic;
  if (static_fleet && next.workers != running.workers) {
    INFERA_RETURN_IF_ERROR(plan_workers(running, next, plan));
    after.workers = next.workers;
  }
  plan.applied = differing_flags(running, after);
  plan.not_applied = differing_flags(after, next);
  return plan;
}

void apply_reload(GatewayContext& g, const ReloadPlan& plan) {
  if (plan.log_level) set_log_level(*plan.log_level);
  if (plan.weights) {
    const Status set = g.router->set_overlap_weights(plan.weights->overlap, plan.weights->prefill,
                                                     plan.weights->decode);
    if (!set.ok()) {
      INFERA_LOG(kError, "gateway").msg("reload: overlap weights kept").kv("error", set.message());
    }
  }
  if (plan.admin_token) g.admin_token.store(std::make_shared<const std::string>(*plan.admin_token));
  if (plan.api_keys) g.api_keys.store(std::make_shared<const std::vector<std::string>>(*plan.api_keys));
  if (plan.workers) {
    g.fleet->update(std::make_shared<const discovery::WorkerSet>(*plan.workers));
  }
  INFERA_LOG(kInfo, "gateway")
      .msg("reloaded")
      .kv("applied", plan.applied.empty() ? std::string("nothing") : joined(plan.applied))
      .kv("workers_added", joined(plan.workers_added))
      .kv("workers_removed", joined(plan.workers_removed))
      .kv("workers_changed", joined(plan.workers_changed));
  if (!plan.not_applied.empty()) {
    INFERA_LOG(kWarn, "gateway")
        .msg("not applied live (restart needed)")
        .kv("flags", joined(plan.not_applied));
  }
}

}  // namespace infera::gateway
