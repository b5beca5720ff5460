#include "infera/gateway/response_affinity.h"

namespace infera::gateway {

void ResponseAffinity::remember(std::string_view response_id, std::string_view worker, Nanos now) {
  if (response_id.empty() || response_id.size() > 256 || capacity_ == 0) return;
  std::lock_guard lock(mu_);
  auto [it, added] = by_id_.try_emplace(std::string(response_id));
  it->second = {std::string(worker), now};
  if (!added) return;
  order_.emplace_back(response_id);
  while (order_.size() > capacity_) {
    by_id_.erase(order_.front());
    order_.pop_front();
  }
}

std::string ResponseAffinity::worker_of(std::string_view response_id, Nanos now) const {
  std::lock_guard lock(mu_);
  const auto it = by_id_.find(std::string(response_id));
  if (it == by_id_.end() || now - it->second.at > ttl_) return {};
  return it->second.worker;
}

size_t ResponseAffinity::size() const {
  std::lock_guard lock(mu_);
  return by_id_.size();
}

}  // namespace infera::gateway
