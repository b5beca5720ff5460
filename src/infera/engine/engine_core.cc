#include "infera/engine/engine_core.h"

#include <algorithm>
#include <string>
#include <utility>

#include "infera/common/check.h"

// The scheduler and cache manager follow vLLM v1 (vllm/v1/core/sched/scheduler.py schedule()
// and update_from_output(), vllm/v1/core/kv_cache_manager.py get_computed_blocks() and
// allocate_slots(), vllm/v1/core/block_pool.py), with one KV-cache group of full attention.

namespace infera::engine {

struct EngineCore::Request {
  RequestId id = 0;
  Nanos arrival{0};
  std::vector<TokenId> tokens;         // prompt, then generated tokens
  std::vector<uint64_t> block_hashes;  // engine hashes of every full block of `tokens`
  std::string lora_name;               // a LoRA adapter's request: its name
  uint64_t hash_root = 0;              // the parent of block 0 (EngineBlockHasher::root)
  std::vector<uint32_t> blocks;        // block table
  uint64_t prompt_key = 0;
  uint32_t num_prompt_tokens = 0;
  uint32_t max_tokens = 0;
  uint32_t min_tokens = 0;
  uint32_t eos_index = UINT32_MAX;   // output position of EOS, UINT32_MAX: never
  uint32_t num_computed_tokens = 0;  // KV computed, or being computed by the in-flight step
  uint32_t num_cached_blocks = 0;    // leading blocks registered in the prefix cache
  int64_t num_cached_tokens = -1;    // prefix hit at first scheduling; -1 until then
  uint32_t num_scheduled_tokens = 0;
  uint32_t num_preemptions = 0;
  RequestStatus status = RequestStatus::kWaiting;
  bool ignore_eos = false;
  bool hold_kv = false;
  bool remote_kv = false;
  bool kv_loaded = false;   // remote_kv: the pull is done
  Nanos kv_ready_at{0};     // remote_kv: when the pull in progress completes
  bool prefilled = false;  // the (re)prefill is done: each step now decodes one token
  bool aborted = false;
  bool finished = false;

  uint32_t num_tokens() const { return static_cast<uint32_t>(tokens.size()); }
  uint32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
};

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kNone:
      break;
  }
  return "";
}

void StepOutput::clear() {
  ran_step = false;
  step = 0;
  start = end = Nanos(0);
  shape = StepShape{};
  num_scheduled = num_preempted = 0;
  outputs.clear();
  kv_events.ts = 0;
  kv_events.events.clear();
  kv_events.dp_rank.reset();
}

EngineCore::EngineCore(EngineConfig config, const Clock& clock)
    : config_(std::move(config)),
      clock_(clock),
      max_model_len_(effective_max_model_len(config_)),
      timing_(config_.speedup_ratio),
      hasher_(config_.hash_seed),
      output_(OutputModelOptions{config_.output_seed, config_.vocab_size, config_.eos_token_id,
                                 config_.natural_output_min, config_.natural_output_max}),
      pool_(config_.num_gpu_blocks),
      free_at_(clock.now()) {
  INFERA_CHECK(validate(config_).ok());
}

EngineCore::~EngineCore() = default;

uint32_t EngineCore::acquire_slot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  slots_.emplace_back();
  return static_cast<uint32_t>(slots_.size() - 1);
}

void EngineCore::release_slot(uint32_t slot) {
  id_to_slot_.erase(slots_[slot].id);
  free_slots_.push_back(slot);
}

