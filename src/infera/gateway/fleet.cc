#include "infera/gateway/fleet.h"

#include <algorithm>
#include <boost/json.hpp>
#include <map>

#include "infera/common/log.h"
#include "infera/common/metrics.h"
#include "infera/gateway/engine_poller.h"
#include "infera/http/net.h"
#include "infera/nats/subjects.h"

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

// could_serve but for the model, which the caller has checked.
bool fits(bool refused, discovery::Role role, kv::WorkerId slot, routing::Stage stage,
          bool split_fleet, const std::vector<kv::WorkerId>& skip) {
  return !refused && role_fits(role, stage, split_fleet) &&
         std::find(skip.begin(), skip.end(), slot) == skip.end();
}

bool test_bit(const std::vector<uint64_t>& bits, size_t i) {
  return (bits[i / 64] >> (i % 64)) & 1u;
}

void set_bit(std::vector<uint64_t>& bits, size_t i) {
  bits[i / 64] |= uint64_t{1} << (i % 64);
}

std::vector<FleetMember> sorted_by_id(std::vector<FleetMember> members) {
  std::sort(members.begin(), members.end(),
            [](const FleetMember& a, const FleetMember& b) { return a.info.id < b.info.id; });
  return members;
}

}  // namespace

bool FleetMember::serves(std::string_view model) const {
  if (model.empty() || models.empty()) return true;  // unknown yet: do not turn traffic away
  return std::find(models.begin(), models.end(), model) != models.end();
}

FleetView::FleetView(std::vector<FleetMember> m) : members(sorted_by_id(std::move(m))) {
  const size_t words = (members.size() + 63) / 64;
  unknown_.assign(words, 0);
  std::map<std::string_view, ModelEntry> by_name;
  rows_.reserve(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    const FleetMember& w = members[i];
    rows_.push_back({w.rt.get(), w.slot, w.info.role, discovery::pd_protocol(w.info), w.refused()});
    if (w.slot >= slot_index_.size()) slot_index_.resize(w.slot + 1, kNoMember);
    slot_index_[w.slot] = static_cast<uint32_t>(i);
    const bool routable = !w.refused();
    const bool prefill = routable && w.info.role == discovery::Role::kPrefill;
    const bool decode = routable && w.info.role == discovery::Role::kDecode;
    prefill_ = prefill_ || prefill;
    decode_ = decode_ || decode;
    if (w.models.empty()) {
      set_bit(unknown_, i);
      prefill_unknown_ = prefill_unknown_ || prefill;
      decode_unknown_ = decode_unknown_ || decode;
      continue;
    }
    models_known_ = true;
    for (const std::string& name : w.models) {
      ModelEntry& e = by_name[name];
      if (e.served_by.empty()) {
        e.name = name;
        e.served_by.assign(words, 0);
      }
      set_bit(e.served_by, i);
      e.prefill = e.prefill || prefill;
      e.decode = e.decode || decode;
    }
    for (const std::string& name : w.adapters) {
      auto it = by_name.find(name);
      if (it != by_name.end()) it->second.adapter = true;  // adapters are among its models
    }
  }
  models_.reserve(by_name.size());
  for (auto& [name, e] : by_name) {
    for (size_t k = 0; k < words; ++k) e.served_by[k] |= unknown_[k];
    models_.push_back(std::move(e));
  }
}

const FleetMember* FleetView::find(std::string_view id) const {
  auto it =
      std::lower_bound(members.begin(), members.end(), id,
                       [](const FleetMember& m, std::string_view v) { return m.info.id < v; });
  return it != members.end() && it->info.id == id ? &*it : nullptr;
}

const FleetMember* FleetView::by_slot(kv::WorkerId slot) const {
  if (slot >= slot_index_.size() || slot_index_[slot] == kNoMember) return nullptr;
  return &members[slot_index_[slot]];
}

const FleetView::ModelEntry* FleetView::entry(std::string_view model) const {
  auto it = std::lower_bound(models_.begin(), models_.end(), model,
                             [](const ModelEntry& e, std::string_view v) { return e.name < v; });
  return it != models_.end() && it->name == model ? &*it : nullptr;
}

const std::vector<uint64_t>* FleetView::served_by(std::string_view model) const {
  if (model.empty()) return nullptr;
  const ModelEntry* e = entry(model);
  return e ? &e->served_by : &unknown_;
}

