// Which worker answered each Responses API call, so that a request continuing one
// (`previous_response_id`) goes to the same worker: vLLM keeps a stored response's conversation
// in the memory of the instance that produced it, and another instance answers 404. Bounded (the
// oldest forgotten first) and aged; each router replica keeps its own (a continuation that
// reaches another replica is routed by load). Any thread.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "infera/common/clock.h"

namespace infera::gateway {

class ResponseAffinity {
 public:
  explicit ResponseAffinity(size_t capacity = 100'000, Nanos ttl = from_seconds(3600))
      : capacity_(capacity), ttl_(ttl) {}

  // `response_id` was answered by `worker` at `now`. Ids longer than 256 bytes are not kept.
  void remember(std::string_view response_id, std::string_view worker, Nanos now);
  // The worker that answered `response_id`; "" when unknown, forgotten or older than the ttl.
  std::string worker_of(std::string_view response_id, Nanos now) const;
  size_t size() const;

 private:
  struct Entry {
    std::string worker;
    Nanos at{0};
  };
  const size_t capacity_;
  const Nanos ttl_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> by_id_;  // guarded by mu_
  std::deque<std::string> order_;                 // guarded by mu_: ids, oldest first
};

}  // namespace infera::gateway