Status EngineCore::add_request(const RequestSpec& spec) {
  if (spec.prompt.empty()) return invalid_argument("the prompt is empty");
  if (spec.max_tokens == 0) return invalid_argument("max_tokens must be at least 1");
  if (spec.min_tokens > spec.max_tokens) {
    return invalid_argument("min_tokens (" + std::to_string(spec.min_tokens) +
                            ") must be less than or equal to max_tokens (" +
                            std::to_string(spec.max_tokens) + ")");
  }
  if (spec.prompt.size() + uint64_t{spec.max_tokens} > max_model_len_) {
    return invalid_argument("This model's maximum context length is " +
                            std::to_string(max_model_len_) + " tokens. However, you requested " +
                            std::to_string(spec.prompt.size() + spec.max_tokens) + " tokens (" +
                            std::to_string(spec.prompt.size()) + " in the messages, " +
                            std::to_string(spec.max_tokens) + " in the completion).");
  }
  if (id_to_slot_.contains(spec.id)) {
    return invalid_argument("request id " + std::to_string(spec.id) + " is already in use");
  }

  const uint32_t slot = acquire_slot();
  Request& r = slots_[slot];
  r.id = spec.id;
  r.arrival = clock_.now();
  r.tokens.assign(spec.prompt.begin(), spec.prompt.end());
  r.tokens.reserve(spec.prompt.size() + std::min<uint32_t>(spec.max_tokens, 1024));
  r.block_hashes.clear();
  r.lora_name.assign(spec.lora_name);
  r.hash_root = hasher_.root(spec.lora_name);
  hasher_.extend(r.tokens, config_.block_size, r.block_hashes, r.hash_root);
  r.blocks.clear();
  r.prompt_key = output_.prompt_key(spec.prompt);
  r.num_prompt_tokens = static_cast<uint32_t>(spec.prompt.size());
  r.max_tokens = spec.max_tokens;
  r.min_tokens = spec.min_tokens;
  r.eos_index = output_.eos_index(r.prompt_key, spec.min_tokens, spec.ignore_eos);
  r.num_computed_tokens = 0;
  r.num_cached_blocks = 0;
  r.num_cached_tokens = -1;
  r.num_scheduled_tokens = 0;
  r.num_preemptions = 0;
  r.status = RequestStatus::kWaiting;
  r.ignore_eos = spec.ignore_eos;
  r.hold_kv = spec.hold_kv;
  r.remote_kv = spec.remote_kv;
  r.kv_loaded = false;
  r.kv_ready_at = Nanos(0);
  r.prefilled = r.aborted = r.finished = false;

  id_to_slot_.try_emplace(spec.id, slot);
  waiting_.push_back(slot);
  return ok_status();
}

bool EngineCore::abort(RequestId id) {
  const uint32_t* found = id_to_slot_.find(id);
  if (!found) return false;
  stalled_ = false;
  const uint32_t slot = *found;
  Request& r = slots_[slot];
  if (r.aborted || r.finished) return false;
  r.aborted = true;
  ++metrics_.requests_aborted;
  if (r.status == RequestStatus::kWaiting) {
    // Waiting requests hold no blocks (preemption freed them).
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), slot));
    release_slot(slot);
  } else if (r.status == RequestStatus::kTransferring) {
    // A pull in progress is in no step: its blocks are freed now.
    free_blocks(r);
    transferring_.erase(std::find(transferring_.begin(), transferring_.end(), slot));
    release_slot(slot);
  } else if (!in_flight_) {
    // At a step boundary (a step was delivered, the next not started yet) a running request
    // is in no step: free it now.
    free_blocks(r);
    running_.erase(std::find(running_.begin(), running_.end(), slot));
    release_slot(slot);
  }
  return true;
}

bool EngineCore::reset_prefix_cache(bool reset_running_requests) {
  stalled_ = false;
  if (in_flight_ || !running_.empty() || !transferring_.empty() || !held_.empty()) {
    if (!reset_running_requests) return false;
    if (in_flight_) {
      reset_pending_ = true;
      return true;
    }
    while (!running_.empty()) {
      const uint32_t slot = running_.back();
      running_.pop_back();
      preempt(slot);
    }
    drop_transfers();
  }
  reset_cache_now();
  if (config_.enable_kv_events && config_.enable_prefix_caching) {
    idle_events_.emplace_back(events::AllBlocksCleared{});
  }
  return true;
}

void EngineCore::reset_cache_now() {
  const bool reset = pool_.reset();
  INFERA_CHECK(reset);  // every request's blocks were freed before
  for (const uint32_t slot : waiting_) slots_[slot].num_cached_blocks = 0;
}

std::optional<Nanos> EngineCore::next_event_time() const {
  if (!idle_events_.empty()) return clock_.now();
  if (in_flight_) return step_end_;
  if (!running_.empty()) return free_at_;
  std::optional<Nanos> next = next_transfer_end();
  if (!waiting_.empty() && !stalled_) {
    const Nanos arrival = slots_[waiting_.front()].arrival;
    next = next ? std::min(*next, arrival) : arrival;
  }
  if (!next) return std::nullopt;
  return std::max(free_at_, *next);
}

std::optional<Nanos> EngineCore::next_transfer_end() const {
  std::optional<Nanos> next;
  for (const uint32_t slot : transferring_) {
    const Nanos at = slots_[slot].kv_ready_at;
    if (!next || at < *next) next = at;
  }
  return next;
}

