// What a worker generated, read off the body bytes the gateway relays (the gateway never
// re-parses the answer): for a streamed answer (SSE), the data events that carry output, with
// the gap between their arrivals (the inter-token latency the client sees; a role-only first
// chunk or an empty closing delta is not output); for any answer, the
// usage's completion_tokens when the worker reports it (a whole JSON answer, or a stream's
// include_usage chunk). generated() prefers the usage and counts output events otherwise (one
// token each, as vLLM and SGLang stream by default). Lines split across pieces are joined; a
// line longer than 64 KiB is skipped. Owned by one request's coroutine.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "infera/common/clock.h"

namespace infera::proxy {

class TokenMeter {
 public:
  // `on_gap(seconds)`: once per output event after the first; events that arrive in one piece
  // share the gap since the previous piece's output equally. `want_id`: look for the answer's
  // id (answer_id()); off, the answer's first bytes are not copied.
  explicit TokenMeter(std::function<void(double)> on_gap = {}, bool want_id = false)
      : on_gap_(std::move(on_gap)), id_done_(!want_id) {}

  // Before the first piece: whether the answer is an event stream.
  void start(bool sse) { sse_ = sse; }
  // One relayed piece, arrived at `now`.
  void feed(std::string_view piece, Nanos now);

  uint64_t output_events() const { return events_; }
  std::optional<uint64_t> completion_tokens() const { return usage_; }
  uint64_t generated() const { return usage_.value_or(events_); }
  // With want_id, the answer's id: the first `"id":"..."` value in its first 4 KiB ("resp_...",
  // "chatcmpl-...", at most 128 bytes); "" when there is none, or without want_id.
  const std::string& answer_id() const { return id_; }

 private:
  // A complete SSE line; returns whether it was an output event.
  bool line(std::string_view text);
  void find_usage(std::string_view text);
  void find_id(std::string_view piece);

  std::function<void(double)> on_gap_;
  bool sse_ = false;
  std::string partial_;     // an SSE line not complete yet, or a JSON body's tail
  bool skipping_ = false;   // the current line outgrew the limit
  uint64_t events_ = 0;
  std::optional<uint64_t> usage_;
  Nanos last_output_{0};  // 0: no output yet
  std::string head_;      // the answer's first bytes, until its id is found
  bool id_done_ = false;
  std::string id_;
};

}  // namespace infera::proxy
