#include "infera/events/nats_source.h"

#include "infera/common/log.h"
#include "infera/events/msgpack.h"
#include "infera/events/nats_envelope.h"
#include "infera/nats/client.h"
#include "infera/nats/subjects.h"

namespace infera::events {
namespace {

// Replays over NATS: a request on the worker's replay subject, answered on an inbox of ours.
class NatsReplay final : public ReplaySource {
 public:
  NatsReplay(nats::Client& client, std::string subject, std::string worker_name,
             Nanos idle_timeout, const std::atomic<bool>& stop)
      : client_(client),
        subject_(std::move(subject)),
        worker_name_(std::move(worker_name)),
        idle_timeout_(idle_timeout),
        stop_(stop) {}

  Status replay(int64_t dp_rank, uint64_t from_seq, const Sink& sink) override {
    struct Answers {
      std::mutex mu;
      std::condition_variable cv;
      std::deque<std::pair<int, std::string>> got;  // status, payload
      bool overflow = false;
    };
    auto answers = std::make_shared<Answers>();
    const std::string inbox = client_.make_inbox();
    client_.add_inbox(inbox, [answers](const nats::Message& m) {
      std::lock_guard lock(answers->mu);
      if (answers->got.size() >= 65536) {
        answers->overflow = true;
      } else {
        answers->got.emplace_back(m.status, std::string(m.payload));
      }
      answers->cv.notify_one();
    });
    struct Unregister {
      nats::Client& c;
      const std::string& inbox;
      ~Unregister() { c.remove_inbox(inbox); }
    } unregister{client_, inbox};
    INFERA_RETURN_IF_ERROR(
        client_.publish(subject_, encode_replay_request({from_seq, dp_rank}), inbox));
    for (;;) {
      std::pair<int, std::string> next;
      {
        std::unique_lock lock(answers->mu);
        const auto until = std::chrono::steady_clock::now() + idle_timeout_;
        while (answers->got.empty() && !answers->overflow) {
          if (stop_.load()) return cancelled("stopping");
          // Short slices, so that stop() is seen promptly.
          const auto slice = std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(20));
          answers->cv.wait_until(lock, slice);
          if (std::chrono::steady_clock::now() >= until && answers->got.empty()) {
            return deadline_exceeded("no KV replay answer from " + worker_name_ + " over NATS");
          }
        }
        if (answers->overflow) return resource_exhausted("KV replay answer overflowed");
        next = std::move(answers->got.front());
        answers->got.pop_front();
      }
      if (next.first == 503) return unavailable("no relay answers KV replays for " + worker_name_);
      auto env = decode_envelope(byte_span(next.second));
      if (!env.ok()) return data_loss(env.status().message());
      if (env->end) return ok_status();
      sink(env->seq, env->batch);
    }
  }

 private:
  nats::Client& client_;
  std::string subject_;
  std::string worker_name_;
  Nanos idle_timeout_;
  const std::atomic<bool>& stop_;
};

}  // namespace

struct NatsEventSource::Entry {
  NatsWorker info;
  std::unique_ptr<NatsReplay> replay;
  std::unique_ptr<WorkerStream> stream;
};

NatsEventSource::NatsEventSource(kv::KvIndex& index, nats::Client& client, NatsSourceConfig config)
    : index_(index), client_(client), config_(std::move(config)) {}

NatsEventSource::~NatsEventSource() { stop(); }

Status NatsEventSource::start() {
  if (thread_.joinable()) return failed_precondition("NATS event source already started");
  auto sid = client_.subscribe(nats::kv_events_wildcard(config_.ns), [this](const nats::Message& m) {
    const std::string token(nats::last_token(m.subject));
    std::lock_guard lock(mu_);
    ++stats_.received;
    auto it = by_token_.find(token);
    if (it == by_token_.end()) {
      ++stats_.unattributed;
      return;
    }
    if (queue_.size() >= config_.max_queued ||
        queued_bytes_ + m.payload.size() > config_.max_queued_bytes) {
      ++stats_.dropped;  // the stream sees the gap and replays
      return;
    }
    queued_bytes_ += m.payload.size();
    const bool was_empty = queue_.empty();
    std::string payload;
    if (!spare_.empty()) {  // a buffer the stream thread is done with: no allocation
      payload = std::move(spare_.back());
      spare_.pop_back();
    }
    payload.assign(m.payload);
    queue_.push_back({it->second, std::move(payload)});
    if (was_empty) cv_.notify_one();  // the stream thread drains all it finds: one wake-up
  });
  if (!sid.ok()) return sid.status();
  sid_ = *sid;
  thread_ = std::thread([this] { run(); });
  INFERA_LOG(kInfo, "events")
      .msg("subscribed to KV events over NATS")
      .kv("subject", nats::kv_events_wildcard(config_.ns));
  return ok_status();
}

