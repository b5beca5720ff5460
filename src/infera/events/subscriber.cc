#include "infera/events/subscriber.h"


#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "infera/common/log.h"
#include "infera/events/endpoint.h"
#include "infera/events/zmq_io.h"

namespace infera::events {
namespace {

// Messages handled per wake-up before the stop flag is looked at again.
constexpr int kDrainBatch = 1024;

std::shared_ptr<ZmqContext> or_new(std::shared_ptr<ZmqContext> context) {
  return context ? std::move(context) : std::make_shared<ZmqContext>();
}

}  // namespace

// ---------------------------------------------------------------- KvEventSubscriber

// The SUB socket and its monitor (a PAIR fed by zmq_socket_monitor with the SUB's connection
// events), both owned by the socket thread.
struct KvEventSubscriber::Sockets {
  zmq::socket_t sub;
  zmq::socket_t monitor;
  std::vector<std::string> endpoints;  // by data-parallel rank, as connected
  std::map<std::string, bool> down;    // monitored address -> disconnected, not yet back
};

namespace {

// How long the socket thread may handle data before it looks at connection events again: far
// below ZeroMQ's reconnect interval (100 ms), so a disconnect is always seen before the data of
// the connection that replaces it.
constexpr Nanos kMonitorSlice = std::chrono::milliseconds(10);

std::atomic<uint64_t> monitor_ids{0};

}  // namespace

KvEventSubscriber::KvEventSubscriber(kv::KvIndex& index, SubscriberConfig config,
                                     std::shared_ptr<ZmqContext> context)
    : index_(index), config_(std::move(config)), context_(or_new(std::move(context))) {}

KvEventSubscriber::~KvEventSubscriber() { stop(); }

Status KvEventSubscriber::start() {
  if (stream_) return failed_precondition("subscriber already started");
  if (config_.endpoint.empty()) return invalid_argument("KV-event endpoint is empty");
  if (config_.dp_size == 0) return invalid_argument("dp_size must be at least 1");
  if (config_.worker >= index_.max_workers()) return invalid_argument("worker id out of range");
  zmq::context_t& ctx = context_->impl().context;
  auto sockets = std::make_unique<Sockets>();
  try {
    sockets->sub = zmq::socket_t(ctx, zmq::socket_type::sub);
    sockets->sub.set(zmq::sockopt::linger, 0);
    sockets->sub.set(zmq::sockopt::rcvhwm, config_.rcv_hwm);
    sockets->sub.set(zmq::sockopt::subscribe, config_.topic);
    // Before connecting, so that no connection event is missed: a reconnect may be a new engine
    // life whose sequence numbers look like a continuation (WorkerStream::on_reconnected).
    const std::string monitor_endpoint =
        "inproc://infera-kv-events-monitor-" + std::to_string(monitor_ids.fetch_add(1));
    if (zmq_socket_monitor(sockets->sub.handle(), monitor_endpoint.c_str(),
                           ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                               ZMQ_EVENT_DISCONNECTED) != 0) {
      throw zmq::error_t();
    }
    sockets->monitor = zmq::socket_t(ctx, zmq::socket_type::pair);
    sockets->monitor.set(zmq::sockopt::linger, 0);
    sockets->monitor.connect(monitor_endpoint);
    for (uint32_t rank = 0; rank < config_.dp_size; ++rank) {
      INFERA_ASSIGN_OR_RETURN(std::string endpoint, offset_endpoint_port(config_.endpoint, rank));
      sockets->sub.connect(endpoint);
      sockets->endpoints.push_back(std::move(endpoint));
    }
  } catch (const zmq::error_t& e) {
    return invalid_argument("KV-event endpoint '" + config_.endpoint + "': " + e.what());
  }
  if (!config_.replay_endpoint.empty()) {
    replay_ = std::make_unique<ZmqReplayClient>(ctx, config_.replay_endpoint,
                                                config_.replay_timeout, stop_);
  }
  StreamOptions options;
  options.worker = config_.worker;
  options.worker_name = config_.worker_name;
  options.limits = config_.limits;
  options.apply = config_.apply;
  stream_ = std::make_unique<WorkerStream>(index_, std::move(options), replay_.get());
  thread_ = std::thread([this, s = std::move(sockets)]() mutable { run(std::move(s)); });
  INFERA_LOG(kInfo, "events")
      .msg("subscribed to KV events")
      .kv("worker", config_.worker_name)
      .kv("endpoint", config_.endpoint)
      .kv("replay", config_.replay_endpoint)
      .kv("topic", config_.topic)
      .kv("dp_size", config_.dp_size);
  return ok_status();
}

void KvEventSubscriber::handle_monitor(Sockets& sockets) {
  std::array<zmq::message_t, 4> frames;
  while (!stop_.load(std::memory_order_relaxed)) {
    // [event (uint16, native order) + value (uint32), address]
    if (recv_message(sockets.monitor, frames) != 2 || frames[0].size() < sizeof(uint16_t)) return;
    uint16_t event = 0;
    std::memcpy(&event, frames[0].data(), sizeof(event));
    const std::string address(static_cast<const char*>(frames[1].data()), frames[1].size());
    bool& down = sockets.down[address];
    bool reconnected = false;
    if (event == ZMQ_EVENT_DISCONNECTED) {
      down = true;
    } else if (down) {  // connected again (TCP, then ZMTP handshake: the first one counts)
      down = false;
      reconnected = true;
    } else {
      continue;  // the first connection, or the handshake after a connect already handled
    }
    // The rank whose endpoint this is; every rank when the address is not one we connected
    // (a resolved host name).
    const auto it = std::find(sockets.endpoints.begin(), sockets.endpoints.end(), address);
    const bool known = it != sockets.endpoints.end();
    for (size_t rank = 0; rank < sockets.endpoints.size(); ++rank) {
      if (known && rank != static_cast<size_t>(it - sockets.endpoints.begin())) continue;
      const auto dp_rank = static_cast<int64_t>(rank);
      if (reconnected) {
        stream_->on_reconnected(dp_rank);
      } else {
        stream_->on_disconnected(dp_rank);
      }
    }
    INFERA_LOG(kDebug, "events")
        .msg(reconnected ? "KV-event publisher reconnected" : "KV-event publisher disconnected")
        .kv("worker", config_.worker_name)
        .kv("address", address);
  }
}

void KvEventSubscriber::run(std::unique_ptr<Sockets> sockets) {
  zmq::socket_t& sub = sockets->sub;
  std::array<zmq::message_t, 4> frames;
  SteadyClock clock;
  try {
    while (!stop_.load(std::memory_order_acquire)) {
      std::array<zmq::pollitem_t, 2> items{{{sub.handle(), 0, ZMQ_POLLIN, 0},
                                            {sockets->monitor.handle(), 0, ZMQ_POLLIN, 0}}};
      try {
        zmq::poll(items.data(), items.size(),
                  std::chrono::duration_cast<std::chrono::milliseconds>(kPollSlice));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
        continue;
      }
      // Connection events first: those of a reconnect precede the new connection's data.
      handle_monitor(*sockets);
      if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
      Nanos monitored = clock.now();
      for (int i = 0; i < kDrainBatch && !stop_.load(std::memory_order_relaxed); ++i) {
        if (const Nanos now = clock.now(); now - monitored >= kMonitorSlice) {
          handle_monitor(*sockets);
          monitored = now;
        }
        const size_t n = recv_message(sub, frames);
        if (n == 0) break;
        if (n != 3) {
          stream_->count_error(MessageError::kFrameCount);
          continue;
        }
        stream_->on_message(frame_bytes(frames[1]), frame_bytes(frames[2]));
      }
    }
  } catch (const zmq::error_t& e) {
    INFERA_LOG(kError, "events")
        .msg("KV-event subscriber socket failed; no more events from this worker")
        .kv("worker", config_.worker_name)
        .kv("error", e.what());
  }
  stream_->set_stopped();
}

void KvEventSubscriber::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

StreamStats KvEventSubscriber::stats() const {
  return stream_ ? stream_->stats() : StreamStats{};
}

Nanos KvEventSubscriber::thread_cpu_time() const { return infera::thread_cpu_time(thread_); }

SubscriberState KvEventSubscriber::state() const {
  return stream_ ? stream_->state() : SubscriberState::kStopped;
}

std::optional<StreamSnapshot> KvEventSubscriber::snapshot() const {
  if (!stream_) return std::nullopt;
  return stream_->snapshot();
}

bool KvEventSubscriber::seed(const StreamSnapshot& snapshot) {
  return stream_ && stream_->seed(snapshot);
}

// ---------------------------------------------------------------- KvEventListener

struct KvEventListener::Entry {
  std::unique_ptr<ZmqReplayClient> replay;
  std::unique_ptr<WorkerStream> stream;
};

struct KvEventListener::Sockets {
  zmq::socket_t sub;
};

KvEventListener::KvEventListener(kv::KvIndex& index, ListenerConfig config,
                                 std::shared_ptr<ZmqContext> context)
    : index_(index), config_(std::move(config)), context_(or_new(std::move(context))) {}

KvEventListener::~KvEventListener() { stop(); }

Status KvEventListener::start() {
  if (thread_.joinable()) return failed_precondition("listener already started");
  auto sockets = std::make_unique<Sockets>();
  try {
    sockets->sub = zmq::socket_t(context_->impl().context, zmq::socket_type::sub);
    sockets->sub.set(zmq::sockopt::linger, 0);
    sockets->sub.set(zmq::sockopt::rcvhwm, config_.rcv_hwm);
    sockets->sub.set(zmq::sockopt::subscribe, "");  // the topic is matched exactly, per worker
    sockets->sub.bind(config_.endpoint);
    bound_endpoint_ = sockets->sub.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return unavailable("cannot bind KV-event listener on '" + config_.endpoint + "': " + e.what());
  }
  thread_ = std::thread([this, s = std::move(sockets)]() mutable { run(std::move(s)); });
  INFERA_LOG(kInfo, "events").msg("listening for KV events").kv("endpoint", bound_endpoint_);
  return ok_status();
}

void KvEventListener::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

std::string KvEventListener::endpoint() const { return bound_endpoint_; }

Status KvEventListener::add_worker(ListenerWorker worker) {
  if (worker.worker >= index_.max_workers()) return invalid_argument("worker id out of range");
  auto entry = std::make_shared<Entry>();
  if (!worker.replay_endpoint.empty()) {
    entry->replay = std::make_unique<ZmqReplayClient>(context_->impl().context,
                                                      worker.replay_endpoint,
                                                      config_.replay_timeout, stop_);
  }
  StreamOptions options;
  options.worker = worker.worker;
  options.worker_name = std::move(worker.worker_name);
  options.limits = config_.limits;
  options.apply = worker.apply;  // trivially copyable
  std::lock_guard lock(mu_);
  if (by_topic_.contains(worker.topic)) {
    return invalid_argument("KV-event topic '" + worker.topic + "' is already registered");
  }
  entry->stream = std::make_unique<WorkerStream>(index_, std::move(options), entry->replay.get());
  by_topic_.emplace(std::move(worker.topic), std::move(entry));
  return ok_status();
}

void KvEventListener::remove_worker(kv::WorkerId worker) {
  std::shared_ptr<Entry> gone;  // released outside the locks
  // After this returns no message of the worker is being applied: its slot may be reused.
  std::lock_guard step(step_mu_);
  std::lock_guard lock(mu_);
  for (auto it = by_topic_.begin(); it != by_topic_.end(); ++it) {
    if (it->second->stream->options().worker == worker) {
      gone = std::move(it->second);
      by_topic_.erase(it);
      return;
    }
  }
}

std::optional<StreamStats> KvEventListener::stats(kv::WorkerId worker) const {
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard lock(mu_);
    for (const auto& [topic, e] : by_topic_) {
      if (e->stream->options().worker == worker) entry = e;
    }
  }
  if (!entry) return std::nullopt;
  StreamStats s = entry->stream->stats();
  if (!thread_.joinable() || stop_.load(std::memory_order_acquire)) s.state = SubscriberState::kStopped;
  return s;
}