bool EngineCore::poll(StepOutput& out) {
  out.clear();
  const Nanos now = clock_.now();
  if (!idle_events_.empty()) {
    out.start = out.end = now;
    out.kv_events.ts = to_seconds(now);
    out.kv_events.events.swap(idle_events_);
    idle_events_.clear();
    return true;
  }
  try_start(now);
  if (!in_flight_ || step_end_ > now) return false;
  // Return at the step boundary: the next step starts on the following call (back-dated to this
  // end), so between the two calls the cache holds exactly what the delivered events say.
  complete_step(out);
  return true;
}

void EngineCore::try_start(Nanos now) {
  if (in_flight_) return;
  // Scheduling can come out empty only when it preempted every running request; the second
  // attempt then admits from the waiting queue.
  for (int attempt = 0; attempt < 2; ++attempt) {
    Nanos start;
    if (!running_.empty()) {
      start = free_at_;
    } else {
      std::optional<Nanos> next = next_transfer_end();
      if (!waiting_.empty() && !stalled_) {
        const Nanos arrival = slots_[waiting_.front()].arrival;
        next = next ? std::min(*next, arrival) : arrival;
      }
      if (!next) return;
      start = std::max(free_at_, *next);
    }
    if (start > now) return;
    finish_transfers(start);
    schedule(start);
    if (!scheduled_.empty()) {
      shape_.kv_usage = pool_.usage();
      step_start_ = start;
      step_end_ = start + timing_.step_duration(shape_);
      in_flight_ = true;
      stalled_ = false;
      return;
    }
  }
  // Nothing runs and the queue's head does not fit: it waits for blocks (held by pulls in
  // progress, or by held prefills), not for the clock.
  stalled_ = running_.empty() && !waiting_.empty();
}

void EngineCore::schedule(Nanos start) {
  const uint32_t bs = config_.block_size;
  uint32_t token_budget = config_.max_num_batched_tokens;
  scheduled_.clear();
  shape_ = StepShape{};
  step_preempted_ = 0;

  // Running requests first: a decode token each, or the next chunk of a prefill.
  size_t i = 0;
  while (i < running_.size() && token_budget > 0) {
    const uint32_t slot = running_[i];
    Request& r = slots_[slot];
    uint32_t num_new = r.num_tokens() - r.num_computed_tokens;
    num_new = std::min(num_new, token_budget);
    num_new = std::min(num_new, max_model_len_ - r.num_computed_tokens);
    if (num_new == 0) {
      ++i;
      continue;
    }
    bool can_schedule = true;
    while (!allocate_slots(r, num_new, {}, 0)) {
      // Out of blocks: preempt the lowest-priority (last) running request, by recompute.
      const uint32_t victim = running_.back();
      running_.pop_back();
      preempt(victim);
      if (victim == slot) {
        can_schedule = false;
        break;
      }
    }
    if (!can_schedule) break;
    if (r.prefilled) {
      ++shape_.decode_rows;
    } else {
      shape_.prefill_tokens += num_new;
    }
    r.num_scheduled_tokens = num_new;
    r.num_computed_tokens += num_new;
    scheduled_.push_back(slot);
    token_budget -= num_new;
    ++i;
  }

  // Then waiting requests, in order, unless this step had to preempt.
  while (step_preempted_ == 0 && !waiting_.empty() && token_budget > 0) {
    if (running_.size() >= config_.max_num_seqs) break;
    const uint32_t slot = waiting_.front();
    Request& r = slots_[slot];
    if (r.arrival > start) break;
    if (r.remote_kv && !r.kv_loaded) {
      if (!start_transfer(slot, start)) break;
      continue;
    }
    find_cache_hit(r);
    const auto num_hit_tokens = static_cast<uint32_t>(computed_.size()) * bs;
    const uint32_t num_new = std::min(r.num_tokens() - num_hit_tokens, token_budget);
    if (!allocate_slots(r, num_new, computed_, num_hit_tokens)) break;
    waiting_.pop_front();
    running_.push_back(slot);
    r.status = RequestStatus::kRunning;
    if (config_.enable_prefix_caching) {
      ++metrics_.prefix_cache_requests;
      metrics_.prefix_cache_queries += r.num_tokens();
      metrics_.prefix_cache_hits += num_hit_tokens;
    }
    if (r.num_cached_tokens < 0) r.num_cached_tokens = num_hit_tokens;
    r.num_computed_tokens = num_hit_tokens + num_new;
    r.num_scheduled_tokens = num_new;
    shape_.prefill_tokens += num_new;
    scheduled_.push_back(slot);
    token_budget -= num_new;
  }
}

