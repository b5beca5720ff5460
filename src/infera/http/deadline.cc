#include "infera/http/deadline.h"

#include <cstdint>

namespace infera::http {

namespace {
constexpr Deadline::Clock::time_point kNever = Deadline::Clock::time_point::max();
}  // namespace

struct Deadline::State {
  State(const net::any_io_executor& executor, tcp::socket& s) : timer(executor), socket(&s) {}

  // Starts the timer's wait for `at` (cancelling a pending one: its completion, of an older
  // generation, does nothing).
  static void wait(const std::shared_ptr<State>& self, Clock::time_point at) {
    State& s = *self;
    s.waiting_for = at;
    const uint64_t generation = ++s.generation;
    s.timer.expires_at(at);
    s.timer.async_wait([self, generation](beast::error_code ec) {
      State& st = *self;
      if (generation != st.generation || st.socket == nullptr) return;  // superseded, stopped
      st.waiting_for = kNever;
      if (ec || st.deadline == kNever) return;  // disarmed since: nothing waits for it
      if (Clock::now() < st.deadline) {         // moved later since the wait began
        wait(self, st.deadline);
        return;
      }
      st.expired = true;
      beast::error_code ignored;
      st.socket->close(ignored);  // the pending wait ends with operation_aborted
    });
  }

  net::steady_timer timer;
  tcp::socket* socket;  // null once the owner is gone
  Clock::time_point deadline = kNever;     // the armed deadline; kNever: disarmed
  Clock::time_point waiting_for = kNever;  // when the timer's pending wait ends; kNever: none
  uint64_t generation = 0;                 // of the timer's current wait
  bool expired = false;
};

Deadline::Deadline(const net::any_io_executor& executor, tcp::socket& socket)
    : state_(std::make_shared<State>(executor, socket)) {}

Deadline::~Deadline() {
  stop();
  state_->socket = nullptr;
}

void Deadline::arm(Clock::time_point deadline) {
  State& s = *state_;
  s.deadline = deadline;
  s.expired = false;
  if (deadline < s.waiting_for) State::wait(state_, deadline);
}

beast::error_code Deadline::disarm(beast::error_code ec) {
  State& s = *state_;
  s.deadline = kNever;
  if (ec && s.expired) return beast::error::timeout;
  return ec;
}

bool Deadline::expired() const {
  return state_->expired;
}

void Deadline::stop() {
  State& s = *state_;
  s.deadline = kNever;
  if (s.waiting_for == kNever) return;
  s.waiting_for = kNever;
  ++s.generation;
  s.timer.cancel();
}

}  // namespace infera::http
