#include "infera/nats/client.h"

#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "infera/common/clock.h"
#include "infera/common/log.h"
#include "infera/http/net.h"
#include "infera/http/tls.h"
#include "infera/nats/protocol.h"

namespace infera::nats {
namespace {

std::string random_token() {
  static constexpr char kAlphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::random_device rd;
  std::mt19937_64 g((uint64_t{rd()} << 32) ^ rd());
  std::string out;
  for (int i = 0; i < 22; ++i) out.push_back(kAlphabet[g() % 62]);
  return out;
}

constexpr size_t kReadSize = 64 * 1024;

// One read's bytes (allocated once per connection; never zero-filled per read).
struct ReadBuffer {
  std::unique_ptr<char[]> data{new char[kReadSize]};
  size_t size = 0;
  std::string_view view() const { return {data.get(), size}; }
};

struct Subscription {
  std::string subject;
  std::string queue;
  Handler handler;
};

}  // namespace

struct Client::Impl : std::enable_shared_from_this<Client::Impl> {
  explicit Impl(ClientOptions o) : options(std::move(o)), inbox_prefix("_INBOX." + random_token() + ".") {}

  ClientOptions options;
  const std::string inbox_prefix;
  net::io_context ctx{1};
  std::thread thread;
  net::steady_timer wake{ctx};     // the writer's signal (cancelled from the client's thread)
  net::steady_timer backoff{ctx};  // between reconnects
  std::optional<tcp::socket> socket;
  std::unique_ptr<net::ssl::stream<tcp::socket&>> tls;
  std::shared_ptr<net::ssl::context> tls_context;
  std::function<void(bool)> state_callback;

  std::atomic<bool> closing{false};
  std::atomic<bool> is_connected{false};
  std::atomic<size_t> server_max_payload{1024 * 1024};

  mutable std::mutex mu;
  std::string pending;         // guarded by mu: frames not yet written
  bool wake_posted = false;    // guarded by mu
  bool up = false;             // guarded by mu: a session is established
  uint64_t next_sid = 1;       // guarded by mu
  uint64_t inbox_sid = 0;      // guarded by mu
  uint64_t next_inbox = 0;     // guarded by mu
  std::map<uint64_t, std::shared_ptr<Subscription>> subs;                       // guarded by mu
  std::unordered_map<std::string, std::shared_ptr<Handler>> inboxes;           // guarded by mu
  std::deque<std::shared_ptr<std::promise<bool>>> ping_requests;  // guarded by mu: to send
  std::deque<std::shared_ptr<std::promise<bool>>> pings_in_flight;  // guarded by mu
  int pings_out = 0;                                               // guarded by mu
  ClientStats stats;                                               // guarded by mu
  std::string current_server;                                      // guarded by mu
  std::vector<ServerUrl> discovered;  // client thread: servers the cluster advertised

  std::promise<Status> first;  // the first connection's outcome
  bool first_done = false;     // client thread

  // --- called with mu held -------------------------------------------------------------
  void post_wake_locked() {
    if (wake_posted) return;
    wake_posted = true;
    net::post(ctx, [self = shared_from_this()] { self->wake.cancel(); });
  }

