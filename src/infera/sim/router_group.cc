#include "infera/sim/router_group.h"

#include <charconv>
#include <string_view>

#include "infera/common/check.h"
#include "infera/kv/engine_signals.h"
#include "infera/kv/index.h"
#include "infera/kv/predicted_blocks.h"
#include "infera/replica/load_op.h"
#include "infera/replica/peer_load.h"

namespace infera::sim {
namespace {

constexpr std::string_view kWorkerPrefix = "worker-";

// The router id of replica `r` on the bus.
std::string router_id(uint32_t r) {
  return "r" + std::to_string(r);
}

}  // namespace

std::string worker_name(uint32_t id) {
  return std::string(kWorkerPrefix) + std::to_string(id);
}

// A replica's listener: each load change becomes an op, as LoadBus publishes it on NATS.
class RouterGroup::Link final : public routing::LoadListener {
 public:
  Link(RouterGroup& group, uint32_t self) : group_(group), self_(self), id_(router_id(self)) {}

  void on_add(kv::LoadTicket ticket, std::span<const uint64_t> seq_hashes, uint32_t uncached,
              uint32_t cached) override {
    send(replica::OpFields{replica::OpKind::kAdd, group_.names_[ticket.worker], ticket.serial,
                           seq_hashes, uncached, cached});
  }
  void on_prefill_done(kv::LoadTicket ticket) override {
    send(replica::OpFields{
        replica::OpKind::kPrefillDone, group_.names_[ticket.worker], ticket.serial, {}, 0, 0});
  }
  void on_release(kv::LoadTicket ticket) override {
    send(replica::OpFields{
        replica::OpKind::kRelease, group_.names_[ticket.worker], ticket.serial, {}, 0, 0});
  }

 private:
  void send(const replica::OpFields& op) {
    std::string bytes;
    replica::encode_op(bytes, id_, ++seq_, op);
    group_.post(self_, std::move(bytes));
  }

  RouterGroup& group_;
  const uint32_t self_;
  const std::string id_;
  uint64_t seq_ = 0;  // ops sent; the first is 1, as on the bus
};

// What one `infera server` holds for routing. Members in dependency order: the index confirms
// into `predicted`, the router reads all of them, `peers` releases into `load` when destroyed.
struct RouterGroup::Replica {
  Replica(const RouterGroupOptions& o, const Clock& clock)
      : predicted(
            kv::PredictedBlocks::Options{from_seconds(o.router.load.predicted_ttl_s), o.workers},
            clock),
        index(kv::KvIndex::Options{o.block_size, o.workers, &predicted}),
        load(kv::ActiveLoad::Options{o.active_ttl, o.workers}, clock),
        signals(o.workers, clock) {}

  kv::PredictedBlocks predicted;
  kv::KvIndex index;
  kv::ActiveLoad load;
  kv::EngineSignals signals;
  std::unique_ptr<Link> link;  // sync on: told of every change the router makes
  std::unique_ptr<routing::Router> router;
  std::vector<events::EventApplier> appliers;  // by worker
  std::unique_ptr<replica::PeerLoad> peers;    // sync on: the other replicas' load
};

RouterGroup::RouterGroup(RouterGroupOptions options, const Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

RouterGroup::~RouterGroup() = default;

Result<std::unique_ptr<RouterGroup>> RouterGroup::create(RouterGroupOptions options,
                                                         const Clock& clock) {
  if (options.routers == 0) return invalid_argument("at least one router");
  if (options.sync_latency.count() < 0) return invalid_argument("sync latency below 0");
  std::unique_ptr<RouterGroup> group(new RouterGroup(std::move(options), clock));
  INFERA_RETURN_IF_ERROR(group->build());
  return group;
}

Status RouterGroup::build() {
  const uint32_t workers = options_.workers;
  for (uint32_t w = 0; w < workers; ++w) names_.push_back(worker_name(w));
  const bool sync = options_.sync && options_.routers > 1;
  // A peer's op names its worker: the sim's name back to its slot.
  auto resolve = [workers](std::string_view name) -> std::optional<kv::WorkerId> {
    if (!name.starts_with(kWorkerPrefix)) return std::nullopt;
    name.remove_prefix(kWorkerPrefix.size());
    uint32_t id = 0;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), id);
    if (ec != std::errc() || end != name.data() + name.size() || id >= workers) {
      return std::nullopt;
    }
    return id;
  };
  for (uint32_t r = 0; r < options_.routers; ++r) {
    auto rep = std::make_unique<Replica>(options_, clock_);
    routing::RouterOptions router_options = options_.router;
    router_options.seed += r;  // replicas of a server seed apart (--router-seed 0: entropy)
    INFERA_ASSIGN_OR_RETURN(
        rep->router, routing::Router::create(router_options, rep->index, rep->load, &rep->predicted,
                                             &rep->signals));
    for (uint32_t w = 0; w < workers; ++w) {
      rep->index.add_worker(w);
      rep->appliers.emplace_back(rep->index, w);
    }
    if (sync) {
      rep->link = std::make_unique<Link>(*this, r);
      rep->router->set_load_listener(rep->link.get());
      rep->peers = std::make_unique<replica::PeerLoad>(replica::PeerLoad::Options{}, router_id(r),
                                                       rep->load, &rep->predicted, resolve, clock_);
    }
    replicas_.push_back(std::move(rep));
  }
  return ok_status();
}

routing::Router& RouterGroup::router(uint32_t replica) {
  INFERA_CHECK(replica < replicas_.size());
  return *replicas_[replica]->router;
}

void RouterGroup::apply_events(uint32_t worker, const events::EventBatch& batch,
                               events::ApplyTally& tally) {
  for (const auto& rep : replicas_) rep->appliers[worker].apply(batch, tally);
}

void RouterGroup::record_engine_metrics(uint32_t worker, const engine::EngineMetrics& m) {
  for (const auto& rep : replicas_) {
    const kv::WorkerLoad ours = rep->load.load(worker);
    rep->signals.record(worker, m.num_waiting, m.num_running, m.kv_cache_usage,
                        ours.active_requests, ours.prefill_requests);
  }
}

void RouterGroup::post(uint32_t from, std::string bytes) {
  ++stats_.sent;
  bus_.push_back(Message{clock_.now() + options_.sync_latency, from, std::move(bytes)});
}

std::optional<Nanos> RouterGroup::next_delivery() const {
  if (bus_.empty()) return std::nullopt;
  return bus_.front().at;
}

void RouterGroup::deliver_due() {
  const Nanos now = clock_.now();
  while (!bus_.empty() && bus_.front().at <= now) {
    const Message& m = bus_.front();
    const auto* data = reinterpret_cast<const uint8_t*>(m.bytes.data());
    const Result<replica::LoadOp> op = replica::decode_op({data, m.bytes.size()}, blocks_);
    INFERA_CHECK(op.ok());  // encoded above by a Link
    for (uint32_t r = 0; r < replicas_.size(); ++r) {
      if (r == m.from) continue;
      const replica::ApplyOutcome outcome = replicas_[r]->peers->apply(*op, blocks_);
      ++(outcome == replica::ApplyOutcome::kApplied ? stats_.applied : stats_.not_applied);
    }
    bus_.pop_front();
  }
}

size_t RouterGroup::index_memory_bytes() const {
  return replicas_.front()->index.memory_bytes();
}

}  // namespace infera::sim