std::array<uint64_t, kNumMessageErrors> KvEventListener::unattributed_errors() const {
  std::lock_guard lock(mu_);
  return unattributed_;
}

std::shared_ptr<KvEventListener::Entry> KvEventListener::find(std::string_view topic) const {
  std::lock_guard lock(mu_);
  // One lookup per message under an uncontended lock.
  auto it = by_topic_.find(topic);
  return it == by_topic_.end() ? nullptr : it->second;
}

void KvEventListener::run(std::unique_ptr<Sockets> sockets) {
  zmq::socket_t& sub = sockets->sub;
  std::array<zmq::message_t, 4> frames;
  try {
    while (!stop_.load(std::memory_order_acquire)) {
      if (!wait_readable(sub, kPollSlice)) continue;
      for (int i = 0; i < kDrainBatch && !stop_.load(std::memory_order_relaxed); ++i) {
        const size_t n = recv_message(sub, frames);
        if (n == 0) break;
        const std::string_view topic(static_cast<const char*>(frames[0].data()), frames[0].size());
        std::lock_guard step(step_mu_);  // uncontended but for remove_worker
        const std::shared_ptr<Entry> entry = find(topic);
        if (!entry) {
          const MessageError error = n == 3 ? MessageError::kUnknownTopic : MessageError::kFrameCount;
          std::lock_guard lock(mu_);
          if (error == MessageError::kUnknownTopic && unattributed_[static_cast<size_t>(error)] == 0) {
            // Once: an engine whose topic names no worker is otherwise silently unheard.
            INFERA_LOG(kWarn, "events").msg("KV events whose topic names no worker (logged once; "
                                            "counted in infera_kv_events_unattributed_total)")
                .kv("endpoint", bound_endpoint_).kv("topic", topic.substr(0, 128));
          }
          ++unattributed_[static_cast<size_t>(error)];
          continue;
        }
        if (n != 3) {
          entry->stream->count_error(MessageError::kFrameCount);
          continue;
        }
        entry->stream->on_message(frame_bytes(frames[1]), frame_bytes(frames[2]));
      }
    }
  } catch (const zmq::error_t& e) {
    INFERA_LOG(kError, "events")
        .msg("KV-event listener socket failed; no more events")
        .kv("endpoint", bound_endpoint_)
        .kv("error", e.what());
  }
}

}  // namespace infera::events