void NatsEventSource::stop() {
  if (!thread_.joinable()) return;
  client_.unsubscribe(sid_);
  stop_.store(true);
  cv_.notify_all();
  thread_.join();
  std::lock_guard lock(mu_);
  for (auto& [token, e] : by_token_) e->stream->set_stopped();
  queue_.clear();
}

Status NatsEventSource::add_worker(NatsWorker worker) {
  if (worker.worker >= index_.max_workers()) return invalid_argument("worker id out of range");
  auto e = std::make_shared<Entry>();
  e->info = worker;
  e->replay = std::make_unique<NatsReplay>(
      client_, nats::kv_replay_subject(config_.ns, worker.worker_name), worker.worker_name,
      config_.replay_timeout, stop_);
  StreamOptions o;
  o.worker = worker.worker;
  o.worker_name = worker.worker_name;
  o.limits = config_.limits;
  o.apply = worker.apply;
  e->stream = std::make_unique<WorkerStream>(index_, std::move(o), e->replay.get());
  const std::string token = nats::subject_token(worker.worker_name);
  std::lock_guard lock(mu_);
  for (const auto& [t, other] : by_token_) {
    if (other->info.worker == worker.worker) return invalid_argument("worker already added");
  }
  if (!by_token_.emplace(token, std::move(e)).second) {
    return invalid_argument("another worker has the NATS subject token " + token);
  }
  return ok_status();
}

void NatsEventSource::remove_worker(kv::WorkerId worker) {
  std::lock_guard lock(mu_);
  for (auto it = by_token_.begin(); it != by_token_.end(); ++it) {
    if (it->second->info.worker == worker) {
      by_token_.erase(it);  // queued items keep the entry alive until handled
      return;
    }
  }
}

void NatsEventSource::on_connection(bool up) {
  std::lock_guard lock(mu_);
  if (!up) {
    was_down_ = true;
    return;
  }
  if (!was_down_) return;  // the first connection: nothing was missed
  was_down_ = false;
  queue_.push_back({nullptr, {}});
  cv_.notify_one();
}

void NatsEventSource::handle(const Item& item) {
  if (!item.entry) {
    std::vector<std::shared_ptr<Entry>> all;
    {
      std::lock_guard lock(mu_);
      for (const auto& [t, e] : by_token_) all.push_back(e);
    }
    for (const auto& e : all) e->stream->catch_up();
    return;
  }
  auto env = decode_envelope(byte_span(item.payload));
  if (!env.ok() || env->end) {
    std::lock_guard lock(mu_);
    ++stats_.malformed;
    item.entry->stream->count_error(MessageError::kFrameCount);
    return;
  }
  if (env->worker_id != item.entry->info.worker_name) {
    std::lock_guard lock(mu_);
    ++stats_.unattributed;
    return;
  }
  const std::array<uint8_t, 24> frame = env->seq_frame();
  item.entry->stream->on_message(std::span<const uint8_t>(frame.data(), env->seq_frame_size()),
                                 env->batch);
}

void NatsEventSource::run() {
  std::deque<Item> batch;
  while (!stop_.load()) {
    {
      std::unique_lock lock(mu_);
      // The buffers of the batch just handled go back for the NATS thread to reuse.
      for (Item& item : batch) {
        if (spare_.size() < kMaxSpares && item.payload.capacity() <= kMaxSpareBytes) {
          spare_.push_back(std::move(item.payload));
        }
      }
      batch.clear();
      cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return !queue_.empty() || stop_.load(); });
      batch.swap(queue_);
      queued_bytes_ = 0;
    }
    for (const Item& item : batch) {
      if (stop_.load()) break;
      handle(item);
    }
  }
}

std::shared_ptr<NatsEventSource::Entry> NatsEventSource::entry_of(kv::WorkerId worker) const {
  std::lock_guard lock(mu_);
  for (const auto& [t, e] : by_token_) {
    if (e->info.worker == worker) return e;
  }
  return nullptr;
}

std::optional<StreamSnapshot> NatsEventSource::snapshot(kv::WorkerId worker) const {
  const std::shared_ptr<Entry> e = entry_of(worker);
  if (!e) return std::nullopt;
  return e->stream->snapshot();
}

bool NatsEventSource::seed(kv::WorkerId worker, const StreamSnapshot& snapshot) {
  const std::shared_ptr<Entry> e = entry_of(worker);
  return e && e->stream->seed(snapshot);
}

std::optional<StreamStats> NatsEventSource::stats(kv::WorkerId worker) const {
  std::lock_guard lock(mu_);
  for (const auto& [t, e] : by_token_) {
    if (e->info.worker == worker) return e->stream->stats();
  }
  return std::nullopt;
}

std::optional<SubscriberState> NatsEventSource::state(kv::WorkerId worker) const {
  std::lock_guard lock(mu_);
  for (const auto& [t, e] : by_token_) {
    if (e->info.worker == worker) return e->stream->state();
  }
  return std::nullopt;
}

NatsSourceStats NatsEventSource::source_stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace infera::events
