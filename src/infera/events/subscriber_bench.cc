// KV events through real ZeroMQ sockets on loopback (issue 4 targets).
//
// BM_ZmqDecodeApply: a publisher thread sends pre-encoded vLLM batches (map encoding) as fast as
// the socket takes them, lossless (XPUB_NODROP: it waits at the high-water mark instead of
// dropping), to one KvEventSubscriber whose single thread receives, decodes, tracks sequences
// and applies to a KvIndex. Every message is a 16-block batch: after 4096 prompts are resident,
// messages alternate between storing a new 16-block prompt and removing the oldest one, so the
// index keeps its size (a full engine cache evicts as fast as it stores). Target: >= 3 M blocks/s
// (stored + removed) on the subscriber thread.
//
// BM_NatsRelayDecodeApply: the same stream over NATS end to end (issue 23 target: >= 3 M
// blocks/s): the ZMQ publisher -> KvEventRelay (worker side) -> a real nats-server (Debian) ->
// NatsEventSource -> the index. NATS has no flow control of its own (core NATS drops for a slow
// consumer), so the sender keeps at most kWindow batches ahead of what the router applied, which
// measures capacity without loss.
//
// BM_HwmOverload: the vLLM-like KvEventPublisher (drops at its HWM, as vLLM's PUB does) blasts a
// burst of batches at a subscriber that cannot keep up; reports what was dropped, how the gaps
// were detected and repaired through replay, whether the replay buffer sufficed (else: stale),
// and whether the mirror ends exact.
#include <benchmark/benchmark.h>

#include <zmq.hpp>

#include <thread>

#include "infera/common/random.h"
#include "infera/events/encoder.h"
#include "infera/events/msgpack.h"
#include "infera/events/stream.h"
#include "infera/events/endpoint.h"
#include "infera/events/publisher.h"
#include "infera/events/subscriber.h"
#include "infera/events/nats_relay.h"
#include "infera/events/nats_source.h"
#include "infera/nats/client.h"
#include "tests/support/nats_process.h"

namespace infera::events {
namespace {

constexpr uint32_t kBs = 16;
constexpr uint32_t kPrompts = 8192;
constexpr kv::WorkerId kWorker = 0;

// kPrompts prompts of 16 blocks each, with a store payload and a removal payload per prompt.
// Message i of a stream with R resident prompts: i < R stores prompt i; after that, even
// messages store the next prompt and odd ones remove the oldest resident prompt.
struct Workload {
  std::vector<std::vector<uint32_t>> tokens;
  std::vector<EventBatch> store;
  std::vector<EventBatch> remove;
  std::vector<std::string> store_payload;
  std::vector<std::string> remove_payload;

