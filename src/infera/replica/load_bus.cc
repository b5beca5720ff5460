#include "infera/replica/load_bus.h"

#include <mutex>

#include "infera/common/log.h"
#include "infera/events/msgpack.h"
#include "infera/nats/subjects.h"

namespace infera::replica {

LoadBus::LoadBus(Options options, nats::Client& client, PeerLoad& peers, WorkerName name)
    : options_(std::move(options)),
      client_(client),
      peers_(peers),
      name_(std::move(name)),
      subject_(nats::router_load_subject(options_.ns)) {}

LoadBus::~LoadBus() { stop(); }

Status LoadBus::start() {
  INFERA_ASSIGN_OR_RETURN(sid_, client_.subscribe(subject_, [this](const nats::Message& m) {
    receive(m);
  }));
  running_.store(true, std::memory_order_release);
  publish(OpFields{});  // hello
  return ok_status();
}

void LoadBus::stop() {
  if (!running_.load(std::memory_order_acquire)) return;
  // Goodbye, so that the siblings drop this replica's load now rather than after the silence;
  // waited for a moment only (a bus that is away loses it, and the silence does the rest).
  if (publish(OpFields{OpKind::kBye, {}, 0, {}, 0, 0})) (void)client_.flush(kByeFlush);
  if (!running_.exchange(false)) return;
  client_.unsubscribe(sid_);
}

void LoadBus::tick() {
  if (!running_.load(std::memory_order_acquire)) return;
  publish(OpFields{});
  if (const size_t gone = peers_.expire()) {
    INFERA_LOG(kInfo, "replica").msg("router replicas went silent; their load is dropped")
        .kv("peers", gone);
  }
}

void LoadBus::on_add(kv::LoadTicket ticket, std::span<const uint64_t> seq_hashes,
                     uint32_t uncached, uint32_t cached) {
  const std::string worker = name_(ticket.worker);
  publish(OpFields{OpKind::kAdd, worker, ticket.serial, seq_hashes, uncached, cached});
}

void LoadBus::on_prefill_done(kv::LoadTicket ticket) {
  const std::string worker = name_(ticket.worker);
  publish(OpFields{OpKind::kPrefillDone, worker, ticket.serial, {}, 0, 0});
}

void LoadBus::on_release(kv::LoadTicket ticket) {
  const std::string worker = name_(ticket.worker);
  publish(OpFields{OpKind::kRelease, worker, ticket.serial, {}, 0, 0});
}

bool LoadBus::publish(const OpFields& op) {
  if (!running_.load(std::memory_order_acquire)) return false;
  if (op.kind == OpKind::kAdd && op.worker.empty()) return false;  // the worker left already
  Status sent;
  {
    std::lock_guard lock(publish_mu_);
    encode_op(out_, options_.router_id, seq_ + 1, op);
    sent = client_.publish(subject_, out_);
    if (sent.ok()) ++seq_;
  }
  (sent.ok() ? published_ : publish_failed_).fetch_add(1, std::memory_order_relaxed);
  return sent.ok();
}

void LoadBus::receive(const nats::Message& message) {
  received_.fetch_add(1, std::memory_order_relaxed);
  const Result<LoadOp> op = decode_op(events::byte_span(message.payload), blocks_);
  if (!op.ok()) {
    if (malformed_.fetch_add(1, std::memory_order_relaxed) == 0) {
      INFERA_LOG(kWarn, "replica").msg("ignored a message on the router load subject that is not "
                                       "a version-1 load op (logged once; counted)")
          .kv("subject", subject_).kv("error", op.status().message());
    }
    return;
  }
  const ApplyOutcome outcome = peers_.apply(*op, blocks_);
  if (op->kind == OpKind::kBye && outcome == ApplyOutcome::kApplied) {
    INFERA_LOG(kInfo, "replica")
        .msg("a router replica said goodbye; its load is dropped")
        .kv("router_id", op->router_id);
  }
}

LoadBusStats LoadBus::stats() const {
  return LoadBusStats{published_.load(std::memory_order_relaxed),
                      publish_failed_.load(std::memory_order_relaxed),
                      received_.load(std::memory_order_relaxed),
                      malformed_.load(std::memory_order_relaxed)};
}

}  // namespace infera::replica
