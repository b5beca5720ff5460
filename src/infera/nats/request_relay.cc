#include "infera/nats/request_relay.h"

#include <condition_variable>
#include <future>
#include <deque>
#include <mutex>
#include <set>
#include <unordered_map>

#include "infera/common/log.h"
#include "infera/http/net.h"
#include "infera/nats/client.h"
#include "infera/nats/request_wire.h"
#include "infera/nats/subjects.h"

namespace infera::nats {
namespace {

// A message as the NATS thread hands it over.
struct Incoming {
  std::string reply;
  std::string headers;
  std::string payload;
};

// One call's state shared with its control inbox's handler.
struct Call {
  explicit Call(net::any_io_executor ex) : credit(ex), stop(ex) {
    credit.expires_at(net::steady_timer::time_point::max());
    stop.expires_at(net::steady_timer::time_point::max());
  }
  net::steady_timer credit;  // cancelled when an ack arrives
  net::steady_timer stop;    // cancelled when the call is to stop (races the engine reads)
  int64_t acked = -1;        // the last data frame the router confirmed
  bool cancelled = false;
  std::string control;       // our control inbox
};

// A request whose body arrives in parts.
struct Assembly {
  RequestHead head;
  std::string reply;
  std::string body;
  uint32_t next_part = 1;
  std::chrono::steady_clock::time_point started;
};

}  // namespace

struct RequestRelay::Impl : std::enable_shared_from_this<RequestRelay::Impl> {
  Impl(Client& c, RequestRelayOptions o)
      : bus(c), options(std::move(o)) {}

  Client& bus;
  RequestRelayOptions options;
  // The calls run on the NATS client's thread (bus.executor()), where its handlers run: a
  // request, its frames and its acknowledgements never hop between threads. Its connections
  // live there too and are closed there (stop()).
  std::unique_ptr<http::Client> engine;
  net::any_io_executor ex;
  bool started = false;
  uint64_t sid = 0;
  std::atomic<bool> stopping{false};
  std::atomic<bool> stopping_calls{false};  // stop() is cancelling the calls in progress

  // The client thread's:
  std::unordered_map<std::string, std::shared_ptr<Assembly>> assemblies;
  std::set<std::shared_ptr<Call>> calls;

  mutable std::mutex mu;
  std::condition_variable idle;  // notified as each call ends
  RequestRelayStats stats;  // guarded by mu

  void count(uint64_t RequestRelayStats::*field, uint64_t n = 1) {
    std::lock_guard lock(mu);
    stats.*field += n;
  }

