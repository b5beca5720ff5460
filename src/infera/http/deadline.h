// Internal to the http module (server.cc, client.cc, io.h): the deadline of one socket's waits.
// Includes Asio: never include it from a header of another module.
//
// Beast's tcp_stream arms a timer when each read or write starts and cancels it when the
// operation ends: a timer-queue insert and removal, and a posted cancellation (one more turn of
// the event loop), for every wait of every request. Here one timer per socket is re-armed
// lazily: arm() only stores the new deadline when the timer already waits for an earlier
// instant, and the timer, when it fires, waits again for the deadline then in force. A keep-alive
// connection whose every wait has the same limit (idle_timeout, response_timeout) then touches
// its timer about once per limit, not once per request.
//
// Semantics, as Beast's: the deadline bounds the waits that run while it is armed; when it
// passes during a wait the socket is closed, the wait ends with operation_aborted, and
// disarm() reports it as beast::error::timeout. Arm it just before a wait and disarm it right
// after: a deadline passing while nothing waits does nothing. One thread: the socket's.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>

#include "infera/http/net.h"

namespace infera::http {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  Deadline(const net::any_io_executor& executor, tcp::socket& socket);
  ~Deadline();  // stops the timer; the socket is the owner's
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

  void arm(Clock::time_point deadline);
  // `limit` from now, but never past `cap` (a caller's own deadline).
  void arm(std::chrono::milliseconds limit, Clock::time_point cap = Clock::time_point::max()) {
    arm(std::min(Clock::now() + limit, cap));
  }
  // Ends the wait that the deadline bounded; returns `ec`, or beast::error::timeout when the
  // wait failed because the deadline passed.
  beast::error_code disarm(beast::error_code ec);
  // The deadline passed during a wait (the socket was closed).
  bool expired() const;
  // Stops the timer (at close); the deadline is disarmed.
  void stop();

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the timer's pending wait
};

}  // namespace infera::http