void EngineCore::find_cache_hit(const Request& r) {
  computed_.clear();
  if (!config_.enable_prefix_caching) return;
  // The last token is always recomputed, to produce the logits of the next one.
  const size_t max_blocks = (r.num_tokens() - 1) / config_.block_size;
  const size_t n = std::min(max_blocks, r.block_hashes.size());
  for (size_t b = 0; b < n; ++b) {
    const uint32_t block = pool_.find_cached(r.block_hashes[b]);
    if (block == BlockPool::kNone) break;
    computed_.push_back(block);
  }
}

// vLLM's NIXL decode side (Scheduler.schedule with load_kv_async, then
// _update_waiting_for_remote_kv): the prompt's blocks are allocated now, the locally cached
// prefix counted as a hit, the rest pulled; the blocks are cached only once the pull is done.
bool EngineCore::start_transfer(uint32_t slot, Nanos start) {
  Request& r = slots_[slot];
  find_cache_hit(r);
  const auto num_hit_tokens = static_cast<uint32_t>(computed_.size()) * config_.block_size;
  if (!allocate_slots(r, r.num_tokens() - num_hit_tokens, computed_, num_hit_tokens,
                      /*cache=*/false)) {
    return false;
  }
  waiting_.pop_front();
  r.status = RequestStatus::kTransferring;
  if (config_.enable_prefix_caching) {
    ++metrics_.prefix_cache_requests;
    metrics_.prefix_cache_queries += r.num_tokens();
    metrics_.prefix_cache_hits += num_hit_tokens;
  }
  const auto pulled = static_cast<uint32_t>(r.blocks.size() - computed_.size());
  r.kv_ready_at = start + timing_.transfer_duration(uint64_t{pulled} * config_.kv_block_bytes,
                                                    config_.kv_transfer_bandwidth_gb_s);
  ++metrics_.kv_pulls;
  metrics_.kv_pulled_blocks += pulled;
  transferring_.push_back(slot);
  return true;
}

// Pulls done by `until` join the running requests with every prompt token but the last
// computed (vLLM recomputes it to sample the first token); their blocks enter the prefix cache
// now, so this step's events carry them.
void EngineCore::finish_transfers(Nanos until) {
  size_t kept = 0;
  for (const uint32_t slot : transferring_) {
    Request& r = slots_[slot];
    if (r.kv_ready_at > until) {
      transferring_[kept++] = slot;
      continue;
    }
    r.kv_loaded = true;
    r.status = RequestStatus::kRunning;
    const uint32_t loaded = r.num_tokens() - 1;
    if (config_.enable_prefix_caching) cache_blocks(r, loaded);
    r.num_computed_tokens = loaded;
    // Full blocks only, as cached_tokens counts them.
    if (r.num_cached_tokens < 0) r.num_cached_tokens = loaded - loaded % config_.block_size;
    running_.push_back(slot);
  }
  transferring_.resize(kept);
}

// Requests pulling their blocks go back to waiting (to pull again); held prefill blocks are
// freed. Before a prefix-cache reset.
void EngineCore::drop_transfers() {
  for (const uint32_t slot : transferring_) {
    Request& r = slots_[slot];
    free_blocks(r);
    r.num_computed_tokens = 0;
    r.status = RequestStatus::kWaiting;
    waiting_.push_front(slot);
  }
  transferring_.clear();
  for (auto& [id, blocks] : held_) pool_.release(blocks);
  held_.clear();
}

const std::vector<uint32_t>* EngineCore::held_blocks(RequestId id) const {
  auto it = held_.find(id);
  return it == held_.end() ? nullptr : &it->second;
}

bool EngineCore::release_held(RequestId id) {
  auto it = held_.find(id);
  if (it == held_.end()) return false;
  stalled_ = false;
  pool_.release(it->second);
  held_.erase(it);
  return true;
}