  // --- client thread ---------------------------------------------------------------------
  net::awaitable<void> run();
  net::awaitable<Status> session(const ServerUrl& url);
  net::awaitable<Status> handshake(const ServerUrl& url, Parser& parser);
  net::awaitable<Status> reader(Parser& parser);
  net::awaitable<Status> writer();
  net::awaitable<Status> pinger();
  net::awaitable<Status> read_some(ReadBuffer& buf);
  net::awaitable<Status> write_all(const std::string& bytes);
  Status handle(const Frame& f);
  void dispatch(const Frame& f);
  void drop_session();
  void finish_first(Status s) {
    if (first_done) return;
    first_done = true;
    first.set_value(std::move(s));
  }
};

net::awaitable<Status> Client::Impl::read_some(ReadBuffer& buf) {
  // if/else, not ?: : GCC 12 mishandles a co_await's temporaries inside a conditional.
  boost::system::error_code ec;
  size_t n = 0;
  if (tls) {
    std::tie(ec, n) = co_await tls->async_read_some(net::buffer(buf.data.get(), kReadSize), use_nothrow);
  } else {
    std::tie(ec, n) = co_await socket->async_read_some(net::buffer(buf.data.get(), kReadSize), use_nothrow);
  }
  buf.size = n;
  if (ec) co_return unavailable("NATS connection read: " + ec.message());
  co_return ok_status();
}

net::awaitable<Status> Client::Impl::write_all(const std::string& bytes) {
  boost::system::error_code ec;
  if (tls) {
    std::tie(ec, std::ignore) = co_await net::async_write(*tls, net::buffer(bytes), use_nothrow);
  } else {
    std::tie(ec, std::ignore) = co_await net::async_write(*socket, net::buffer(bytes), use_nothrow);
  }
  if (ec) co_return unavailable("NATS connection write: " + ec.message());
  co_return ok_status();
}

// INFO, TLS when asked, CONNECT, then a PING whose PONG proves the server accepted us (an
// authorization failure is the -ERR that comes instead).
net::awaitable<Status> Client::Impl::handshake(const ServerUrl& url, Parser& parser) {
  ReadBuffer buf;
  Frame f;
  auto next_frame = [&]() -> net::awaitable<Status> {
    for (;;) {
      const Parser::Next n = parser.next(f);
      if (n == Parser::Next::kFrame) co_return ok_status();
      if (n == Parser::Next::kError) co_return data_loss("NATS handshake: " + parser.error());
      Status s = co_await read_some(buf);
      if (!s.ok()) co_return s;
      parser.feed(buf.view());
    }
  };
  INFERA_CO_RETURN_IF_ERROR(co_await next_frame());
  if (f.kind != FrameKind::kInfo) co_return data_loss("NATS server did not start with INFO");
  auto info = parse_info(f.payload);
  if (!info.ok()) co_return info.status();
  server_max_payload.store(info->max_payload);
  parser.set_max_payload(info->max_payload + 64 * 1024);
  for (const std::string& u : info->connect_urls) {
    auto parsed = parse_server_urls("nats://" + u);
    if (parsed.ok() && discovered.size() < 32) {
      bool known = false;
      for (const ServerUrl& d : discovered) known |= d.host == (*parsed)[0].host && d.port == (*parsed)[0].port;
      if (!known) discovered.push_back((*parsed)[0]);
    }
  }
  const bool want_tls = url.tls || info->tls_required;
  if (want_tls) {
    if (!tls_context) {
      http::TlsClientConfig tc;
      tc.verify = options.tls_verify;
      if (!options.tls_ca_file.empty()) {
        std::FILE* fp = std::fopen(options.tls_ca_file.c_str(), "rb");
        if (!fp) co_return invalid_argument("NATS TLS CA file " + options.tls_ca_file + " cannot be read");
        char chunk[4096];
        size_t n;
        while ((n = std::fread(chunk, 1, sizeof chunk, fp)) > 0 && tc.ca_pem.size() < (1u << 20)) tc.ca_pem.append(chunk, n);
        std::fclose(fp);
      }
      auto made = http::make_tls_client_context(tc);
      if (!made.ok()) co_return made.status();
      tls_context = *made;
    }
    tls = std::make_unique<net::ssl::stream<tcp::socket&>>(*socket, *tls_context);
    INFERA_CO_RETURN_IF_ERROR(http::prepare_tls_stream(*tls, url.host, options.tls_verify));
    auto [ec] = co_await tls->async_handshake(net::ssl::stream_base::client, use_nothrow);
    if (ec) co_return unavailable("NATS TLS handshake with " + url.display() + ": " + ec.message());
  }
  ConnectOptions co;
  co.name = options.name;
  co.user = url.user;
  co.password = url.password;
  co.token = url.token;
  co.tls_required = want_tls;
  co.headers = info->headers;
  co.no_responders = info->headers;
  INFERA_CO_RETURN_IF_ERROR(co_await write_all(connect_line(co) + "PING\r\n"));
  for (;;) {
    INFERA_CO_RETURN_IF_ERROR(co_await next_frame());
    if (f.kind == FrameKind::kPong) co_return ok_status();
    if (f.kind == FrameKind::kErr) {
      co_return unauthenticated("NATS server " + url.display() + " refused the connection: " +
                                  std::string(f.payload.substr(0, 200)));
    }
    if (f.kind == FrameKind::kPing) INFERA_CO_RETURN_IF_ERROR(co_await write_all("PONG\r\n"));
  }
}

void Client::Impl::dispatch(const Frame& f) {
  std::shared_ptr<Subscription> sub;
  std::shared_ptr<Handler> inbox;
  {
    std::lock_guard lock(mu);
    ++stats.msgs_in;
    stats.bytes_in += f.payload.size() + f.headers.size();
    if (f.sid == inbox_sid && inbox_sid != 0) {
      auto it = inboxes.find(std::string(f.subject));
      if (it != inboxes.end()) inbox = it->second;
    } else if (auto it = subs.find(f.sid); it != subs.end()) {
      sub = it->second;
    }
  }
  if (!sub && !inbox) return;  // unsubscribed while in flight, or an inbox no one waits on
  Message m;
  m.subject = f.subject;
  m.reply = f.reply;
  m.headers = f.headers;
  m.payload = f.payload;
  if (!f.headers.empty()) {
    auto h = parse_headers(f.headers);
    if (h.ok()) m.status = h->status;
  }
  if (sub) {
    sub->handler(m);
  } else {
    (*inbox)(m);
  }
}

Status Client::Impl::handle(const Frame& f) {
  switch (f.kind) {
    case FrameKind::kMsg:
      dispatch(f);
      return ok_status();
    case FrameKind::kPing: {
      std::lock_guard lock(mu);
      pending += "PONG\r\n";
      post_wake_locked();
      return ok_status();
    }
    case FrameKind::kPong: {
      std::shared_ptr<std::promise<bool>> waiter;
      {
        std::lock_guard lock(mu);
        pings_out = 0;
        if (!pings_in_flight.empty()) {
          waiter = std::move(pings_in_flight.front());
          pings_in_flight.pop_front();
        }
      }
      if (waiter) waiter->set_value(true);
      return ok_status();
    }
    case FrameKind::kInfo: {
      auto info = parse_info(f.payload);
      if (info.ok()) server_max_payload.store(info->max_payload);
      return ok_status();
    }
    case FrameKind::kOk:
      return ok_status();
    case FrameKind::kErr: {
      {
        std::lock_guard lock(mu);
        ++stats.server_errors;
      }
      INFERA_LOG(kWarn, "nats").msg("the NATS server reported an error").kv("error", f.payload);
      // Permission errors leave the connection open; every other -ERR precedes a close.
      if (f.payload.find("Permissions Violation") != std::string_view::npos) return ok_status();
      return unavailable("NATS server error: " + std::string(f.payload.substr(0, 200)));
    }
  }
  return ok_status();
}

net::awaitable<Status> Client::Impl::reader(Parser& parser) {
  ReadBuffer buf;
  Frame f;
  for (;;) {
    for (;;) {
      const Parser::Next n = parser.next(f);
      if (n == Parser::Next::kNeedMore) break;
      if (n == Parser::Next::kError) {
        {
          std::lock_guard lock(mu);
          ++stats.protocol_errors;
        }
        co_return data_loss("NATS protocol error: " + parser.error());
      }
      INFERA_CO_RETURN_IF_ERROR(handle(f));
    }
    INFERA_CO_RETURN_IF_ERROR(co_await read_some(buf));
    parser.feed(buf.view());
  }
}

net::awaitable<Status> Client::Impl::writer() {
  std::string out;
  for (;;) {
    {
      std::lock_guard lock(mu);
      wake_posted = false;
      out.clear();
      out.swap(pending);
      for (auto& p : ping_requests) {
        out += "PING\r\n";
        pings_in_flight.push_back(std::move(p));
      }
      ping_requests.clear();
    }
    if (out.empty()) {
      wake.expires_at(net::steady_timer::time_point::max());
      co_await wake.async_wait(use_nothrow);
      if (closing.load()) {
        std::lock_guard lock(mu);
        if (pending.empty() && ping_requests.empty()) co_return cancelled("NATS client closed");
      }
      continue;
    }
    INFERA_CO_RETURN_IF_ERROR(co_await write_all(out));
    if (out.capacity() > (size_t{4} << 20)) std::string().swap(out);
  }
}

net::awaitable<Status> Client::Impl::pinger() {
  net::steady_timer timer(ctx);
  for (;;) {
    timer.expires_after(options.ping_interval);
    auto [ec] = co_await timer.async_wait(use_nothrow);
    if (ec) co_return cancelled("NATS pinger stopped");
    std::lock_guard lock(mu);
    if (++pings_out > options.max_pings_out) {
      co_return unavailable("NATS server did not answer " + std::to_string(pings_out - 1) + " pings");
    }
    ping_requests.push_back(nullptr);
    post_wake_locked();
  }
}

void Client::Impl::drop_session() {
  std::deque<std::shared_ptr<std::promise<bool>>> failed;
  {
    std::lock_guard lock(mu);
    up = false;
    pings_out = 0;
    failed.swap(pings_in_flight);
    for (auto& p : ping_requests) failed.push_back(std::move(p));
    ping_requests.clear();
    current_server.clear();
  }
  for (auto& p : failed) {
    if (p) p->set_value(false);
  }
  is_connected.store(false);
  boost::system::error_code ignored;
  if (tls) tls.reset();
  if (socket) socket->close(ignored);
  socket.reset();
}

net::awaitable<Status> Client::Impl::session(const ServerUrl& url) {
  socket.emplace(ctx);
  tls.reset();
  Parser parser;
  auto connect_and_handshake = [&]() -> net::awaitable<Status> {
    tcp::resolver resolver(ctx);
    auto [rec, endpoints] =
        co_await resolver.async_resolve(url.host, std::to_string(url.port), use_nothrow);
    if (rec) co_return unavailable("NATS server " + url.display() + ": " + rec.message());
    auto [cec, ep] = co_await net::async_connect(*socket, endpoints, use_nothrow);
    if (cec) co_return unavailable("NATS server " + url.display() + ": " + cec.message());
    boost::system::error_code nd;
    socket->set_option(tcp::no_delay(true), nd);
    co_return co_await handshake(url, parser);
  };
  net::steady_timer deadline(ctx);
  deadline.expires_after(options.connect_timeout);
  auto raced = co_await (connect_and_handshake() || deadline.async_wait(use_nothrow));
  Status s = raced.index() == 0
                 ? std::get<0>(raced)
                 : deadline_exceeded("NATS server " + url.display() + ": no answer within " +
                                     std::to_string(options.connect_timeout.count()) + " ms");
  if (!s.ok()) {
    drop_session();
    co_return s;
  }
  {
    std::lock_guard lock(mu);
    std::string prefix;
    if (inbox_sid == 0) inbox_sid = next_sid++;
    append_sub(prefix, inbox_prefix + "*", "", inbox_sid);
    for (const auto& [sid, sub] : subs) append_sub(prefix, sub->subject, sub->queue, sid);
    pending.insert(0, prefix);
    up = true;
    ++stats.connects;
    current_server = url.display();
  }
  is_connected.store(true);
  INFERA_LOG(kInfo, "nats").msg("connected to NATS").kv("server", url.display());
  finish_first(ok_status());
  if (state_callback) state_callback(true);
  auto ended = co_await (reader(parser) || writer() || pinger());
  Status why;
  std::visit([&](auto& v) { why = v; }, ended);
  drop_session();
  {
    std::lock_guard lock(mu);
    ++stats.disconnects;
  }
  if (!closing.load()) {
    INFERA_LOG(kWarn, "nats").msg("NATS connection lost").kv("server", url.display()).kv("error", why.message());
    if (state_callback) state_callback(false);
  }
  co_return why;
}

net::awaitable<void> Client::Impl::run() {
  auto self = shared_from_this();
  std::mt19937 jitter(std::random_device{}());
  std::chrono::milliseconds wait = options.reconnect_min;
  size_t next = 0;
  std::string errors;
  while (!closing.load()) {
    std::vector<ServerUrl> all = options.servers;
    for (const ServerUrl& d : discovered) {
      ServerUrl u = d;
      u.user = options.servers[0].user;
      u.password = options.servers[0].password;
      u.token = options.servers[0].token;
      u.tls = options.servers[0].tls;
      all.push_back(std::move(u));
    }
    const ServerUrl url = all[next++ % all.size()];
    const uint64_t before = stats.connects;
    Status s = co_await session(url);
    if (closing.load()) break;
    if (!first_done) {
      if (!errors.empty()) errors += "; ";
      errors += s.message();
      if (next >= options.servers.size()) {
        finish_first(Status(s.code(), errors));
        break;
      }
      continue;
    }
    if (stats.connects != before) wait = options.reconnect_min;  // it was up: start over
    const auto jittered = wait + std::chrono::milliseconds(static_cast<int64_t>(jitter() % static_cast<uint64_t>(wait.count() / 2 + 1)));
    backoff.expires_after(jittered);
    co_await backoff.async_wait(use_nothrow);
    wait = std::min(wait * 2, options.reconnect_max);
  }
  finish_first(cancelled("NATS client closed"));
}

Client::Client(ClientOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

Client::~Client() { close(); }

Status Client::connect() {
  if (impl_->options.servers.empty()) return invalid_argument("NATS: no server URL");
  if (impl_->thread.joinable()) return failed_precondition("NATS client connect() called twice");
  std::future<Status> first = impl_->first.get_future();
  net::co_spawn(impl_->ctx, impl_->run(), net::detached);
  impl_->thread = std::thread([impl = impl_] { impl->ctx.run(); });
  Status s = first.get();
  if (!s.ok()) close();
  return s;
}

void Client::close() {
  if (!impl_->thread.joinable()) return;
  if (!impl_->closing.exchange(true)) {
    // The writer drains what is pending and ends the session; a connection that does not take
    // it within 200 ms, or one not up, is torn down.
    auto impl = impl_;
    net::post(impl->ctx, [impl] {
      impl->backoff.cancel();
      impl->wake.cancel();
      auto shut = [impl] {
        boost::system::error_code ignored;
        if (impl->socket) {
          impl->socket->shutdown(tcp::socket::shutdown_both, ignored);
          impl->socket->close(ignored);
        }
      };
      bool up;
      {
        std::lock_guard lock(impl->mu);
        up = impl->up;
      }
      if (!up) return shut();
      auto timer = std::make_shared<net::steady_timer>(impl->ctx, std::chrono::milliseconds(200));
      timer->async_wait([timer, shut](boost::system::error_code) { shut(); });
    });
  }
  impl_->thread.join();
  impl_->ctx.stop();
  impl_->is_connected.store(false);
}

Status Client::publish(std::string_view subject, std::string_view payload, std::string_view reply,
                       std::string_view headers) {
  if (!valid_subject(subject) || (!reply.empty() && !valid_subject(reply))) {
    return invalid_argument("NATS: bad subject '" + std::string(subject.substr(0, 200)) + "'");
  }
  const size_t size = payload.size() + headers.size();
  if (size > impl_->server_max_payload.load()) {
    return invalid_argument("NATS: a message of " + std::to_string(size) +
                            " bytes is above the server's max_payload of " +
                            std::to_string(impl_->server_max_payload.load()));
  }
  std::lock_guard lock(impl_->mu);
  if (impl_->closing.load()) return failed_precondition("NATS client closed");
  if (impl_->pending.size() + size > impl_->options.max_pending_bytes) {
    ++impl_->stats.dropped;
    return resource_exhausted("NATS: the outbound buffer is full (" +
                              std::to_string(impl_->options.max_pending_bytes) + " bytes)");
  }
  if (headers.empty()) {
    append_pub(impl_->pending, subject, reply, payload);
  } else {
    append_hpub(impl_->pending, subject, reply, headers, payload);
  }
  ++impl_->stats.msgs_out;
  impl_->stats.bytes_out += size;
  impl_->post_wake_locked();
  return ok_status();
}

Result<uint64_t> Client::subscribe(std::string subject, Handler handler, std::string queue) {
  if (!valid_subject(subject, true)) {
    return invalid_argument("NATS: bad subscription subject '" + subject.substr(0, 200) + "'");
  }
  if (!queue.empty() && !valid_subject(queue)) return invalid_argument("NATS: bad queue group");
  auto sub = std::make_shared<Subscription>(Subscription{std::move(subject), std::move(queue), std::move(handler)});
  std::lock_guard lock(impl_->mu);
  const uint64_t sid = impl_->next_sid++;
  impl_->subs[sid] = sub;
  if (impl_->up) {
    append_sub(impl_->pending, sub->subject, sub->queue, sid);
    impl_->post_wake_locked();
  }
  return sid;
}

void Client::unsubscribe(uint64_t sid) {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->subs.erase(sid) == 0) return;
    if (impl_->up) {
      append_unsub(impl_->pending, sid);
      impl_->post_wake_locked();
    }
  }
  // A handler already running on the client's thread finishes before this returns, so the
  // caller may destroy what the handler uses. (Bounded: a handler must not block.)
  if (impl_->thread.joinable() && std::this_thread::get_id() != impl_->thread.get_id() &&
      !impl_->ctx.stopped()) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> f = done->get_future();
    net::post(impl_->ctx, [done] { done->set_value(); });
    (void)f.wait_for(std::chrono::seconds(2));
  }
}

