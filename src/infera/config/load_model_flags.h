// The flags of the kv-aware cost's load model (routing/load_model.h), shared by `infera server`
// and `infera sim` so both parse the same names the same way. Unset values take the chosen
// model's defaults (routing::resolve_load_options). Startup only, one thread.
#pragma once

#include <optional>
#include <string>

#include "infera/config/flags.h"

namespace infera::config {

struct LoadModelFlags {
  std::string model = "active-blocks";       // --kv-load-model
  std::optional<double> predicted_ttl_s;     // --kv-predicted-ttl-s
  std::optional<std::string> tier_credit;    // --kv-tier-credit
  std::optional<double> prefill_weight;      // --kv-prefill-load-weight
  std::optional<double> decode_weight;       // --kv-decode-load-weight
  std::optional<double> overload_threshold;  // --kv-overload-threshold
  bool operator==(const LoadModelFlags&) const = default;
};

void add_load_model_flags(FlagSet& flags, LoadModelFlags* out);

}  // namespace infera::config