bool EngineCore::allocate_slots(Request& r, uint32_t num_new_tokens,
                                std::span<const uint32_t> computed,
                                uint32_t num_new_computed_tokens, bool cache) {
  const uint32_t bs = config_.block_size;
  const uint32_t num_computed = r.num_computed_tokens + num_new_computed_tokens;
  const uint32_t need_tokens = std::min(num_computed + num_new_tokens, max_model_len_);
  const int64_t required = (int64_t{need_tokens} + bs - 1) / bs;
  const int64_t num_new_blocks =
      required - static_cast<int64_t>(computed.size()) - static_cast<int64_t>(r.blocks.size());
  int64_t evictable_hits = 0;  // free cached blocks a hit takes out of the free queue
  for (const uint32_t b : computed) evictable_hits += pool_.ref_count(b) == 0 ? 1 : 0;
  if (num_new_blocks + evictable_hits > int64_t{pool_.num_free()}) return false;

  if (!computed.empty()) {
    pool_.touch(computed);
    r.blocks.insert(r.blocks.end(), computed.begin(), computed.end());
    r.num_cached_blocks = static_cast<uint32_t>(computed.size());
  }
  if (num_new_blocks > 0) {
    evicted_.clear();
    pool_.allocate(static_cast<uint32_t>(num_new_blocks), r.blocks, evicted_);
    emit_removed(evicted_);
  }
  if (config_.enable_prefix_caching && cache) {
    cache_blocks(r, std::min(num_computed + num_new_tokens, r.num_tokens()));
  }
  return true;
}

void EngineCore::cache_blocks(Request& r, uint32_t num_tokens) {
  const uint32_t bs = config_.block_size;
  const uint32_t first = r.num_cached_blocks;
  const uint32_t full = num_tokens / bs;
  if (first >= full) return;
  INFERA_CHECK(full <= r.block_hashes.size() && full <= r.blocks.size());
  for (uint32_t b = first; b < full; ++b) pool_.cache(r.blocks[b], r.block_hashes[b]);
  r.num_cached_blocks = full;
  if (!config_.enable_kv_events) return;
  // One BlockStored per newly cached run of one request, chained to the block before it.
  events::BlockStored stored;
  stored.block_hashes.assign(r.block_hashes.begin() + first, r.block_hashes.begin() + full);
  if (first > 0) stored.parent_block_hash = r.block_hashes[first - 1];
  stored.token_ids.assign(r.tokens.begin() + static_cast<ptrdiff_t>(size_t{first} * bs),
                          r.tokens.begin() + static_cast<ptrdiff_t>(size_t{full} * bs));
  stored.block_size = bs;
  stored.medium = "GPU";
  stored.group_idx = 0;
  stored.kv_cache_spec_kind = "full_attention";
  stored.extra_keys_count = full - first;  // [None] per block
  if (!r.lora_name.empty()) stored.lora_name = r.lora_name;
  step_events_.emplace_back(std::move(stored));
}

void EngineCore::emit_removed(std::span<const uint64_t> hashes) {
  if (!config_.enable_kv_events) return;
  for (const uint64_t h : hashes) {
    events::BlockRemoved removed;
    removed.block_hashes.push_back(h);
    removed.medium = "GPU";
    removed.group_idx = 0;
    step_events_.emplace_back(std::move(removed));
  }
}

void EngineCore::free_blocks(Request& r) {
  pool_.release(r.blocks);
  r.blocks.clear();
  r.num_cached_blocks = 0;
}

void EngineCore::preempt(uint32_t slot) {
  Request& r = slots_[slot];
  free_blocks(r);
  r.num_computed_tokens = 0;
  r.prefilled = false;
  r.status = RequestStatus::kWaiting;
  ++r.num_preemptions;
  ++metrics_.num_preemptions;
  ++step_preempted_;
  waiting_.push_front(slot);
}

