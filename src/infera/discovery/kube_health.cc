#include "infera/discovery/kube_health.h"

#include <utility>

#include "infera/common/log.h"

namespace infera::discovery {

namespace {
constexpr size_t kMaxReported = 10'000;
}  // namespace

KubeHealth::KubeHealth(Wording wording, std::string api, bool connected)
    : wording_(wording), api_(std::move(api)) {
  health_.connected = connected;
}

void KubeHealth::set_connected(bool connected, const Status& why) {
  bool was;
  {
    std::lock_guard lock(mu_);
    was = health_.connected;
    health_.connected = connected;
    if (!connected) health_.last_error = std::string(why.message());
  }
  if (was && !connected) {
    INFERA_LOG(kWarn, wording_.component)
        .msg("Kubernetes API unreachable; keeping the last known " + std::string(wording_.kept))
        .kv("api", api_)
        .kv("error", why.message());
  } else if (!was && connected) {
    INFERA_LOG(kInfo, wording_.component).msg("Kubernetes API reachable").kv("api", api_);
  }
}

void KubeHealth::note_invalid(const std::string& what, const Status& why) {
  const std::string key = what + ": " + std::string(why.message());
  bool first = false;
  {
    std::lock_guard lock(mu_);
    ++health_.invalid_records;
    health_.last_error = key;
    first = reported_.size() < kMaxReported && reported_.insert(key).second;
  }
  if (first) {
    INFERA_LOG(kWarn, wording_.component)
        .msg(std::string(wording_.skipping))
        .kv("pod", what)
        .kv("error", why.message());
  }
}

void KubeHealth::note_listed(size_t records) {
  std::lock_guard lock(mu_);
  ++health_.resyncs;
  health_.records = records;
}

SourceHealth KubeHealth::get() const {
  std::lock_guard lock(mu_);
  return health_;
}

}  // namespace infera::discovery
