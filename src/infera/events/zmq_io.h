// Internal to the events module (included by its .cc files only, so cppzmq stays out of every
// other module's headers): the context's implementation, receiving whole multipart messages,
// and the replay client (a DEALER talking to vLLM's ROUTER replay service). cppzmq reports
// errors by throwing zmq::error_t; the functions here catch them and return Status values.
// Each object is used by one thread at a time (the socket's owner).
#pragma once

#include <zmq.hpp>

#include <array>
#include <atomic>
#include <map>
#include <string>

#include "infera/common/clock.h"
#include "infera/events/stream.h"
#include "infera/events/zmq_context.h"

namespace infera::events {

struct ZmqContext::Impl {
  // Each worker's subscriber holds 4 sockets (SUB, replay DEALER, monitor PAIR x2); ZMQ's
  // default of 1023 per context would cap a fleet at ~250 workers.
  explicit Impl(int io_threads) : context(io_threads) {
    context.set(zmq::ctxopt::max_sockets, 65536);
  }
  zmq::context_t context;
};

// Receives one whole message without blocking. Returns its frame count (0: nothing waiting);
// the first three frames are kept in `frames`, further ones are received into frames[3] and
// dropped (the count still tells the caller the message was malformed).
size_t recv_message(zmq::socket_t& socket, std::array<zmq::message_t, 4>& frames);

inline std::span<const uint8_t> frame_bytes(const zmq::message_t& m) {
  return {static_cast<const uint8_t*>(m.data()), m.size()};
}

// Waits up to `timeout` for `socket` to become readable; false on timeout or error.
bool wait_readable(zmq::socket_t& socket, Nanos timeout);

// vLLM replay protocol client: send ["", start_seq] from a DEALER, read ["", seq, payload]
// until seq == 0xffffffffffffffff. One DEALER per data-parallel rank (vLLM offsets the replay
// port by rank), connected on first use. A request that stays silent for `idle_timeout` fails
// and its socket is dropped, so a late answer can never be mistaken for the next one's.
class ZmqReplayClient final : public ReplaySource {
 public:
  ZmqReplayClient(zmq::context_t& context, std::string endpoint, Nanos idle_timeout,
                  const std::atomic<bool>& stop, uint64_t max_batches = uint64_t{1} << 20);

  Status replay(int64_t dp_rank, uint64_t from_seq, const Sink& sink) override;

 private:
  Result<zmq::socket_t*> socket_for(int64_t dp_rank);

  zmq::context_t& context_;
  std::string endpoint_;
  Nanos idle_timeout_;
  const std::atomic<bool>& stop_;
  uint64_t max_batches_;
  SteadyClock clock_;
  std::map<int64_t, zmq::socket_t> sockets_;
  std::array<zmq::message_t, 4> frames_;
};

// How long a socket thread sleeps in one poll before it looks at its stop flag again: the
// bound on how long stop() takes.
inline constexpr Nanos kPollSlice = std::chrono::milliseconds(20);

}  // namespace infera::events