void EngineCore::complete_step(StepOutput& out) {
  const uint32_t bs = config_.block_size;
  out.ran_step = true;
  out.step = metrics_.steps++;
  out.start = step_start_;
  out.end = step_end_;
  out.shape = shape_;
  out.num_scheduled = static_cast<uint32_t>(scheduled_.size());
  out.num_preempted = step_preempted_;

  bool any_done = false;
  for (const uint32_t slot : scheduled_) {
    Request& r = slots_[slot];
    if (r.aborted) {
      any_done = true;
      continue;
    }
    if (r.num_computed_tokens < r.num_tokens()) continue;  // a chunk of a longer prefill
    const uint32_t index = r.num_output_tokens();
    const TokenId token =
        index == r.eos_index ? output_.eos_token_id() : output_.token_at(r.prompt_key, index);
    r.tokens.push_back(token);
    if (r.tokens.size() % bs == 0) hasher_.extend(r.tokens, bs, r.block_hashes, r.hash_root);
    r.prefilled = true;

    // vLLM check_stop: the length cap first, then EOS (already held back until min_tokens).
    FinishReason finish = FinishReason::kNone;
    if (r.num_tokens() >= max_model_len_ || index + 1 >= r.max_tokens) {
      finish = FinishReason::kLength;
    } else if (index == r.eos_index) {
      finish = FinishReason::kStop;
    }

    ++metrics_.generation_tokens;
    if (index == 0) {
      metrics_.prompt_tokens += r.num_prompt_tokens;
      metrics_.time_to_first_token.observe(to_seconds(step_end_ - r.arrival));
    }
    out.outputs.push_back(
        RequestOutput{r.id, token, index, r.num_prompt_tokens,
                      static_cast<uint32_t>(std::max<int64_t>(0, r.num_cached_tokens)), finish});
    if (finish != FinishReason::kNone) {
      r.finished = true;
      any_done = true;
      if (finish == FinishReason::kStop) {
        ++metrics_.requests_finished_stop;
      } else {
        ++metrics_.requests_finished_length;
      }
      if (r.hold_kv) {
        // Kept for the remote decode to pull (vLLM's connector delays the free).
        held_[r.id] = std::move(r.blocks);
        r.blocks.clear();
        r.num_cached_blocks = 0;
      } else {
        free_blocks(r);  // in completion order, as vLLM frees inside update_from_output
      }
    }
  }

  if (any_done || !running_.empty()) {
    // Drop finished and aborted requests from the running list, keeping its order.
    size_t kept = 0;
    for (const uint32_t slot : running_) {
      Request& r = slots_[slot];
      if (r.finished || r.aborted) {
        if (r.aborted) free_blocks(r);
        release_slot(slot);
        continue;
      }
      running_[kept++] = slot;
    }
    running_.resize(kept);
  }

  in_flight_ = false;
  free_at_ = step_end_;

  if (reset_pending_) {
    reset_pending_ = false;
    while (!running_.empty()) {
      const uint32_t slot = running_.back();
      running_.pop_back();
      preempt(slot);
    }
    drop_transfers();
    reset_cache_now();
    if (config_.enable_kv_events && config_.enable_prefix_caching) {
      step_events_.emplace_back(events::AllBlocksCleared{});
    }
  }

  out.kv_events.ts = to_seconds(step_end_);
  out.kv_events.events.swap(step_events_);
  step_events_.clear();
}

std::optional<RequestState> EngineCore::request_state(RequestId id) const {
  const uint32_t* found = id_to_slot_.find(id);
  if (!found) return std::nullopt;
  const Request& r = slots_[*found];
  RequestState s;
  s.status = r.status;
  s.prompt_tokens = r.num_prompt_tokens;
  s.output_tokens = r.num_output_tokens();
  s.computed_tokens = r.num_computed_tokens;
  s.cached_tokens = static_cast<uint32_t>(std::max<int64_t>(0, r.num_cached_tokens));
  s.held_blocks = static_cast<uint32_t>(r.blocks.size());
  s.preemptions = r.num_preemptions;
  s.aborted = r.aborted;
  return s;
}

EngineMetrics EngineCore::metrics() const {
  EngineMetrics m = metrics_;
  m.kv_cache_usage = pool_.usage();
  m.num_running = static_cast<uint32_t>(running_.size());
  m.num_waiting = static_cast<uint32_t>(waiting_.size());
  m.num_transferring = static_cast<uint32_t>(transferring_.size());
  m.num_held_for_transfer = static_cast<uint32_t>(held_.size());
  return m;
}

void EngineCore::block_hashes(std::span<const TokenId> tokens, std::vector<uint64_t>& out) const {
  out.clear();
  hasher_.extend(tokens, config_.block_size, out);
}

uint32_t EngineCore::cached_prefix_blocks(std::span<const TokenId> tokens) const {
  const uint32_t bs = config_.block_size;
  uint64_t parent = hasher_.none_hash();
  uint32_t n = 0;
  for (size_t b = 0; (b + 1) * bs <= tokens.size(); ++b) {
    parent = hasher_.hash_block(parent, tokens.subspan(b * bs, bs));
    if (pool_.find_cached(parent) == BlockPool::kNone) break;
    ++n;
  }
  return n;
}

}  // namespace infera::engine
