#include "infera/config/load_model_flags.h"

namespace infera::config {

void add_load_model_flags(FlagSet& f, LoadModelFlags* o) {
  f.add("--kv-load-model", &o->model,
        "load term of the kv-aware cost: active-blocks (default: in-flight blocks, the documented "
        "formula) or prefill-aware (blocks still to prefill, decode KV weighted lower)",
        "MODEL");
  f.add("--kv-predicted-ttl-s", &o->predicted_ttl_s,
        "a routed request's blocks count as cached on its worker for this long, until its KV "
        "events confirm them (0 = off; default 0 with active-blocks, 2 with prefill-aware)",
        "SECONDS");
  f.add("--kv-tier-credit", &o->tier_credit,
        "what a hit on each tier is worth (default gpu=1,cpu=0,disk=0 with active-blocks, "
        "gpu=1,cpu=0.75,disk=0.25 with prefill-aware)",
        "gpu=W,cpu=W,disk=W");
  f.add("--kv-prefill-load-weight", &o->prefill_weight,
        "prefill-aware: weight of each block a worker must still prefill (default 1)", "W");
  f.add("--kv-decode-load-weight", &o->decode_weight,
        "prefill-aware: weight of each block of KV its decoding requests hold (default 0.05)", "W");
  f.add("--kv-overload-threshold", &o->overload_threshold,
        "a worker whose load exceeds this many blocks gets no credit for its cache while another "
        "is below it; when all exceed it, route by load alone (0 = off, the default)",
        "BLOCKS");
}

}  // namespace infera::config
