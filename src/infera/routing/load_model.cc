#include "infera/routing/load_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "infera/config/flags.h"

namespace infera::routing {

std::string_view load_model_name(LoadModel model) {
  return model == LoadModel::kPrefillAware ? "prefill-aware" : "active-blocks";
}

Result<LoadModel> parse_load_model(std::string_view name) {
  if (name == "active-blocks") return LoadModel::kActiveBlocks;
  if (name == "prefill-aware") return LoadModel::kPrefillAware;
  return invalid_argument("unknown load model '" + std::string(name) +
                          "' (known: active-blocks, prefill-aware)");
}

Result<TierCredit> parse_tier_credit(std::string_view text) {
  INFERA_ASSIGN_OR_RETURN(const std::vector<config::KeyValue> items,
                          config::parse_key_values(text));
  TierCredit credit{1.0, 0.0, 0.0};  // an unnamed GPU tier keeps full credit, lower tiers none
  bool seen[3] = {false, false, false};
  for (const auto& [tier, value] : items) {
    const int index = tier == "gpu" ? 0 : tier == "cpu" ? 1 : tier == "disk" ? 2 : -1;
    if (index < 0) {
      return invalid_argument("unknown tier '" + std::string(tier) + "' (known: gpu, cpu, disk)");
    }
    if (seen[index]) return invalid_argument(std::string(tier) + " given twice");
    seen[index] = true;
    Result<double> v = config::parse_number(value);
    if (!v.ok() || *v < 0 || *v > 1) {
      return invalid_argument("'" + std::string(value) + "' for " + std::string(tier) +
                              " is not a number in [0, 1]");
    }
    (index == 0 ? credit.gpu : index == 1 ? credit.cpu : credit.disk) = *v;
  }
  return credit;
}

std::string format_tier_credit(const TierCredit& c) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "gpu=%g,cpu=%g,disk=%g", c.gpu, c.cpu, c.disk);
  return buf;
}

LoadModelOptions default_load_options(LoadModel model) {
  LoadModelOptions o;
  o.model = model;
  if (model == LoadModel::kPrefillAware) {
    o.prefill_weight = 1.0;
    o.decode_weight = 0.05;
    o.tier_credit = TierCredit{1.0, 0.75, 0.25};
    o.predicted_ttl_s = 2.0;
  }
  return o;
}

Status validate(const LoadModelOptions& o) {
  auto weight = [](double w) { return std::isfinite(w) && w >= 0; };
  if (!weight(o.prefill_weight) || !weight(o.decode_weight)) {
    return invalid_argument(
        "--kv-prefill-load-weight and --kv-decode-load-weight must be finite and >= 0");
  }
  if (!weight(o.overload_blocks)) {
    return invalid_argument("--kv-overload-threshold must be finite and >= 0");
  }
  if (!weight(o.engine_poll_interval_s)) {
    return invalid_argument("--engine-metrics-interval-s must be finite and >= 0");
  }
  if (!weight(o.predicted_ttl_s) || o.predicted_ttl_s > 3600) {
    return invalid_argument("--kv-predicted-ttl-s must be in [0, 3600]");
  }
  for (const double c : {o.tier_credit.gpu, o.tier_credit.cpu, o.tier_credit.disk}) {
    if (!std::isfinite(c) || c < 0 || c > 1) return invalid_argument("tier credits are in [0, 1]");
  }
  return Status();
}

Result<LoadModelOptions> resolve_load_options(const config::LoadModelFlags& f) {
  Result<LoadModel> model = parse_load_model(f.model);
  if (!model.ok()) return invalid_argument("--kv-load-model: " + model.status().message());
  LoadModelOptions o = default_load_options(*model);
  if (f.tier_credit) {
    Result<TierCredit> credit = parse_tier_credit(*f.tier_credit);
    if (!credit.ok()) return invalid_argument("--kv-tier-credit: " + credit.status().message());
    o.tier_credit = *credit;
  }
  if (f.prefill_weight) o.prefill_weight = *f.prefill_weight;
  if (f.decode_weight) o.decode_weight = *f.decode_weight;
  if (f.overload_threshold) o.overload_blocks = *f.overload_threshold;
  if (f.predicted_ttl_s) o.predicted_ttl_s = *f.predicted_ttl_s;
  INFERA_RETURN_IF_ERROR(validate(o));
  return o;
}

}  // namespace infera::routing
