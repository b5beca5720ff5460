#include "infera/mock/response_store.h"

#include <utility>

namespace infera::mock {

void ResponseStore::put(const std::string& id, boost::json::array messages) {
  if (capacity_ == 0) return;
  std::lock_guard lock(mu_);
  const bool inserted = entries_.insert_or_assign(id, std::move(messages)).second;
  if (!inserted) return;  // replaced in place; its age stays
  order_.push_back(id);
  while (order_.size() > capacity_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<boost::json::array> ResponseStore::find(const std::string& id) const {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace infera::mock
