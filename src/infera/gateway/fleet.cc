#include "infera/gateway/fleet.h"

#include <algorithm>
#include <boost/json.hpp>
#include <map>

#include "infera/common/log.h"
#include "infera/common/metrics.h"
#include "infera/gateway/engine_poller.h"
#include "infera/http/net.h"

namespace infera::gateway {
namespace {

// `split`: the model's fleet has both a prefill and a decode pool. A fleet that is not split
// routes every worker as aggregated (a lone prefill or decode pool still serves whole requests).
bool role_fits(discovery::Role role, routing::Stage stage, bool split) {
  switch (stage) {
    case routing::Stage::kAggregated: return role == discovery::Role::kBoth || !split;
    case routing::Stage::kPrefill: return role == discovery::Role::kPrefill;
    case routing::Stage::kDecode: return role == discovery::Role::kDecode;
  }
  return false;
}

}  // namespace

bool FleetMember::serves(std::string_view model) const {
  if (model.empty()) return true;
  std::lock_guard lock(rt->mu);
  if (rt->models.empty()) return true;  // not known yet: do not turn traffic away
  return std::find(rt->models.begin(), rt->models.end(), model) != rt->models.end();
}

const FleetMember* FleetView::find(std::string_view id) const {
  for (const FleetMember& m : members) {
    if (m.info.id == id) return &m;
  }
  return nullptr;
}

const FleetMember* FleetView::by_slot(kv::WorkerId slot) const {
  for (const FleetMember& m : members) {
    if (m.slot == slot) return &m;
  }
  return nullptr;
}

bool could_serve(const FleetMember& m, std::string_view model, routing::Stage stage,
                 bool split_fleet, const std::vector<kv::WorkerId>& skip) {
  return !m.rt->refused.load(std::memory_order_relaxed) && role_fits(m.info.role, stage, split_fleet) &&
         std::find(skip.begin(), skip.end(), m.slot) == skip.end() && m.serves(model);
}

void keep_protocol(const FleetView& view, discovery::PdProtocol protocol,
                   std::vector<kv::WorkerId>& slots) {
  std::erase_if(slots, [&](kv::WorkerId slot) {
    const FleetMember* m = view.by_slot(slot);
    return m == nullptr || discovery::pd_protocol(m->info) != protocol;
  });
}

Fleet::Fleet(Options options, kv::KvIndex& index, kv::ActiveLoad& load, kv::EngineSignals& signals,
             http::EventLoop& loop, http::Client& client, const Clock& clock)
    : options_(options),
      index_(index),
      load_(load),
      loop_(loop),
      client_(client),
      clock_(clock),
      zmq_(std::make_shared<events::ZmqContext>(1)),
      poller_(std::make_unique<EnginePoller>(
          EnginePoller::Options{.interval = options.engine_metrics_interval}, signals, load, loop,
          client)) {
  view_.store(std::make_shared<const FleetView>());
}

Fleet::~Fleet() {
  std::lock_guard lock(update_mu_);
  const auto v = view_.load();
  for (const FleetMember& m : v->members) {
    if (m.rt->subscriber) m.rt->subscriber->stop();
    poller_->stop(m);
  }
}

std::shared_ptr<const FleetView> Fleet::view() const { return view_.load(); }

FleetMember Fleet::join(const discovery::WorkerInfo& info, std::shared_ptr<WorkerRuntime> rt) {
  FleetMember m;
  m.info = info;
  m.rt = std::move(rt);
  if (!free_slots_.empty()) {
    m.slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    m.slot = next_slot_++;
  }
  auto endpoint = http::parse_endpoint(info.url);
  if (endpoint.ok()) m.endpoint = *endpoint;
  {
    std::lock_guard lock(m.rt->mu);
    if (!info.model.empty()) m.rt->models = {info.model};
    m.rt->block_size = info.block_size;
  }
  index_.add_worker(m.slot);
  if (info.block_size != 0 && info.block_size != options_.block_size) {
    refuse(m, "block size " + std::to_string(info.block_size) + " differs from the router's " +
                  std::to_string(options_.block_size));
  }
  if (!info.kv_endpoint.empty()) {
    events::SubscriberConfig c;
    c.worker = m.slot;
    c.worker_name = info.id;
    c.endpoint = info.kv_endpoint;
    c.replay_endpoint = info.replay_endpoint;
    c.topic = info.topic;
    c.dp_size = std::max(1u, info.dp_size);
    m.rt->subscriber = std::make_unique<events::KvEventSubscriber>(index_, c, zmq_);
    const Status started = m.rt->subscriber->start();
    if (!started.ok()) {
      INFERA_LOG(kError, "fleet").msg("cannot subscribe to the worker's KV events; routing by load only")
          .kv("worker", info.id).kv("endpoint", info.kv_endpoint).kv("error", started.message());
      m.rt->subscriber.reset();
    }
  }
  INFERA_LOG(kInfo, "fleet").msg("worker joined").kv("worker", info.id)
      .kv("role", discovery::role_name(info.role)).kv("slot", m.slot)
      .kv("kv_events", info.kv_endpoint.empty() ? "none" : info.kv_endpoint);
  if (m.endpoint.port != 0) probe(m);
  poller_->start(m);
  return m;
}

void Fleet::leave(const FleetMember& m) {
  if (m.rt->subscriber) m.rt->subscriber->stop();
  poller_->stop(m);  // before the slot is freed: a poll in flight must not record into it
  index_.remove_worker(m.slot);
  load_.remove_worker(m.slot);
  free_slots_.push_back(m.slot);
  INFERA_LOG(kInfo, "fleet").msg("worker left").kv("worker", m.info.id).kv("slot", m.slot);
}

void Fleet::update(const discovery::WorkerSetPtr& workers) {
  std::lock_guard lock(update_mu_);
  const auto old = view_.load();
  std::map<std::string, const FleetMember*> current;
  for (const FleetMember& m : old->members) current[m.info.id] = &m;
  auto next = std::make_shared<FleetView>();
  std::vector<const FleetMember*> departed;
  std::map<std::string, bool> seen;
  for (const discovery::WorkerInfo& w : *workers) {
    if (seen.count(w.id)) continue;
    seen[w.id] = true;
    auto it = current.find(w.id);
    if (it != current.end() && it->second->info == w) {
      next->members.push_back(*it->second);  // unchanged: keep slot, mirror and health
      continue;
    }
    // A changed record (new endpoints, role, block size) is a new worker: leave first, so the
    // slot's mirror starts empty.
    if (it != current.end()) leave(*it->second);
    if (next_slot_ >= options_.max_workers && free_slots_.empty()) {
      INFERA_LOG(kError, "fleet").msg("too many workers; ignoring one").kv("worker", w.id)
          .kv("max_workers", options_.max_workers);
      continue;
    }
    next->members.push_back(join(w, std::make_shared<WorkerRuntime>()));
  }
  for (const FleetMember& m : old->members) {
    if (!seen.count(m.info.id)) departed.push_back(&m);
  }
  for (const FleetMember* m : departed) leave(*m);
  std::sort(next->members.begin(), next->members.end(),
            [](const FleetMember& a, const FleetMember& b) { return a.info.id < b.info.id; });
  view_.store(std::move(next));
}

void Fleet::candidates(const FleetView& view, std::string_view model, routing::Stage stage,
                       const std::vector<kv::WorkerId>& skip, std::vector<kv::WorkerId>& out,
                       bool* at_capacity) const {
  out.clear();
  const int64_t now = clock_.now().count();
  std::vector<kv::WorkerId> backing_off;
  bool capped = false;
  const bool split_fleet = stage == routing::Stage::kAggregated && split(view, model);
  for (const FleetMember& m : view.members) {
    if (!could_serve(m, model, stage, split_fleet, skip)) continue;
    if (options_.max_inflight_per_worker != 0 &&
        m.rt->inflight.load(std::memory_order_relaxed) >= options_.max_inflight_per_worker) {
      capped = true;
      continue;
    }
    if (m.rt->excluded_until_ns.load(std::memory_order_relaxed) > now) {
      backing_off.push_back(m.slot);
      continue;
    }
    out.push_back(m.slot);
  }
  if (out.empty()) out = std::move(backing_off);
  if (at_capacity) *at_capacity = out.empty() && capped;
}

bool Fleet::split(const FleetView& view, std::string_view model) const {
  bool prefill = false;
  bool decode = false;
  for (const FleetMember& m : view.members) {
    if (m.info.role == discovery::Role::kBoth) continue;
    if (m.rt->refused.load(std::memory_order_relaxed) || !m.serves(model)) continue;
    prefill = prefill || m.info.role == discovery::Role::kPrefill;
    decode = decode || m.info.role == discovery::Role::kDecode;
  }
  return prefill && decode;
}

void Fleet::record_success(const FleetMember& m) const {
  m.rt->consecutive_failures.store(0, std::memory_order_relaxed);
  m.rt->excluded_until_ns.store(0, std::memory_order_relaxed);
}

void Fleet::record_failure(const FleetMember& m) const {
  m.rt->failures.fetch_add(1, std::memory_order_relaxed);
  const uint32_t n = m.rt->consecutive_failures.fetch_add(1, std::memory_order_relaxed) + 1;
  // 0.5 s, 1 s, 2 s, ... up to 30 s.
  auto backoff = options_.backoff_min * (int64_t{1} << std::min(n - 1, 16u));
  backoff = std::min(backoff, options_.backoff_max);
  const Nanos until = clock_.now() + std::chrono::duration_cast<Nanos>(backoff);
  m.rt->excluded_until_ns.store(until.count(), std::memory_order_relaxed);
  INFERA_LOG(kWarn, "fleet").msg("worker failed; excluded for a while").kv("worker", m.info.id)
      .kv("consecutive_failures", n).kv("backoff_ms", static_cast<int64_t>(backoff.count()));
}

std::string Fleet::health(const FleetMember& m) const {
  if (m.rt->refused.load()) return "refused";
  if (m.rt->excluded_until_ns.load() > clock_.now().count()) return "backoff";
  return "healthy";
}

void Fleet::refuse(const FleetMember& m, const std::string& reason) const {
  {
    std::lock_guard lock(m.rt->mu);
    if (m.rt->refused.load()) return;
    m.rt->refused_reason = reason;
  }
  m.rt->refused.store(true);
  INFERA_LOG(kError, "fleet").msg("worker refused: it will not be routed").kv("worker", m.info.id)
      .kv("reason", reason);
}

void Fleet::maintain() {
  load_.expire();
  const auto v = view_.load();
  ++maintain_ticks_;
  for (const FleetMember& m : v->members) {
    if (m.rt->subscriber && !m.rt->refused.load()) {
      const events::StreamStats s = m.rt->subscriber->stats();
      const uint64_t mismatched =
          s.applied.rejected[static_cast<size_t>(kv::ApplyResult::kBlockSizeMismatch)];
      if (mismatched > 0) {
        refuse(m, "its KV events carry a block size other than the router's " +
                      std::to_string(options_.block_size));
      }
    }
    bool unknown = false;
    {
      std::lock_guard lock(m.rt->mu);
      unknown = m.rt->models.empty();
    }
    if (m.endpoint.port == 0) continue;
    if (unknown && maintain_ticks_ % 10 == 0) {
      probe(m);
    } else if (!unknown && maintain_ticks_ % kModelRefreshTicks == 0) {
      probe(m, /*block_size=*/false);
    }
  }
}

std::vector<std::string> Fleet::models() const {
  std::vector<std::string> out;
  const auto v = view_.load();
  for (const FleetMember& m : v->members) {
    std::lock_guard lock(m.rt->mu);
    for (const std::string& model : m.rt->models) {
      if (std::find(out.begin(), out.end(), model) == out.end()) out.push_back(model);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Fleet::ModelLookup Fleet::lookup(std::string_view model) const {
  ModelLookup out;
  const auto v = view_.load();
  for (const FleetMember& m : v->members) {
    std::lock_guard lock(m.rt->mu);
    out.models_known = out.models_known || !m.rt->models.empty();
    if (model.empty()) continue;
    out.served = out.served ||
                 std::find(m.rt->models.begin(), m.rt->models.end(), model) != m.rt->models.end();
    out.adapter = out.adapter || std::find(m.rt->adapters.begin(), m.rt->adapters.end(), model) !=
                                     m.rt->adapters.end();
  }
  return out;
}

void Fleet::probe(const FleetMember& member, bool block_size) {
  // Asks a worker what it serves (/v1/models) and its block size (/metrics:
  // vllm:cache_config_info{block_size=...}), so static workers need no extra flags.
  const uint32_t router_block_size = options_.block_size;
  auto task = [this, member, router_block_size, block_size]() -> net::awaitable<void> {
    http::Request models_req;
    models_req.target = "/v1/models";
    auto models = co_await client_.request(member.endpoint, std::move(models_req));
    if (models.ok() && models->status == 200) {
      boost::system::error_code ec;
      const boost::json::value v = boost::json::parse(models->body, ec);
      std::vector<std::string> names;
      std::vector<std::string> adapters;
      if (!ec && v.is_object()) {
        const boost::json::value* data = v.get_object().if_contains("data");
        if (data && data->is_array()) {
          for (const boost::json::value& d : data->get_array()) {
            if (!d.is_object()) continue;
            const boost::json::value* id = d.get_object().if_contains("id");
            if (!id || !id->is_string()) continue;
            names.emplace_back(id->get_string());
            // vLLM lists each LoRA adapter with its base model as `parent` (null for the base).
            const boost::json::value* parent = d.get_object().if_contains("parent");
            if (parent && parent->is_string() && parent->get_string() != id->get_string()) {
              adapters.emplace_back(id->get_string());
            }
          }
        }
      }
      if (!names.empty()) {
        bool changed = false;
        {
          std::lock_guard lock(member.rt->mu);
          changed = !member.rt->models.empty() && member.rt->models != names;
          member.rt->models = names;
          member.rt->adapters = std::move(adapters);
        }
        if (changed) {
          std::string list;
          for (const std::string& n : names) list += (list.empty() ? "" : ",") + n;
          INFERA_LOG(kInfo, "fleet").msg("a worker's models changed").kv("worker", member.info.id)
              .kv("models", list);
        }
      }
    }
    if (!block_size) co_return;
    http::Request metrics_req;
    metrics_req.target = "/metrics";
    auto scraped = co_await client_.request(member.endpoint, std::move(metrics_req));
    if (!scraped.ok() || scraped->status != 200) co_return;
    auto samples = metrics::parse_text(scraped->body);
    if (!samples.ok()) co_return;
    for (const metrics::Sample& s : *samples) {
      if (s.name != "vllm:cache_config_info") continue;
      const std::string bs(s.label("block_size"));
      uint32_t reported = 0;
      try {
        reported = static_cast<uint32_t>(std::stoul(bs));
      } catch (...) {  // untrusted label text
        co_return;
      }
      {
        std::lock_guard lock(member.rt->mu);
        member.rt->block_size = reported;
      }
      if (reported != 0 && reported != router_block_size) {
        refuse(member, "block size " + bs + " differs from the router's " +
                           std::to_string(router_block_size));
      }
    }
  };
  net::co_spawn(loop_.context(), std::move(task),
                [id = member.info.id](const std::exception_ptr& e) {
                  if (e) {
                    INFERA_LOG(kWarn, "fleet").msg("probing a worker failed").kv("worker", id);
                  }
                });
}

}  // namespace infera::gateway