bool FleetView::split(std::string_view model) const {
  if (model.empty()) return prefill_ && decode_;
  const ModelEntry* e = entry(model);
  return (prefill_unknown_ || (e && e->prefill)) && (decode_unknown_ || (e && e->decode));
}

ModelLookup FleetView::lookup(std::string_view model) const {
  ModelLookup out;
  out.models_known = models_known_;
  if (model.empty()) return out;
  const ModelEntry* e = entry(model);
  out.served = e != nullptr;
  out.adapter = e && e->adapter;
  return out;
}

std::vector<std::string> FleetView::models() const {
  std::vector<std::string> out;
  out.reserve(models_.size());
  for (const ModelEntry& e : models_) out.push_back(e.name);
  return out;
}

bool FleetView::speaks(kv::WorkerId slot, discovery::PdProtocol protocol) const {
  if (slot >= slot_index_.size() || slot_index_[slot] == kNoMember) return false;
  return rows_[slot_index_[slot]].protocol == protocol;
}

std::string listener_topic(const discovery::WorkerInfo& info) {
  return info.topic.empty() ? info.id : info.topic;
}

bool could_serve(const FleetMember& m, std::string_view model, routing::Stage stage,
                 bool split_fleet, const std::vector<kv::WorkerId>& skip) {
  return fits(m.refused(), m.info.role, m.slot, stage, split_fleet, skip) && m.serves(model);
}

