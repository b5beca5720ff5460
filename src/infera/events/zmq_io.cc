#include "infera/events/zmq_io.h"

#include <algorithm>

#include "infera/events/endpoint.h"
#include "infera/events/msgpack.h"

namespace infera::events {

ZmqContext::ZmqContext(int io_threads) : impl_(std::make_unique<Impl>(io_threads)) {}
ZmqContext::~ZmqContext() = default;

size_t recv_message(zmq::socket_t& socket, std::array<zmq::message_t, 4>& frames) {
  if (!socket.recv(frames[0], zmq::recv_flags::dontwait)) return 0;
  size_t n = 1;
  // The frames of a multipart message arrive together: once the first is here, so is the rest.
  while (frames[std::min<size_t>(n - 1, 3)].more()) {
    zmq::message_t& dst = frames[std::min<size_t>(n, 3)];
    if (!socket.recv(dst, zmq::recv_flags::none)) break;
    ++n;
  }
  return n;
}

bool wait_readable(zmq::socket_t& socket, Nanos timeout) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  try {
    return zmq::poll(&item, 1, std::max(ms, std::chrono::milliseconds(0))) > 0 &&
           (item.revents & ZMQ_POLLIN) != 0;
  } catch (const zmq::error_t&) {
    return false;  // EINTR or a closing context: the caller's loop decides what next
  }
}

ZmqReplayClient::ZmqReplayClient(zmq::context_t& context, std::string endpoint, Nanos idle_timeout,
                                 const std::atomic<bool>& stop, uint64_t max_batches)
    : context_(context),
      endpoint_(std::move(endpoint)),
      idle_timeout_(idle_timeout),
      stop_(stop),
      max_batches_(max_batches) {}

Result<zmq::socket_t*> ZmqReplayClient::socket_for(int64_t dp_rank) {
  auto it = sockets_.find(dp_rank);
  if (it != sockets_.end()) return &it->second;
  INFERA_ASSIGN_OR_RETURN(const std::string endpoint, offset_endpoint_port(endpoint_, dp_rank));
  try {
    zmq::socket_t socket(context_, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    // Unbounded receive queue: a replay is bounded by the publisher's buffer (and max_batches_);
    // a bounded one would push back to the ROUTER, which drops what it cannot queue.
    socket.set(zmq::sockopt::rcvhwm, 0);
    socket.connect(endpoint);
    return &sockets_.emplace(dp_rank, std::move(socket)).first->second;
  } catch (const zmq::error_t& e) {
    return unavailable("replay endpoint '" + endpoint + "': " + e.what());
  }
}

Status ZmqReplayClient::replay(int64_t dp_rank, uint64_t from_seq, const Sink& sink) {
  if (endpoint_.empty()) return unavailable("no replay endpoint configured");
  INFERA_ASSIGN_OR_RETURN(zmq::socket_t * socket, socket_for(dp_rank));
  // Whatever happens below, a failed request leaves no socket behind with answers in flight.
  auto drop = [&](Status status) {
    sockets_.erase(dp_rank);
    return status;
  };
  try {
    const std::string seq = sequence_frame(from_seq);
    // A DEALER queues the request until the connection is up (ZMQ_IMMEDIATE is off).
    if (!socket->send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
        !socket->send(zmq::buffer(seq), zmq::send_flags::dontwait)) {
      return drop(unavailable("replay request could not be queued"));
    }
    uint64_t received = 0;
    Nanos deadline = clock_.now() + idle_timeout_;
    while (true) {
      if (stop_.load(std::memory_order_acquire)) return drop(cancelled("stopping"));
      const Nanos left = deadline - clock_.now();
      if (left <= Nanos(0)) return drop(deadline_exceeded("replay: no answer in time"));
      if (!wait_readable(*socket, std::min(left, kPollSlice))) continue;
      while (const size_t n = recv_message(*socket, frames_)) {
        if (stop_.load(std::memory_order_relaxed)) return drop(cancelled("stopping"));
        // ["", seq (8 bytes BE), payload]; anything else is not vLLM's protocol: skip it.
        if (n != 3 || frames_[0].size() != 0 || frames_[1].size() != 8) continue;
        const uint64_t s = load_be(static_cast<const uint8_t*>(frames_[1].data()), 8);
        if (s == kReplayEndSeq) return ok_status();
        if (++received > max_batches_) return drop(resource_exhausted("replay: too many batches"));
        sink(s, frame_bytes(frames_[2]));
        deadline = clock_.now() + idle_timeout_;
      }
    }
  } catch (const zmq::error_t& e) {
    return drop(unavailable(std::string("replay: ") + e.what()));
  }
}

}  // namespace infera::events