std::string Client::make_inbox() {
  std::lock_guard lock(impl_->mu);
  return impl_->inbox_prefix + std::to_string(++impl_->next_inbox);
}

void Client::add_inbox(const std::string& inbox, Handler handler) {
  auto h = std::make_shared<Handler>(std::move(handler));
  std::lock_guard lock(impl_->mu);
  impl_->inboxes[inbox] = std::move(h);
}

void Client::remove_inbox(const std::string& inbox) {
  std::lock_guard lock(impl_->mu);
  impl_->inboxes.erase(inbox);
}

Status Client::flush(std::chrono::milliseconds timeout) {
  auto waiter = std::make_shared<std::promise<bool>>();
  std::future<bool> done = waiter->get_future();
  {
    std::lock_guard lock(impl_->mu);
    if (!impl_->up) return unavailable("NATS: not connected");
    impl_->ping_requests.push_back(waiter);
    impl_->post_wake_locked();
  }
  if (done.wait_for(timeout) != std::future_status::ready) {
    return deadline_exceeded("NATS: no PONG within " + std::to_string(timeout.count()) + " ms");
  }
  return done.get() ? ok_status() : unavailable("NATS: the connection dropped during flush");
}

void Client::set_state_callback(std::function<void(bool)> callback) {
  impl_->state_callback = std::move(callback);
}

bool Client::connected() const { return impl_->is_connected.load(); }

net::any_io_executor Client::executor() const { return impl_->ctx.get_executor(); }

size_t Client::max_payload() const { return impl_->server_max_payload.load(); }

ClientStats Client::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

std::chrono::nanoseconds Client::thread_cpu_time() const {
  return infera::thread_cpu_time(impl_->thread);
}

std::string Client::server() const {
  std::lock_guard lock(impl_->mu);
  return impl_->current_server;
}

}  // namespace infera::nats