void keep_protocol(const FleetView& view, discovery::PdProtocol protocol,
                   std::vector<kv::WorkerId>& slots) {
  std::erase_if(slots, [&](kv::WorkerId slot) { return !view.speaks(slot, protocol); });
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
          EnginePoller::Options{.interval = options.engine_metrics_interval, .via = options.control},
          signals, load, loop,
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
  if (!info.model.empty()) m.models = {info.model};
  m.block_size = info.block_size;
  index_.add_worker(m.slot);
  if (info.block_size != 0 && info.block_size != options_.block_size) {
    mark_refused(m, "block size " + std::to_string(info.block_size) +
                        " differs from the router's " + std::to_string(options_.block_size));
  }
  if (options_.nats_events != nullptr) {
    const Status added = options_.nats_events->add_worker({m.slot, info.id, {}});
    if (!added.ok()) {
      INFERA_LOG(kError, "fleet").msg("cannot follow the worker's KV events over NATS; routing by load only")
          .kv("worker", info.id).kv("error", added.message());
    }
  } else if (info.kv_endpoint.empty() && options_.kv_listener != nullptr) {
    const Status added = options_.kv_listener->add_worker(
        {m.slot, info.id, listener_topic(info), info.replay_endpoint, {}});
    if (added.ok()) {
      m.rt->on_listener = true;
    } else {
      INFERA_LOG(kError, "fleet").msg("cannot hear the worker's KV events on --kv-events-bind; "
                                      "routing by load only (give each worker its own topic=)")
          .kv("worker", info.id).kv("topic", listener_topic(info)).kv("error", added.message());
    }
  } else if (!info.kv_endpoint.empty()) {
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
  seed_stream(m);
  INFERA_LOG(kInfo, "fleet").msg("worker joined").kv("worker", info.id)
      .kv("role", discovery::role_name(info.role)).kv("slot", m.slot)
      .kv("kv_events", event_source(m));
  if (m.endpoint.port != 0) probe(m);
  if (!m.refused()) poller_->start(m);  // a refused worker is never routed: its load is moot
  return m;
}

void Fleet::seed_stream(const FleetMember& m) {
  if (!options_.seed) return;
  const bool has_stream = options_.nats_events != nullptr || m.rt->subscriber != nullptr;
  if (!has_stream) return;
  const std::optional<events::StreamSnapshot> copy = options_.seed(m.info.id);
  if (!copy) return;
  const bool seeded = options_.nats_events != nullptr ? options_.nats_events->seed(m.slot, *copy)
                                                      : m.rt->subscriber->seed(*copy);
  INFERA_LOG(kInfo, "fleet").msg(seeded ? "worker's mirror copied from a sibling replica"
                                        : "a sibling's copy of the worker's mirror came too late; "
                                          "its stream catches up through replay")
      .kv("worker", m.info.id).kv("blocks", copy->dump.gpu.size());
}

std::optional<events::StreamSnapshot> Fleet::stream_snapshot(const FleetMember& m) const {
  if (options_.nats_events != nullptr) return options_.nats_events->snapshot(m.slot);
  if (m.rt->subscriber) return m.rt->subscriber->snapshot();
  return std::nullopt;
}

void Fleet::leave(const FleetMember& m) {
  if (m.rt->subscriber) m.rt->subscriber->stop();
  if (options_.nats_events != nullptr) options_.nats_events->remove_worker(m.slot);
  if (m.rt->on_listener) options_.kv_listener->remove_worker(m.slot);
  poller_->stop(m);  // before the slot is freed: a poll in flight must not record into it
  index_.remove_worker(m.slot);
  load_.remove_worker(m.slot);
  free_slots_.push_back(m.slot);
  if (options_.on_leave) options_.on_leave(m.info.id);
  INFERA_LOG(kInfo, "fleet").msg("worker left").kv("worker", m.info.id).kv("slot", m.slot);
}

void Fleet::update(const discovery::WorkerSetPtr& workers) {
  std::lock_guard lock(update_mu_);
  const auto old = view_.load();
  std::map<std::string, const FleetMember*> current;
  for (const FleetMember& m : old->members) current[m.info.id] = &m;
  std::vector<FleetMember> next;
  std::vector<const FleetMember*> departed;
  std::map<std::string, bool> seen;
  for (const discovery::WorkerInfo& w : *workers) {
    if (seen.count(w.id)) continue;
    seen[w.id] = true;
    auto it = current.find(w.id);
    if (it != current.end() && it->second->info == w) {
      next.push_back(*it->second);  // unchanged: keep slot, mirror, health and what was learned
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
    next.push_back(join(w, std::make_shared<WorkerRuntime>()));
  }
  for (const FleetMember& m : old->members) {
    if (!seen.count(m.info.id)) departed.push_back(&m);
  }
  for (const FleetMember* m : departed) leave(*m);
  view_.store(std::make_shared<const FleetView>(std::move(next)));
}

void Fleet::amend(const WorkerRuntime* rt, const std::function<bool(FleetMember&)>& change) {
  std::lock_guard lock(update_mu_);
  const auto old = view_.load();
  // By runtime, not by id: a probe of a record since replaced must not touch its successor.
  auto it = std::find_if(old->members.begin(), old->members.end(),
                         [rt](const FleetMember& m) { return m.rt.get() == rt; });
  if (it == old->members.end()) return;
  FleetMember changed = *it;
  if (!change(changed)) return;
  std::vector<FleetMember> next = old->members;
  next[static_cast<size_t>(it - old->members.begin())] = std::move(changed);
  view_.store(std::make_shared<const FleetView>(std::move(next)));
}

void Fleet::candidates(const FleetView& view, std::string_view model, routing::Stage stage,
                       const std::vector<kv::WorkerId>& skip, std::vector<kv::WorkerId>& out,
                       bool* at_capacity) const {
  out.clear();
  const int64_t now = clock_.now().count();
  const std::vector<uint64_t>* served_by = view.served_by(model);  // null: every member
  const bool split_fleet = stage == routing::Stage::kAggregated && view.split(model);
  const uint32_t cap = options_.max_inflight_per_worker;
  const std::vector<FleetView::Row>& rows = view.rows_;
  bool capped = false;
  bool backing_off = false;
  // Whether row i may take the request, apart from its backoff; counts the in-flight cap.
  auto eligible = [&](size_t i) {
    const FleetView::Row& r = rows[i];
    if ((served_by && !test_bit(*served_by, i)) ||
        !fits(r.refused, r.role, r.slot, stage, split_fleet, skip)) {
      return false;
    }
    if (cap != 0 && r.rt->inflight.load(std::memory_order_relaxed) >= cap) {
      capped = true;
      return false;
    }
    return true;
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!eligible(i)) continue;
    if (rows[i].rt->excluded_until_ns.load(std::memory_order_relaxed) > now) {
      backing_off = true;
      continue;
    }
    out.push_back(rows[i].slot);
  }
  if (out.empty() && backing_off) {
    // Every healthy worker is in backoff: offer those (a second pass only then, so the usual
    // one allocates nothing beyond `out`).
    for (size_t i = 0; i < rows.size(); ++i) {
      if (eligible(i)) out.push_back(rows[i].slot);
    }
  }
  if (at_capacity) *at_capacity = out.empty() && capped;
}

bool Fleet::split(const FleetView& view, std::string_view model) const {
  return view.split(model);
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
  if (m.refused()) return "refused";
  if (m.rt->excluded_until_ns.load() > clock_.now().count()) return "backoff";
  return "healthy";
}

bool Fleet::mark_refused(FleetMember& m, const std::string& reason) {
  if (m.refused()) return false;
  m.refused_reason = reason;
  poller_->pause(m);  // never routed: its load is moot (its last reading stays for the admin API)
  INFERA_LOG(kError, "fleet").msg("worker refused: it will not be routed").kv("worker", m.info.id)
      .kv("reason", reason);
  return true;
}

std::optional<events::StreamStats> Fleet::event_stats(const FleetMember& member) const {
  if (member.rt->subscriber) return member.rt->subscriber->stats();
  if (options_.nats_events != nullptr) return options_.nats_events->stats(member.slot);
  if (member.rt->on_listener) return options_.kv_listener->stats(member.slot);
  return std::nullopt;
}

std::string Fleet::event_source(const FleetMember& member) const {
  if (options_.nats_events != nullptr) return nats::kv_events_subject(options_.nats_namespace, member.info.id);
  if (member.rt->on_listener) {
    return options_.kv_listener->endpoint() + " (bound; topic " + listener_topic(member.info) + ")";
  }
  return member.info.kv_endpoint.empty() ? "none" : member.info.kv_endpoint;
}

void Fleet::refuse(const FleetMember& member, const std::string& reason) {
  amend(member.rt.get(), [&](FleetMember& m) { return mark_refused(m, reason); });
}

void Fleet::maintain() {
  load_.expire();
  const auto v = view_.load();
  ++maintain_ticks_;
  for (const FleetMember& m : v->members) {
    const std::optional<events::StreamStats> stats = event_stats(m);
    if (stats && !m.refused()) {
      const uint64_t mismatched =
          stats->applied.rejected[static_cast<size_t>(kv::ApplyResult::kBlockSizeMismatch)];
      if (mismatched > 0) {
        refuse(m, "its KV events carry a block size other than the router's " +
                      std::to_string(options_.block_size));
      }
    }
    if (m.endpoint.port == 0) continue;
    const bool unknown = m.models.empty();
    if (unknown && maintain_ticks_ % 10 == 0) {
      probe(m);
    } else if (!unknown && maintain_ticks_ % kModelRefreshTicks == 0) {
      probe(m, /*block_size=*/false);
    }
  }
}

std::vector<std::string> Fleet::models() const {
  return view_.load()->models();
}

Fleet::ModelLookup Fleet::lookup(const FleetView& view, std::string_view model) const {
  return view.lookup(model);
}

Fleet::ModelLookup Fleet::lookup(std::string_view model) const {
  return view_.load()->lookup(model);
}

net::awaitable<http::ClientResult<http::Response>> Fleet::fetch(const http::Endpoint& to,
                                                                http::Request request) {
  if (options_.control == nullptr) co_return co_await client_.request(to, std::move(request));
  co_return co_await options_.control->fetch(to, std::move(request),
                                             clock_.now() + std::chrono::seconds(30));
}

void Fleet::probe(const FleetMember& member, bool block_size) {
  // Asks a worker what it serves (/v1/models) and its block size (/metrics:
  // vllm:cache_config_info{block_size=...}), so static workers need no extra flags. What it
  // learns is published in a new view; a worker that left or was replaced meanwhile is skipped.
  const uint32_t router_block_size = options_.block_size;
  auto task = [this, member, router_block_size, block_size]() -> net::awaitable<void> {
    http::Request models_req;
    models_req.target = "/v1/models";
    auto models = co_await fetch(member.endpoint, std::move(models_req));
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
        amend(member.rt.get(), [&](FleetMember& m) {
          if (m.models == names && m.adapters == adapters) return false;
          if (!m.models.empty() && m.models != names) {
            std::string list;
            for (const std::string& n : names) list += (list.empty() ? "" : ",") + n;
            INFERA_LOG(kInfo, "fleet")
                .msg("a worker's models changed")
                .kv("worker", m.info.id)
                .kv("models", list);
          }
          m.models = std::move(names);
          m.adapters = std::move(adapters);
          return true;
        });
      }
    }
    if (!block_size) co_return;
    http::Request metrics_req;
    metrics_req.target = "/metrics";
    auto scraped = co_await fetch(member.endpoint, std::move(metrics_req));
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
      amend(member.rt.get(), [&](FleetMember& m) {
        bool changed = m.block_size != reported;
        m.block_size = reported;
        if (reported != 0 && reported != router_block_size) {
          changed = mark_refused(m, "block size " + bs + " differs from the router's " +
                                        std::to_string(router_block_size)) ||
                    changed;
        }
        return changed;
      });
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
