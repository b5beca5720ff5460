// Reload of a running `infera server` (SIGHUP): the flags are parsed again into a new
// ServerConfig, and plan_reload() works out, from it and the config the server runs with, what
// changes live without dropping a request (the log level, the static worker list, the overlap
// weights, the admin token, and the drain delay and shutdown grace that SIGTERM reads) and which
// flags differ but need a restart. The parse reads --config FILE, INFERA_* variables and
// --admin-token-file again, so a reload sees what they say now (config/config_sources.h). plan_reload() is pure; apply_reload() applies a plan to a
// running gateway (Gateway::reload calls both). The main thread, one reload at a time.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "infera/common/log.h"
#include "infera/common/status.h"
#include "infera/config/server_config.h"
#include "infera/discovery/worker.h"

namespace infera::gateway {

struct GatewayContext;

// The router's overlap weights as the flags give them (routing::Router::set_overlap_weights).
struct OverlapWeights {
  double overlap = 1.0;            // --kv-overlap-weight
  std::optional<double> prefill;   // --kv-prefill-overlap-weight
  std::optional<double> decode;    // --kv-decode-overlap-weight
  bool operator==(const OverlapWeights&) const = default;
};

struct ReloadPlan {
  // What to apply: each is set only when the new config changes it.
  std::optional<LogLevel> log_level;
  std::optional<OverlapWeights> weights;
  std::optional<std::string> admin_token;  // a secret: never logged
  std::optional<std::vector<std::string>> api_keys;  // secrets: never logged
  // The new static worker set, parsed, when static discovery's --worker list changed what it
  // names; delivered to the fleet as the static source delivers its set (Fleet::update).
  std::optional<discovery::WorkerSet> workers;
  std::vector<std::string> workers_added;    // ids, for the log
  std::vector<std::string> workers_removed;  // ids
  std::vector<std::string> workers_changed;  // ids whose record changed (leave and join again)
  // Flags applied live, and flags that differ but need a restart, in --help order; "other
  // settings" stands for a difference in a setting no flag below names.
  std::vector<std::string> applied;
  std::vector<std::string> not_applied;
  // The config the server runs with once the plan is applied: `running` with the live settings
  // of the new config (what the next reload compares with).
  config::ServerConfig running_after;
};

// The plan from the running config to `next`. A --worker of `next` that does not parse fails
// the whole reload (nothing of it may be applied; the server keeps its running config).
Result<ReloadPlan> plan_reload(const config::ServerConfig& running,
                               const config::ServerConfig& next);

// The flags whose settings differ between `a` and `b`, in --help order; a setting without a flag
// here counts through ServerConfig's comparison as "other settings".
std::vector<std::string> differing_flags(const config::ServerConfig& a,
                                         const config::ServerConfig& b);
// Every flag differing_flags() compares by name (a test holds it to `infera server --help`).
std::vector<std::string> compared_flags();

// Applies `plan` to the gateway behind `g` (log level, router weights, admin token, fleet) and
// logs it: one line for what changed, one warning naming what was not applied live.
void apply_reload(GatewayContext& g, const ReloadPlan& plan);

}  // namespace infera::gateway
