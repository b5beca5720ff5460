#include "infera/events/nats_relay.h"

#include "infera/common/log.h"
#include "infera/events/msgpack.h"
#include "infera/events/zmq_io.h"
#include "infera/nats/client.h"
#include "infera/nats/subjects.h"

namespace infera::events {

struct KvEventRelay::Sockets {
  zmq::socket_t sub;
  std::unique_ptr<ZmqReplayClient> replay;
};

KvEventRelay::KvEventRelay(nats::Client& client, RelayConfig config,
                           std::shared_ptr<ZmqContext> context)
    : client_(client),
      config_(std::move(config)),
      context_(context ? std::move(context) : std::make_shared<ZmqContext>()),
      subject_(nats::kv_events_subject(config_.ns, config_.worker_id)) {}

KvEventRelay::~KvEventRelay() { stop(); }

Status KvEventRelay::start() {
  if (thread_.joinable()) return failed_precondition("KV-event relay already started");
  if (config_.worker_id.empty()) return invalid_argument("KV-event relay: no worker id");
  if (config_.endpoint.empty()) return invalid_argument("KV-event relay: no engine endpoint");
  zmq::context_t& ctx = context_->impl().context;
  auto sockets = std::make_unique<Sockets>();
  try {
    sockets->sub = zmq::socket_t(ctx, zmq::socket_type::sub);
    sockets->sub.set(zmq::sockopt::linger, 0);
    sockets->sub.set(zmq::sockopt::rcvhwm, config_.rcv_hwm);
    sockets->sub.set(zmq::sockopt::subscribe, config_.topic);
    sockets->sub.connect(config_.endpoint);
  } catch (const zmq::error_t& e) {
    return invalid_argument("KV-event endpoint '" + config_.endpoint + "': " + e.what());
  }
  if (!config_.replay_endpoint.empty()) {
    sockets->replay = std::make_unique<ZmqReplayClient>(ctx, config_.replay_endpoint,
                                                        config_.replay_timeout, stop_);
  }
  auto sid = client_.subscribe(
      nats::kv_replay_subject(config_.ns, config_.worker_id),
      [this](const nats::Message& m) {
        std::lock_guard lock(mu_);
        if (m.reply.empty() || replays_.size() >= config_.max_queued_replays) {
          ++stats_.replay_errors;
          return;
        }
        replays_.push_back({std::string(m.reply), std::string(m.payload)});
      },
      "relay");
  if (!sid.ok()) return sid.status();
  replay_sid_ = *sid;
  thread_ = std::thread([this, s = std::move(sockets)]() mutable { run(std::move(s)); });
  INFERA_LOG(kInfo, "events")
      .msg("relaying KV events to NATS")
      .kv("worker", config_.worker_id)
      .kv("endpoint", config_.endpoint)
      .kv("replay", config_.replay_endpoint)
      .kv("subject", subject_);
  return ok_status();
}

void KvEventRelay::stop() {
  if (!thread_.joinable()) return;
  client_.unsubscribe(replay_sid_);
  stop_.store(true);
  thread_.join();
}

RelayStats KvEventRelay::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

bool KvEventRelay::relay_message(Sockets& sockets) {
  std::array<zmq::message_t, 4> frames;
  const size_t n = recv_message(sockets.sub, frames);
  if (n == 0) return false;
  const auto seq = frame_bytes(frames[1]);
  if (n != 3 || (seq.size() != 8 && seq.size() != 24)) {
    std::lock_guard lock(mu_);
    ++stats_.malformed;
    return true;
  }
  const std::string_view topic(static_cast<const char*>(frames[0].data()), frames[0].size());
  encode_envelope_to(envelope_, config_.worker_id, seq, topic, frame_bytes(frames[2]));
  const Status s = client_.publish(subject_, envelope_);
  std::lock_guard lock(mu_);
  if (s.ok()) {
    ++stats_.relayed;
  } else if (s.code() == StatusCode::kInvalidArgument) {
    ++stats_.oversized;
  } else {
    ++stats_.dropped;
  }
  if (!s.ok() && (stats_.dropped + stats_.oversized) % 1000 == 1) {
    INFERA_LOG(kWarn, "events")
        .msg("KV-event batch not relayed; the router repairs the gap by replay")
        .kv("worker", config_.worker_id)
        .kv("error", s.message());
  }
  return true;
}

void KvEventRelay::serve_replay(Sockets& sockets, const Pending& p) {
  auto req = decode_replay_request(byte_span(p.request));
  bool failed = !req.ok();
  uint64_t sent = 0;
  if (req.ok() && sockets.replay) {
    // Each batch goes out as the engine answers: the router applies them in order.
    const Status s = sockets.replay->replay(
        req->dp_rank, req->from_seq, [&](uint64_t seq, std::span<const uint8_t> payload) {
          uint8_t frame[8];
          for (int i = 0; i < 8; ++i) frame[i] = static_cast<uint8_t>(seq >> (56 - 8 * i));
          if (client_.publish(p.reply, encode_envelope(config_.worker_id, frame, config_.topic, payload)).ok()) {
            ++sent;
          }
        });
    failed = !s.ok();
  }
  // The end marker goes even after a failure: the router stops waiting at once (what it got
  // before shows whether the replay was complete).
  (void)client_.publish(p.reply, encode_replay_end());
  std::lock_guard lock(mu_);
  ++stats_.replays;
  stats_.replayed_batches += sent;
  if (failed) ++stats_.replay_errors;
}

void KvEventRelay::run(std::unique_ptr<Sockets> sockets) {
  while (!stop_.load(std::memory_order_relaxed)) {
    for (;;) {
      Pending p;
      {
        std::lock_guard lock(mu_);
        if (replays_.empty()) break;
        p = std::move(replays_.front());
        replays_.pop_front();
      }
      serve_replay(*sockets, p);
    }
    if (!wait_readable(sockets->sub, std::chrono::milliseconds(10))) continue;
    // A bounded drain, so that replay requests wait at most one batch of live messages.
    for (int i = 0; i < 1024 && relay_message(*sockets); ++i) {
    }
  }
}

}  // namespace infera::events
