#include "infera/events/applier.h"

#include <charconv>

namespace infera::events {
namespace {

bool equals_ascii_nocase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    char y = b[i];
    if (x >= 'a' && x <= 'z') x = static_cast<char>(x - 'a' + 'A');
    if (y >= 'a' && y <= 'z') y = static_cast<char>(y - 'a' + 'A');
    if (x != y) return false;
  }
  return true;
}

}  // namespace

kv::Medium medium_of(const std::optional<std::string>& medium) {
  if (!medium || equals_ascii_nocase(*medium, "GPU")) return kv::Medium::kGpu;
  if (equals_ascii_nocase(*medium, "CPU") || equals_ascii_nocase(*medium, "CPU_TIER1")) {
    return kv::Medium::kCpu;
  }
  return kv::Medium::kDisk;
}

bool is_full_attention(const std::optional<std::string>& kind) {
  // MLA (DeepSeek) is a full-attention spec in vLLM (MLAAttentionSpec extends FullAttentionSpec).
  return !kind || *kind == "full_attention" || *kind == "mla_attention";
}

void ApplyTally::add(const ApplyTally& o) {
  events_applied += o.events_applied;
  blocks_stored += o.blocks_stored;
  blocks_removed += o.blocks_removed;
  clears += o.clears;
  for (size_t i = 0; i < rejected.size(); ++i) rejected[i] += o.rejected[i];
  other_group_events += o.other_group_events;
}

uint64_t ApplyTally::rejected_total() const {
  uint64_t n = 0;
  for (const uint64_t r : rejected) n += r;
  return n;
}

EventApplier::EventApplier(kv::KvIndex& index, kv::WorkerId worker, Options options)
    : index_(index), worker_(worker), options_(options), main_group_(options.main_group) {}

void EventApplier::reset() { main_group_ = options_.main_group; }

bool EventApplier::in_main_group(const std::optional<int64_t>& group) const {
  // No group on the wire: an engine with one KV-cache group (older vLLM, SGLang, offload
  // connectors). Before the main group is known nothing of this life has been mirrored yet, so
  // passing the event on is harmless.
  return !group || !main_group_ || *group == *main_group_;
}

void EventApplier::apply(const EventBatch& batch, ApplyTally& tally) {
  for (const Event& e : batch.events) apply(e, tally);
}

void EventApplier::apply(const Event& event, ApplyTally& tally) {
  if (const auto* s = std::get_if<BlockStored>(&event)) {
    if (!is_full_attention(s->kv_cache_spec_kind)) {
      ++tally.other_group_events;
      return;
    }
    if (s->group_idx && !main_group_) main_group_ = *s->group_idx;
    if (!in_main_group(s->group_idx)) {
      ++tally.other_group_events;
      return;
    }
    kv::StoredEvent e;
    e.worker = worker_;
    e.parent_engine_hash = s->parent_block_hash;
    e.engine_hashes = s->block_hashes;
    e.token_ids = s->token_ids;
    e.block_size = s->block_size;
    e.medium = medium_of(s->medium);
    // vLLM before lora_name (#27577) names an adapter by its integer id only. The router
    // cannot hash a request for it (requests name adapters), but the blocks are not the base
    // model's either: they get a seed of their own that no request produces, so they never
    // pass for base-model blocks in a prefix match.
    char unnamed[32];
    if (s->lora_name) {
      e.lora_name = *s->lora_name;
    } else if (s->lora_id) {
      constexpr std::string_view kPrefix = "\x01lora_id=";
      kPrefix.copy(unnamed, kPrefix.size());
      const auto end = std::to_chars(unnamed + kPrefix.size(), unnamed + sizeof(unnamed),
                                     *s->lora_id).ptr;
      e.lora_name = std::string_view(unnamed, static_cast<size_t>(end - unnamed));
    }
    const kv::ApplyResult result = index_.apply(e);
    if (result == kv::ApplyResult::kApplied) {
      ++tally.events_applied;
      tally.blocks_stored += s->block_hashes.size();
    } else {
      ++tally.rejected[static_cast<size_t>(result)];
    }
    return;
  }
  if (const auto* r = std::get_if<BlockRemoved>(&event)) {
    if (!in_main_group(r->group_idx)) {
      ++tally.other_group_events;
      return;
    }
    const kv::ApplyResult result =
        index_.apply(kv::RemovedEvent{worker_, r->block_hashes, medium_of(r->medium)});
    if (result == kv::ApplyResult::kApplied) {
      ++tally.events_applied;
      tally.blocks_removed += r->block_hashes.size();
    } else {
      ++tally.rejected[static_cast<size_t>(result)];
    }
    return;
  }
  // AllBlocksCleared: vLLM resets the GPU prefix cache; offloaded tiers stay.
  index_.clear_worker(worker_);
  ++tally.events_applied;
  ++tally.clears;
}

}  // namespace infera::events
