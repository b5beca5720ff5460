// ResponseStore: the conversations behind /v1/responses answers, for a later request's
// previous_response_id, as vLLM's in-memory store keeps them: per engine process (a response is
// found only on the instance that produced it), bounded (the oldest is evicted first), lost on
// restart. Each entry is the chat messages of the request plus the assistant's answer.
// Thread-safe: handlers on any I/O thread call it; a mutex guards the map (no I/O under it).
#pragma once

#include <boost/json/array.hpp>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace infera::mock {

class ResponseStore {
 public:
  static constexpr size_t kDefaultCapacity = 10'000;  // responses

  explicit ResponseStore(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // Keeps `messages` under `id` (a fresh id: ids are never reused), evicting the oldest entry
  // when full.
  void put(const std::string& id, boost::json::array messages);
  // A copy of the messages stored under `id`, or nullopt (never stored, evicted, store=false).
  std::optional<boost::json::array> find(const std::string& id) const;
  size_t size() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, boost::json::array> entries_;
  std::deque<std::string> order_;  // insertion order, oldest first
};

}  // namespace infera::mock
