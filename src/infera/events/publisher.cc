#include "infera/events/publisher.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "infera/common/log.h"
#include "infera/events/endpoint.h"
#include "infera/events/msgpack.h"
#include "infera/events/zmq_io.h"

namespace infera::events {

struct KvEventPublisher::Sockets {
  zmq::socket_t pub;     // XPUB: a PUB that also reports subscriptions
  zmq::socket_t router;  // replay service; empty when there is none
};

KvEventPublisher::KvEventPublisher(Options options, std::shared_ptr<ZmqContext> context)
    : options_(std::move(options)),
      context_(context ? std::move(context) : std::make_shared<ZmqContext>()) {}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::start(Options options,
                                                                  std::shared_ptr<ZmqContext> context) {
  if (options.buffer_steps == 0 || options.max_queue_size == 0) {
    return invalid_argument("buffer_steps and max_queue_size must be positive");
  }
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(std::move(options), std::move(context)));
  const Options& o = p->options_;
  INFERA_ASSIGN_OR_RETURN(const std::string endpoint,
                          offset_endpoint_port(o.endpoint, o.data_parallel_rank));
  std::string replay_endpoint;
  if (!o.replay_endpoint.empty()) {
    INFERA_ASSIGN_OR_RETURN(replay_endpoint,
                            offset_endpoint_port(o.replay_endpoint, o.data_parallel_rank));
  }
  auto sockets = std::make_unique<Sockets>();
  zmq::context_t& ctx = p->context_->impl().context;
  try {
    sockets->pub = zmq::socket_t(ctx, zmq::socket_type::xpub);
    sockets->pub.set(zmq::sockopt::linger, 0);
    sockets->pub.set(zmq::sockopt::sndhwm, o.hwm);
    sockets->pub.set(zmq::sockopt::xpub_verbose, 1);  // report every subscription, not the first
    if (o.bind.value_or(publisher_binds(endpoint))) {
      sockets->pub.bind(endpoint);
      p->endpoint_ = sockets->pub.get(zmq::sockopt::last_endpoint);
    } else {
      sockets->pub.connect(endpoint);
      p->endpoint_ = endpoint;
    }
    if (!replay_endpoint.empty()) {
      sockets->router = zmq::socket_t(ctx, zmq::socket_type::router);
      sockets->router.set(zmq::sockopt::linger, 0);
      // A whole buffer may be in flight to a requester; a ROUTER drops what exceeds its HWM.
      sockets->router.set(zmq::sockopt::sndhwm, 0);
      sockets->router.bind(replay_endpoint);
      p->replay_endpoint_ = sockets->router.get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return unavailable("KV-event publisher on '" + endpoint + "' / '" + replay_endpoint +
                       "': " + e.what());
  }
  p->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->wake_fd_ < 0) return internal_error("eventfd failed");
  KvEventPublisher* self = p.get();
  p->thread_ = std::thread([self, s = std::move(sockets)]() mutable { self->run(std::move(s)); });
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void KvEventPublisher::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) {
    wake();
    thread_.join();
  }
}

Status KvEventPublisher::publish(const EventBatch& batch) { return enqueue(batch, true); }

Status KvEventPublisher::publish_replay_only(const EventBatch& batch) {
  return enqueue(batch, false);
}

Status KvEventPublisher::enqueue(const EventBatch& batch, bool live) {
  if (stop_.load(std::memory_order_acquire)) return failed_precondition("publisher stopped");
  std::string payload;
  if (batch.dp_rank) {
    encode_batch(batch, options_.format, payload);
  } else {
    // vLLM's publish() fills data_parallel_rank when the batch has none.
    EventBatch ranked = batch;
    ranked.dp_rank = options_.data_parallel_rank;
    encode_batch(ranked, options_.format, payload);
  }
  bool was_empty = false;
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= options_.max_queue_size) {
      return resource_exhausted("KV-event publisher queue full");
    }
    was_empty = queue_.empty();
    queue_.push_back(Queued{next_seq_++, live, std::move(payload)});
  }
  if (was_empty) wake();  // otherwise the thread has a wake-up pending already
  return ok_status();
}

void KvEventPublisher::wake() {
  const uint64_t one = 1;
  // The counter cannot overflow in practice; EAGAIN would only mean a wake-up is pending.
  [[maybe_unused]] const ssize_t n = write(wake_fd_, &one, sizeof(one));
}

bool KvEventPublisher::flush(Nanos timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return done_seq_ >= next_seq_; });
}

bool KvEventPublisher::wait_for_subscriber(Nanos timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return subscribed_; });
}