  Workload() {
    Rng rng(11);
    std::vector<std::vector<uint64_t>> hashes(kPrompts);
    tokens.resize(kPrompts);
    for (uint32_t p = 0; p < kPrompts; ++p) {
      for (uint32_t b = 0; b < 16; ++b) hashes[p].push_back(rng.next());
      for (uint32_t t = 0; t < 16 * kBs; ++t) tokens[p].push_back(static_cast<uint32_t>(rng.uniform(150000)));
    }
    for (uint32_t p = 0; p < kPrompts; ++p) {
      BlockStored s;
      s.block_hashes = hashes[p];
      s.token_ids = tokens[p];
      s.block_size = kBs;
      s.medium = "GPU";
      s.extra_keys_count = 16;
      s.group_idx = 0;
      s.kv_cache_spec_kind = "full_attention";
      EventBatch b;
      b.ts = 1.0;
      b.dp_rank = 0;
      b.events.push_back(s);
      store.push_back(b);
      store_payload.push_back(encode_batch(b));
      BlockRemoved r;
      r.block_hashes = hashes[p];
      r.medium = "GPU";
      r.group_idx = 0;
      b.events.clear();
      b.events.push_back(r);
      remove.push_back(b);
      remove_payload.push_back(encode_batch(b));
    }
  }
  // Prompts stored / removed by messages [0, n).
  static uint64_t stores(uint64_t n, uint64_t r) { return n <= r ? n : r + (n - r + 1) / 2; }
  static uint64_t removes(uint64_t n, uint64_t r) { return n <= r ? 0 : (n - r) / 2; }
  static bool is_store(uint64_t i, uint64_t r) { return i < r || (i - r) % 2 == 0; }
  const EventBatch& batch(uint64_t i, uint64_t r) const {
    return is_store(i, r) ? store[(stores(i + 1, r) - 1) % kPrompts]
                          : remove[(removes(i + 1, r) - 1) % kPrompts];
  }
  const std::string& payload(uint64_t i, uint64_t r) const {
    return is_store(i, r) ? store_payload[(stores(i + 1, r) - 1) % kPrompts]
                          : remove_payload[(removes(i + 1, r) - 1) % kPrompts];
  }
};

const Workload& workload() {
  static const Workload w;
  return w;
}

void populate_other_workers(kv::KvIndex& index) {
  Rng rng(7);
  std::vector<uint64_t> hashes(16);
  std::vector<uint32_t> tokens(16 * kBs);
  for (kv::WorkerId w = 1; w < 64; ++w) {
    index.add_worker(w);
    for (int e = 0; e < 1000; ++e) {  // 63 x 1000 x 16 = 1 M resident entries
      for (auto& h : hashes) h = rng.next();
      for (auto& t : tokens) t = static_cast<uint32_t>(rng.uniform(150000));
      index.apply(kv::StoredEvent{w, std::nullopt, hashes, tokens, kBs, kv::Medium::kGpu, {}});
    }
  }
}

// After messages [0, n) the worker holds prompts [removes, stores): check every one.
bool mirror_exact(const kv::KvIndex& index, uint64_t n, uint64_t resident) {
  const Workload& wl = workload();
  const uint64_t first = Workload::removes(n, resident);
  const uint64_t end = Workload::stores(n, resident);
  if (index.block_count(kWorker) != (end - first) * 16) return false;
  std::vector<uint32_t> hits;
  for (uint64_t p = first; p < end; ++p) {
    index.find_overlaps(kv::seq_hashes(wl.tokens[p % kPrompts], kBs), hits);
    if (hits.at(kWorker) != 16) return false;
  }
  return true;
}

template <typename Cond>
bool wait_for(Cond&& cond, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return true;
}

void BM_ZmqDecodeApply(benchmark::State& state) {
  const Workload& wl = workload();
  const auto resident = static_cast<uint64_t>(state.range(0));
  kv::KvIndex index(kv::KvIndex::Options{kBs, 64});
  if (state.range(1) != 0) populate_other_workers(index);

  zmq::context_t ctx;
  zmq::socket_t pub(ctx, zmq::socket_type::xpub);
  pub.set(zmq::sockopt::linger, 0);
  pub.set(zmq::sockopt::sndhwm, 10000);
  pub.set(zmq::sockopt::xpub_nodrop, 1);  // flow control instead of loss: measure capacity
  pub.bind("tcp://127.0.0.1:*");
  SubscriberConfig cfg;
  cfg.worker = kWorker;
  cfg.worker_name = "bench";
  cfg.endpoint = pub.get(zmq::sockopt::last_endpoint);
  cfg.topic = "kv";
  cfg.rcv_hwm = 10000;
  KvEventSubscriber sub(index, cfg);
  if (!sub.start().ok()) {
    state.SkipWithError("subscriber did not start");
    return;
  }
  zmq::message_t subscription;
  (void)pub.recv(subscription);  // subscribed: nothing sent from here on is lost

  // Sends messages [first, end) from a thread and waits until the subscriber applied them all.
  auto run = [&](uint64_t first, uint64_t end) {
    std::thread sender([&] {
      for (uint64_t i = first; i < end; ++i) {
        const std::string seq = sequence_frame(i);
        while (!pub.send(zmq::buffer("kv", 2), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
          // At the HWM the subscriber is behind: back off rather than spin on a core the
          // subscriber needs. (zmq_poll is no help: an XPUB always reports POLLOUT, even when
          // XPUB_NODROP refuses the message, so polling here was a busy loop.) 20,000 messages
          // are queued between the two sockets, ~100 ms of work: 200 us never starves the
          // subscriber.
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        pub.send(zmq::buffer(seq), zmq::send_flags::sndmore);
        pub.send(zmq::buffer(wl.payload(i, resident)), zmq::send_flags::none);
      }
    });
    const bool done = wait_for([&] { return sub.stats().last_seq(0) == end - 1; }, std::chrono::seconds(300));
    sender.join();
    return done;
  };
  if (!run(0, resident)) {  // warm-up: fill the cache (not timed)
    state.SkipWithError("subscriber did not catch up");
    return;
  }
  const StreamStats before = sub.stats();
  const Nanos cpu_before = sub.thread_cpu_time();
  constexpr uint64_t kPerIteration = 100000;  // 16-block batches: 1.6 M blocks
  uint64_t next = resident;
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool done = run(next, next + kPerIteration);
    next += kPerIteration;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += s;
    state.SetIterationTime(s);
    if (!done) {
      state.SkipWithError("subscriber did not catch up");
      return;
    }
  }
  const StreamStats st = sub.stats();
  const double cpu_s = std::chrono::duration<double>(sub.thread_cpu_time() - cpu_before).count();
  const double stored = static_cast<double>(st.applied.blocks_stored - before.applied.blocks_stored);
  const double removed = static_cast<double>(st.applied.blocks_removed - before.applied.blocks_removed);
  const double batches = static_cast<double>(st.batches - before.batches);
  state.SetItemsProcessed(static_cast<int64_t>(stored + removed));  // items/s: blocks applied
  state.counters["stored_blocks_per_s"] = stored / seconds;
  state.counters["batches_per_s"] = batches / seconds;
  // The subscriber thread's own cost: what it sustains on a core of its own.
  state.counters["sub_cpu_ns_per_batch"] = cpu_s * 1e9 / batches;
  state.counters["blocks_per_sub_cpu_s"] = (stored + removed) / cpu_s;
  state.counters["gaps"] = static_cast<double>(st.gaps);
  state.counters["rejected"] = static_cast<double>(st.applied.rejected_total());
  state.counters["mirror_exact"] = mirror_exact(index, next, resident) ? 1 : 0;
  sub.stop();
}
// Args: resident prompts of the subscriber's worker (x 16 blocks), and whether 1 M entries of 63
// other workers share the index (tables far larger than the caches, as in a fleet).
BENCHMARK(BM_ZmqDecodeApply)
    ->Args({1024, 0})
    ->Args({4096, 0})
    ->Args({4096, 1})
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

void BM_NatsRelayDecodeApply(benchmark::State& state) {
  const Workload& wl = workload();
  const auto resident = static_cast<uint64_t>(state.range(0));
  kv::KvIndex index(kv::KvIndex::Options{kBs, 64});
  auto server = testing::NatsProcess::start();
  if (!server.ok()) {
    state.SkipWithError("nats-server did not start");
    return;
  }
  nats::ClientOptions no;
  no.servers = *nats::parse_server_urls(server->url());
  nats::Client worker_bus(no), router_bus(no);
  if (!worker_bus.connect().ok() || !router_bus.connect().ok()) {
    state.SkipWithError("NATS connect failed");
    return;
  }
  zmq::context_t ctx;
  zmq::socket_t pub(ctx, zmq::socket_type::xpub);
  pub.set(zmq::sockopt::linger, 0);
  pub.set(zmq::sockopt::sndhwm, 10000);
  pub.set(zmq::sockopt::xpub_nodrop, 1);
  pub.bind("tcp://127.0.0.1:*");
  NatsEventSource source(index, router_bus, NatsSourceConfig{});
  (void)source.add_worker({kWorker, "bench:1", {}});
  (void)source.start();
  (void)router_bus.flush();
  RelayConfig rc;
  rc.worker_id = "bench:1";
  rc.endpoint = pub.get(zmq::sockopt::last_endpoint);
  rc.topic = "kv";
  KvEventRelay relay(worker_bus, rc);
  if (!relay.start().ok()) {
    state.SkipWithError("relay did not start");
    return;
  }
  zmq::message_t subscription;
  (void)pub.recv(subscription);
  constexpr uint64_t kWindow = 4000;  // ~14 MB in flight, below the relay's 32 MiB buffer
  auto applied = [&]() -> uint64_t {
    auto st = source.stats(kWorker);
    auto last = st ? st->last_seq(0) : std::nullopt;
    return last ? *last + 1 : 0;
  };
  auto run = [&](uint64_t first, uint64_t end) {
    for (uint64_t i = first; i < end; ++i) {
      // (Progress is read every 256 batches: reading stats takes the stream's lock.)
      if (i % 256 == 0) {
        while (i - applied() >= kWindow) std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      const std::string seq = sequence_frame(i);
      while (!pub.send(zmq::buffer("kv", 2), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      pub.send(zmq::buffer(seq), zmq::send_flags::sndmore);
      pub.send(zmq::buffer(wl.payload(i, resident)), zmq::send_flags::none);
    }
    return wait_for([&] { return applied() == end; }, std::chrono::seconds(300));
  };
  if (!run(0, resident)) {
    state.SkipWithError("router did not catch up");
    return;
  }
  const StreamStats before = *source.stats(kWorker);
  const Nanos cpu_before = source.thread_cpu_time() + router_bus.thread_cpu_time();
  constexpr uint64_t kPerIteration = 100000;
  uint64_t next = resident;
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool done = run(next, next + kPerIteration);
    next += kPerIteration;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += s;
    state.SetIterationTime(s);
    if (!done) {
      state.SkipWithError("router did not catch up");
      return;
    }
  }
  const StreamStats st = *source.stats(kWorker);
  const double stored = static_cast<double>(st.applied.blocks_stored - before.applied.blocks_stored);
  const double removed = static_cast<double>(st.applied.blocks_removed - before.applied.blocks_removed);
  state.SetItemsProcessed(static_cast<int64_t>(stored + removed));
  state.counters["stored_blocks_per_s"] = stored / seconds;
  state.counters["batches_per_s"] = static_cast<double>(st.batches - before.batches) / seconds;
  // The router's own cost (its NATS connection's thread and the stream thread), the figure
  // to compare with the ZMQ subscriber's blocks_per_sub_cpu_s.
  const double cpu_s = to_seconds(source.thread_cpu_time() + router_bus.thread_cpu_time() - cpu_before);
  state.counters["blocks_per_router_cpu_s"] = (stored + removed) / cpu_s;
  state.counters["gaps"] = static_cast<double>(st.gaps);
  state.counters["relay_dropped"] = static_cast<double>(relay.stats().dropped);
  state.counters["source_dropped"] = static_cast<double>(source.source_stats().dropped);
  state.counters["mirror_exact"] = mirror_exact(index, next, resident) ? 1 : 0;
  relay.stop();
  source.stop();
}
BENCHMARK(BM_NatsRelayDecodeApply)
    ->Args({4096})
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);


// The same stream without sockets: decode and apply on the benchmark thread. The difference to
// BM_ZmqDecodeApply is what receiving through ZeroMQ costs the subscriber thread.
void BM_DecodeApplyNoSocket(benchmark::State& state) {
  const Workload& wl = workload();
  const auto resident = static_cast<uint64_t>(state.range(0));
  kv::KvIndex index(kv::KvIndex::Options{kBs, 64});
  if (state.range(1) != 0) populate_other_workers(index);
  StreamOptions options;
  options.worker = kWorker;
  WorkerStream stream(index, options, nullptr);
  uint64_t i = 0;
  for (; i < resident; ++i) {
    const std::string seq = sequence_frame(i);
    stream.on_message(byte_span(seq), byte_span(wl.payload(i, resident)));
  }
  for (auto _ : state) {
    const std::string seq = sequence_frame(i);
    stream.on_message(byte_span(seq), byte_span(wl.payload(i, resident)));
    ++i;
  }
  const StreamStats st = stream.stats();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 16);
  state.counters["mirror_exact"] = mirror_exact(index, i, resident) ? 1 : 0;
  state.counters["rejected"] = static_cast<double>(st.applied.rejected_total());
}
BENCHMARK(BM_DecodeApplyNoSocket)->Args({1024, 0})->Args({4096, 0})->Args({4096, 1});

constexpr uint64_t kOverloadResident = 4096;

void BM_HwmOverload(benchmark::State& state) {
  const int hwm = static_cast<int>(state.range(0));
  const auto buffer_steps = static_cast<size_t>(state.range(1));
  const auto kBatches = static_cast<uint64_t>(state.range(2));
  const Workload& wl = workload();
  for (auto _ : state) {
    kv::KvIndex index(kv::KvIndex::Options{kBs, 64});
    KvEventPublisher::Options po;
    po.endpoint = "tcp://127.0.0.1:*";
    po.replay_endpoint = "tcp://127.0.0.1:*";
    po.topic = "kv";
    po.hwm = hwm;
    po.buffer_steps = buffer_steps;
    po.max_queue_size = kBatches + 16;
    auto pub = KvEventPublisher::start(po);
    if (!pub.ok()) {
      state.SkipWithError("publisher did not start");
      return;
    }
    SubscriberConfig cfg;
    cfg.worker = kWorker;
    cfg.worker_name = "bench";
    cfg.endpoint = (*pub)->endpoint();
    cfg.replay_endpoint = (*pub)->replay_endpoint();
    cfg.topic = "kv";
    cfg.rcv_hwm = hwm;
    KvEventSubscriber sub(index, cfg);
    (void)sub.start();
    (void)(*pub)->wait_for_subscriber(std::chrono::seconds(10));

    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < kBatches; ++i) (void)(*pub)->publish(wl.batch(i, kOverloadResident));
    (void)(*pub)->flush(std::chrono::seconds(60));
    const double publish_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The tail may have been dropped too: a trickle of no-op batches (a removal of a hash the
    // worker never had) until the subscriber has seen the end, as later traffic would.
    EventBatch noop;
    noop.events.push_back(BlockRemoved{{0xdeadull}, "GPU", 0, std::nullopt, std::nullopt});
    uint64_t total = kBatches;
    const bool caught_up = wait_for(
        [&] {
          if (sub.stats().last_seq(0) == total - 1) return true;
          (void)(*pub)->publish(noop);
          ++total;
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return false;
        },
        std::chrono::seconds(120));
    const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(total_s);
    const StreamStats st = sub.stats();
    state.counters["published"] = static_cast<double>(kBatches);
    state.counters["publish_s"] = publish_s;
    state.counters["received_live"] = static_cast<double>(st.messages);
    state.counters["dropped_live"] = static_cast<double>(st.missed_batches);
    state.counters["gaps"] = static_cast<double>(st.gaps);
    state.counters["replays"] = static_cast<double>(st.replays);
    state.counters["replayed"] = static_cast<double>(st.replayed_batches);
    state.counters["replay_failures"] = static_cast<double>(st.replay_failures);
    state.counters["stale"] = static_cast<double>(st.stale_transitions);
    state.counters["caught_up"] = caught_up ? 1 : 0;
    state.counters["mirror_exact"] =
        st.state == SubscriberState::kLive && mirror_exact(index, kBatches, kOverloadResident) ? 1 : 0;
    sub.stop();
  }
}
// Args: HWM (PUB send and SUB receive, messages), replay buffer (batches), batches in the burst.
BENCHMARK(BM_HwmOverload)
    ->Args({1000, 10000, 8000})    // a burst the replay buffer (vLLM's default size) covers
    ->Args({1000, 100, 8000})      // the same burst, a small buffer: the gap outruns it
    ->Args({1000, 10000, 100000})  // sustained overload: the publisher laps the buffer
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace infera::events