  void on_message(Incoming m);
  void start_call(RequestHead head, std::string reply, std::string body);
  net::awaitable<void> serve(std::shared_ptr<Call> call, RequestHead head, std::string reply,
                             std::string body);
  net::awaitable<bool> send_data(Call& call, const std::string& reply, uint64_t& seq,
                                 std::string_view bytes, size_t room, uint32_t window, bool last);
  void expire_assemblies();
};

void RequestRelay::Impl::on_message(Incoming m) {
  expire_assemblies();
  auto head = decode_request(m.headers);
  if (!head.ok()) {
    count(&RequestRelayStats::malformed);
    if (!m.reply.empty()) (void)bus.publish(m.reply, "", "", reply_error(0, head.status().message()));
    return;
  }
  if (head->continuation) {
    auto it = assemblies.find(head->inbox);
    if (it == assemblies.end()) return;  // expired or never started: dropped with its request
    Assembly& a = *it->second;
    if (head->part != a.next_part || a.body.size() + m.payload.size() > a.head.body_length) {
      count(&RequestRelayStats::malformed);
      (void)bus.publish(a.reply, "", "", reply_error(0, "request body parts out of order"));
      assemblies.erase(it);
      return;
    }
    ++a.next_part;
    a.body += m.payload;
    if (a.body.size() == a.head.body_length) {
      auto done = it->second;
      assemblies.erase(it);
      start_call(std::move(done->head), std::move(done->reply), std::move(done->body));
    }
    return;
  }
  if (m.reply.empty() || !valid_subject(m.reply)) {
    count(&RequestRelayStats::malformed);
    return;
  }
  if (head->body_length > options.max_body_bytes || m.payload.size() > head->body_length) {
    count(&RequestRelayStats::malformed);
    (void)bus.publish(m.reply, "", "", reply_error(0, "request body above the relay's limit"));
    return;
  }
  if (m.payload.size() == head->body_length) {
    start_call(std::move(*head), std::move(m.reply), std::move(m.payload));
    return;
  }
  if (assemblies.size() >= 1024) {
    count(&RequestRelayStats::malformed);
    (void)bus.publish(m.reply, "", "", reply_error(0, "too many request bodies in flight"));
    return;
  }
  auto a = std::make_shared<Assembly>();
  a->head = std::move(*head);
  a->reply = m.reply;
  a->body = std::move(m.payload);
  a->started = std::chrono::steady_clock::now();
  assemblies[m.reply] = std::move(a);
}

void RequestRelay::Impl::expire_assemblies() {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(assemblies, [&](const auto& kv) {
    if (now - kv.second->started < options.part_timeout) return false;
    count(&RequestRelayStats::malformed);
    (void)bus.publish(kv.second->reply, "", "", reply_error(0, "request body parts timed out"));
    return true;
  });
}

void RequestRelay::Impl::start_call(RequestHead head, std::string reply, std::string body) {
  auto call = std::make_shared<Call>(ex);
  call->control = bus.make_inbox();
  std::weak_ptr<Call> weak = call;
  // On the client's thread, like the call itself: applied at once.
  bus.add_inbox(call->control, [weak](const Message& m) {
    auto c = decode_control(m.headers);
    auto live = weak.lock();
    if (!c.ok() || !live) return;
    if (c->ack && static_cast<int64_t>(*c->ack) > live->acked) live->acked = static_cast<int64_t>(*c->ack);
    if (c->cancel) {
      live->cancelled = true;
      live->stop.cancel();
    }
    live->credit.cancel();
  });
  calls.insert(call);
  {
    std::lock_guard lock(mu);
    ++stats.requests;
    ++stats.active;
  }
  net::co_spawn(ex, serve(call, std::move(head), std::move(reply), std::move(body)), net::detached);
}

// Publishes `bytes` as data frames of at most `room` bytes, each once the window allows it;
// with `last`, the final frame also ends the answer. False when the call is to end (cancelled,
// the router silent past the credit timeout, or NATS refused a frame).
net::awaitable<bool> RequestRelay::Impl::send_data(Call& call, const std::string& reply,
                                                   uint64_t& seq, std::string_view bytes,
                                                   size_t room, uint32_t window, bool last) {
  for (size_t at = 0; at < bytes.size(); at += room) {
    // Data frames are seq 1, 2, ...: frame `seq` may go once seq - acked <= window.
    while (!call.cancelled && static_cast<int64_t>(seq) - call.acked > static_cast<int64_t>(window)) {
      call.credit.expires_after(options.credit_timeout);
      auto [ec] = co_await call.credit.async_wait(use_nothrow);
      if (!ec) {  // the timer ran out: the router stopped reading
        call.cancelled = true;
        INFERA_LOG(kWarn, "nats").msg("the router sent no credit in time; the engine call is cancelled")
            .kv("worker", options.worker_id);
      }
    }
    if (call.cancelled) co_return false;
    const std::string_view piece = bytes.substr(at, room);
    const bool ends = last && at + room >= bytes.size();
    if (!bus.publish(reply, piece, "", reply_data(seq, ends)).ok()) co_return false;
    ++seq;
    count(&RequestRelayStats::bytes, piece.size());
  }
  co_return true;
}

net::awaitable<void> RequestRelay::Impl::serve(std::shared_ptr<Call> call, RequestHead head,
                                               std::string reply, std::string body) {
  struct Done {
    Impl& impl;
    std::shared_ptr<Call>& call;
    ~Done() {
      impl.bus.remove_inbox(call->control);
      impl.calls.erase(call);
      std::lock_guard lock(impl.mu);
      --impl.stats.active;
      impl.idle.notify_all();
    }
  } done{*this, call};
  http::Request request;
  request.method = std::move(head.method);
  request.target = std::move(head.target);
  request.headers = std::move(head.headers);
  request.body = std::move(body);
  uint64_t seq = 0;
  auto opened = co_await (engine->stream(options.engine, std::move(request)) ||
                          call->stop.async_wait(use_nothrow));
  // A call stopped by the relay itself (stop()) tells the router at once; one the router
  // cancelled needs no answer.
  auto stopped = [&] {
    if (stopping_calls.load()) (void)bus.publish(reply, "", "", reply_error(seq, "the worker's request relay is stopping"));
    count(&RequestRelayStats::cancelled);
  };
  if (opened.index() == 1) {
    stopped();
    co_return;
  }
  auto& result = std::get<0>(opened);
  if (!result.ok()) {
    (void)bus.publish(reply, "", "", reply_error(seq, "engine: " + result.error().status.message()));
    count(&RequestRelayStats::failed);
    co_return;
  }
  http::ClientStream& up = result.value();
  http::Headers headers;
  if (std::string_view t = up.header("Content-Type"); !t.empty()) headers.push_back({"Content-Type", std::string(t)});
  const size_t room = bus.max_payload() > kFrameOverhead * 2 ? bus.max_payload() - kFrameOverhead : 1024;
  // What the engine sent with its head goes in the head frame (never waiting for more): a
  // non-streamed answer is then one message. A stream's head goes at once, as the engine sent it.
  std::string_view first;
  std::string_view spill;  // a first piece larger than a frame: data frames after the head
  if (up.buffered()) {
    auto piece = co_await up.read();  // answers from the buffer
    if (!piece.ok()) {
      (void)bus.publish(reply, "", "", reply_error(seq, "engine: " + piece.status().message()));
      count(&RequestRelayStats::failed);
      co_return;
    }
    (piece->size() <= room ? first : spill) = *piece;
  }
  const bool whole = up.done() && spill.empty();
  if (!bus.publish(reply, first, "", reply_head(seq++, up.status(), headers, call->control, whole)).ok()) {
    count(&RequestRelayStats::failed);
    co_return;
  }
  count(&RequestRelayStats::bytes, first.size());
  if (whole) {
    count(&RequestRelayStats::completed);
    co_return;
  }
  for (std::string_view piece = spill;; piece = {}) {
    if (piece.empty()) {
      auto read = co_await (up.read() || call->stop.async_wait(use_nothrow));
      if (read.index() == 1 || call->cancelled) {
        up.close();
        stopped();
        co_return;
      }
      Result<std::string_view>& got = std::get<0>(read);
      if (!got.ok()) {
        (void)bus.publish(reply, "", "", reply_error(seq, "engine: " + got.status().message()));
        count(&RequestRelayStats::failed);
        co_return;
      }
      if (got->empty()) break;
      piece = *got;
    }
    const bool last = up.done();  // the piece ends the body: its last frame says so
    if (!co_await send_data(*call, reply, seq, piece, room, head.window, last)) {
      up.close();
      if (call->cancelled) {
        stopped();
      } else {
        count(&RequestRelayStats::failed);
      }
      co_return;
    }
    if (last) {
      count(&RequestRelayStats::completed);
      co_return;
    }
  }
  (void)bus.publish(reply, "", "", reply_end(seq));
  count(&RequestRelayStats::completed);
}

RequestRelay::RequestRelay(Client& client, RequestRelayOptions options)
    : impl_(std::make_shared<Impl>(client, std::move(options))) {}

RequestRelay::~RequestRelay() { stop(); }

Status RequestRelay::start() {
  if (impl_->started) return failed_precondition("request relay already started");
  if (impl_->options.worker_id.empty()) return invalid_argument("request relay: no worker id");
  impl_->started = true;
  impl_->ex = impl_->bus.executor();
  impl_->engine = std::make_unique<http::Client>(impl_->options.engine_client);
  auto impl = impl_;
  auto sid = impl_->bus.subscribe(
      requests_subject(impl_->options.ns, impl_->options.worker_id),
      [impl](const Message& m) {
        if (impl->stopping.load()) return;
        impl->on_message(Incoming{std::string(m.reply), std::string(m.headers), std::string(m.payload)});
      },
      "relay");
  if (!sid.ok()) return sid.status();
  impl_->sid = *sid;
  INFERA_LOG(kInfo, "nats")
      .msg("relaying requests from NATS to the engine")
      .kv("worker", impl_->options.worker_id)
      .kv("subject", requests_subject(impl_->options.ns, impl_->options.worker_id))
      .kv("engine", impl_->options.engine.key());
  return ok_status();
}

void RequestRelay::stop() {
  if (!impl_->started || impl_->stopping.load()) return;
  impl_->bus.unsubscribe(impl_->sid);
  // Stop every call (their engine connections close) and wait, bounded, for them to end; then
  // the engine's client goes, on the client's thread where its connections live.
  auto impl = impl_;
  impl->stopping_calls.store(true);
  net::post(impl->ex, [impl] {
    for (const auto& call : impl->calls) {
      call->cancelled = true;
      call->stop.cancel();
      call->credit.cancel();
    }
  });
  {
    std::unique_lock lock(impl->mu);
    impl->idle.wait_for(lock, std::chrono::seconds(2), [&] { return impl->stats.active == 0; });
  }
  impl->stopping.store(true);
  auto closed = std::make_shared<std::promise<void>>();
  std::future<void> done = closed->get_future();
  net::post(impl->ex, [impl, closed] {
    impl->engine.reset();
    closed->set_value();
  });
  // A client already closed runs nothing more: its pool then goes with the relay.
  (void)done.wait_for(std::chrono::seconds(2));
}

RequestRelayStats RequestRelay::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

}  // namespace infera::nats