uint64_t KvEventPublisher::next_sequence() const {
  std::lock_guard lock(mu_);
  return next_seq_;
}

void KvEventPublisher::run(std::unique_ptr<Sockets> sockets) {
  struct Buffered {
    uint64_t seq;
    std::string payload;
  };
  std::deque<Buffered> buffer;  // vLLM's deque(maxlen=buffer_steps)
  std::deque<Queued> batch;
  std::array<zmq::message_t, 4> frames;
  const bool has_router = static_cast<bool>(sockets->router);
  zmq::pollitem_t items[3] = {
      {sockets->pub.handle(), 0, ZMQ_POLLIN, 0},
      {nullptr, wake_fd_, ZMQ_POLLIN, 0},
      {has_router ? sockets->router.handle() : nullptr, 0, ZMQ_POLLIN, 0},
  };
  try {
    while (true) {
      zmq::poll(items, has_router ? 3 : 2, std::chrono::milliseconds(100));
      if (items[1].revents & ZMQ_POLLIN) {
        uint64_t ignored = 0;
        [[maybe_unused]] const ssize_t n = read(wake_fd_, &ignored, sizeof(ignored));
      }
      {
        std::lock_guard lock(mu_);
        batch.swap(queue_);
      }
      for (Queued& q : batch) {
        if (q.live) {
          const std::string seq = sequence_frame(q.seq);
          // XPUB/PUB never blocks: past the HWM a slow subscriber's copy is dropped.
          sockets->pub.send(zmq::buffer(options_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
          sockets->pub.send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
          sockets->pub.send(zmq::buffer(q.payload), zmq::send_flags::dontwait);
        }
        buffer.push_back(Buffered{q.seq, std::move(q.payload)});
        if (buffer.size() > options_.buffer_steps) buffer.pop_front();
      }
      if (!batch.empty()) {
        {
          std::lock_guard lock(mu_);
          done_seq_ = batch.back().seq + 1;
        }
        cv_.notify_all();
        batch.clear();
      }
      // Subscriptions: [0x01, prefix...]; ours matches when the topic starts with the prefix.
      zmq::message_t sub;
      while (sockets->pub.recv(sub, zmq::recv_flags::dontwait)) {
        const std::string_view m(static_cast<const char*>(sub.data()), sub.size());
        if (!m.empty() && m[0] == 1 && std::string_view(options_.topic).starts_with(m.substr(1))) {
          {
            std::lock_guard lock(mu_);
            subscribed_ = true;
          }
          cv_.notify_all();
        }
      }
      while (has_router) {
        const size_t n = recv_message(sockets->router, frames);
        if (n == 0) break;
        // [identity, "", start_seq]: exactly 3 frames, else ignored (as vLLM does).
        if (n != 3 || frames[1].size() != 0 || frames[2].size() != 8) continue;
        const uint64_t start = load_be(static_cast<const uint8_t*>(frames[2].data()), 8);
        const std::string identity(static_cast<const char*>(frames[0].data()), frames[0].size());
        for (const Buffered& b : buffer) {
          if (b.seq < start) continue;
          const std::string seq = sequence_frame(b.seq);
          sockets->router.send(zmq::buffer(identity), zmq::send_flags::sndmore);
          sockets->router.send(zmq::message_t(), zmq::send_flags::sndmore);
          sockets->router.send(zmq::buffer(seq), zmq::send_flags::sndmore);
          sockets->router.send(zmq::buffer(b.payload), zmq::send_flags::none);
        }
        const std::string end = sequence_frame(kReplayEndSeq);
        sockets->router.send(zmq::buffer(identity), zmq::send_flags::sndmore);
        sockets->router.send(zmq::message_t(), zmq::send_flags::sndmore);
        sockets->router.send(zmq::buffer(end), zmq::send_flags::sndmore);
        sockets->router.send(zmq::message_t(), zmq::send_flags::none);
        replays_served_.fetch_add(1, std::memory_order_acq_rel);
      }
      if (stop_.load(std::memory_order_acquire)) {
        std::lock_guard lock(mu_);
        if (queue_.empty()) break;  // everything queued before stop() has gone out
      }
    }
  } catch (const zmq::error_t& e) {
    INFERA_LOG(kError, "events")
        .msg("KV-event publisher socket failed; publishing stopped")
        .kv("endpoint", endpoint_)
        .kv("error", e.what());
  }
  {
    std::lock_guard lock(mu_);
    done_seq_ = next_seq_;  // nobody waits forever on a stopped publisher
  }
  cv_.notify_all();
}

}  // namespace infera::events
