#include "infera/http/client.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "infera/common/check.h"
#include "infera/common/log.h"
#include "infera/common/spin_mutex.h"
#include "infera/http/io.h"
#include "infera/http/net.h"
#include "infera/http/stream.h"
#include "infera/http/tls.h"
#include "infera/http/wire.h"

namespace infera::http {

// Named namespace: ClientStream::State and Client::Pool refer to it.
namespace client_internal {

using SteadyTime = std::chrono::steady_clock::time_point;

constexpr size_t kStreamBufferBytes = size_t{8} * 1024;  // one read() of a streamed body, at most

// A pooled connection is reused only on the thread (io_context) that opened it: an exchange's
// reads and writes then complete where its coroutine runs, with no hand-off between threads
// (http/event_loop.h).
struct PoolKey {
  const void* context = nullptr;  // the io_context of the opening coroutine
  std::string endpoint;           // Endpoint::key()
  bool tls = false;               // Endpoint::tls: a plain and a TLS port never share connections
  bool operator==(const PoolKey&) const = default;
};

struct PoolKeyHash {
  size_t operator()(const PoolKey& k) const {
    return std::hash<std::string>{}(k.endpoint) ^ (std::hash<const void*>{}(k.context) * 31) ^
           static_cast<size_t>(k.tls);
  }
};

// The key of the calling coroutine's pool for `to`.
PoolKey pool_key(const net::any_io_executor& executor, const Endpoint& to) {
  return PoolKey{&net::query(executor, net::execution::context), to.key(), to.tls};
}

struct Conn {
  explicit Conn(const net::any_io_executor& executor, PoolKey pool_key)
      : stream(executor), deadline(executor, stream.socket()), key(std::move(pool_key)) {}

  // Never while a read or write of the stream is pending (the owner's coroutine closes it).
  void close() {
    stream.send_close_notify();
    stream.close();
    deadline.stop();
  }

  // An idle pooled connection is reusable when the upstream has not closed it and sent nothing
  // (a non-blocking peek: EAGAIN means open and quiet; over TLS, a close_notify is bytes).
  bool alive() {
    if (!stream.socket().is_open()) return false;
    char c;
    const ssize_t n = ::recv(stream.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && errno == EAGAIN;  // EWOULDBLOCK is the same value on Linux
  }

  Stream stream;      // the socket, and TLS over it for an https endpoint
  Deadline deadline;  // bounds the connection's waits (http/deadline.h)
  beast::flat_buffer buffer;
  const PoolKey key;
  SteadyTime idle_since{};
};

}  // namespace client_internal

using client_internal::Conn;
using client_internal::PoolKey;
using client_internal::SteadyTime;

struct Client::Pool {
  explicit Pool(ClientOptions client_options) : options(client_options) {}

  // The most recently used reusable connection to `key`, or null.
  std::unique_ptr<Conn> take(const PoolKey& key) {
    std::vector<std::unique_ptr<Conn>> dead;
    std::unique_ptr<Conn> found;
    {
      std::lock_guard lock(mu);
      auto it = idle.find(key);
      if (it == idle.end()) return nullptr;
      auto& conns = it->second;
      const SteadyTime now = std::chrono::steady_clock::now();
      while (!conns.empty()) {
        std::unique_ptr<Conn> c = std::move(conns.back());
        conns.pop_back();
        idle_count.fetch_sub(1, std::memory_order_relaxed);
        if (now - c->idle_since <= options.idle_timeout && c->alive()) {
          found = std::move(c);
          break;
        }
        dead.push_back(std::move(c));
      }
    }
    for (auto& c : dead) c->close();
    return found;
  }

  void give_back(std::unique_ptr<Conn> conn) {
    conn->idle_since = std::chrono::steady_clock::now();
    std::unique_ptr<Conn> evicted;
    {
      std::lock_guard lock(mu);
      auto& conns = idle[conn->key];
      conns.push_back(std::move(conn));
      idle_count.fetch_add(1, std::memory_order_relaxed);
      if (conns.size() > options.max_idle_per_endpoint) {
        evicted = std::move(conns.front());  // the least recently used
        conns.erase(conns.begin());
        idle_count.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    if (evicted) evicted->close();
  }

  void clear() {
    std::unordered_map<PoolKey, std::vector<std::unique_ptr<Conn>>, client_internal::PoolKeyHash>
        all;
    {
      std::lock_guard lock(mu);
      all.swap(idle);
      idle_count.store(0, std::memory_order_relaxed);
    }
    for (auto& [key, conns] : all) {
      for (auto& c : conns) c->close();
    }
  }

  // The context of https connections: the options', else the system store's, made once.
  Result<std::shared_ptr<net::ssl::context>> tls_context() {
    if (options.tls_context) return options.tls_context;
    std::lock_guard lock(tls_mu);
    if (!system_tls) {
      Result<std::shared_ptr<net::ssl::context>> made = make_tls_client_context({});
      if (!made.ok()) return made.status();
      system_tls = std::move(*made);
    }
    return system_tls;
  }

  const ClientOptions options;
  std::mutex tls_mu;
  std::shared_ptr<net::ssl::context> system_tls;  // guarded by tls_mu
  SpinMutex mu;
  // guarded by mu
  std::unordered_map<PoolKey, std::vector<std::unique_ptr<Conn>>, client_internal::PoolKeyHash>
      idle;
  std::atomic<uint64_t> connects{0};
  std::atomic<uint64_t> reuses{0};
  std::atomic<uint64_t> stale_retries{0};
  std::atomic<uint64_t> idle_count{0};
};

namespace {

// True when the calling coroutine was cancelled before this call (its client left while it was
// busy elsewhere): the signal was spent, so a new operation would not be cancelled by it.
net::awaitable<bool> caller_cancelled() {
  const net::cancellation_state cs = co_await net::this_coro::cancellation_state;
  co_return cs.cancelled() != net::cancellation_type::none;
}

// Maps an I/O or parse error of an exchange with `to` to a Status.
Status exchange_status(beast::error_code ec, std::string_view phase, const Endpoint& to) {
  std::string what = "upstream " + to.key() + ": " + std::string(phase);
  if (ec == beast::error::timeout) return deadline_exceeded(what + " timed out");
  if (ec == net::error::operation_aborted) return cancelled(what + " cancelled");
  if (ec == bhttp::error::header_limit || ec == bhttp::error::body_limit ||
      ec == bhttp::error::buffer_overflow) {
    return resource_exhausted(what + ": response exceeds a limit");
  }
  if (ec == bhttp::error::end_of_stream) return unavailable(what + ": connection closed");
  if (ec == bhttp::error::partial_message) return data_loss(what + ": response cut short");
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category()) {
    return data_loss(what + ": malformed response (" + ec.message() + ")");
  }
  return unavailable(what + ": " + ec.message());
}

// The upstream closed a connection we took from the pool before answering: the classic race
// with its keep-alive timeout. Worth one retry on a fresh connection.
bool stale_connection_error(beast::error_code ec) {
  // Over TLS: closed without close_notify (OpenSSL's "unexpected eof").
  return ec == bhttp::error::end_of_stream || ec == net::error::eof ||
         ec == net::error::connection_reset || ec == net::error::broken_pipe ||
         ec == net::error::connection_aborted || ec == net::ssl::error::stream_truncated;
}

// The TLS handshake of a new connection to `to`, verifying its certificate (SNI and its name
// set first), within `deadline`. Failures are kUnavailable, kDeadlineExceeded when too slow.
net::awaitable<Status> tls_handshake(Client::Pool& pool, Conn& conn, const Endpoint& to,
                                     SteadyTime deadline) {
  const std::string what = "upstream " + to.key() + ": ";
  Result<std::shared_ptr<net::ssl::context>> context = pool.tls_context();
  if (!context.ok()) co_return unavailable(what + context.status().message());
  Stream::TlsLayer& tls = conn.stream.start_tls(**context);
  if (Status s = prepare_tls_stream(tls, to.host, /*verify=*/true); !s.ok()) {
    co_return unavailable(what + s.message());
  }
  conn.deadline.arm(deadline);
  auto [hec] = co_await tls.async_handshake(net::ssl::stream_base::client, use_nothrow);
  const beast::error_code ec = conn.deadline.disarm(hec);
  if (!ec) co_return ok_status();
  if (ec == beast::error::timeout) co_return deadline_exceeded(what + "TLS handshake timed out");
  if (ec == net::error::operation_aborted) co_return cancelled(what + "TLS handshake cancelled");
  co_return unavailable(what + tls_error_text(ec, tls.native_handle()));
}

net::awaitable<ClientResult<std::unique_ptr<Conn>>> connect(Client::Pool& pool,
                                                            const Endpoint& to,
                                                            SteadyTime deadline) {
  const auto executor = co_await net::this_coro::executor;
  std::vector<tcp::endpoint> endpoints;
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(to.host, ec);
  if (!ec) {
    endpoints.emplace_back(address, to.port);
  } else if (to.host == "localhost") {
    endpoints.emplace_back(net::ip::address_v4::loopback(), to.port);
  } else {
    // Names go through the system resolver (its own timeouts apply; Asio cannot cancel a
    // getaddrinfo in flight). Workers normally register as IP:port.
    tcp::resolver resolver(executor);
    auto [rec, results] =
        co_await resolver.async_resolve(to.host, std::to_string(to.port), use_nothrow);
    if (rec || results.empty()) {
      co_return ClientError{invalid_argument("cannot resolve upstream host '" + to.host + "'"),
                            true};
    }
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  auto conn = std::make_unique<Conn>(executor, client_internal::pool_key(executor, to));
  // connect_timeout bounds the TCP connect and the TLS handshake together.
  const SteadyTime connect_deadline =
      std::min(std::chrono::steady_clock::now() + pool.options.connect_timeout, deadline);
  conn->deadline.arm(connect_deadline);
  auto [connect_ec, connected] =
      co_await net::async_connect(conn->stream.socket(), endpoints, use_nothrow);
  if (const beast::error_code cec = conn->deadline.disarm(connect_ec)) {
    co_return ClientError{exchange_status(cec, "connect", to), true};
  }
  beast::error_code ignored;
  conn->stream.socket().set_option(tcp::no_delay(true), ignored);
  conn->stream.socket().non_blocking(true, ignored);  // io::write sends at once when it fits
  if (to.tls) {
    Status handshake = co_await tls_handshake(pool, *conn, to, connect_deadline);
    if (!handshake.ok()) {
      conn->close();
      co_return ClientError{std::move(handshake), true};
    }
  }
  pool.connects.fetch_add(1, std::memory_order_relaxed);
  co_return std::move(conn);
}

Result<bhttp::request<bhttp::string_body>> build_request(const Endpoint& to, Request& request) {
  if (request.method == Method::kOther) return invalid_argument("unsupported request method");
  if (request.target.empty() || request.target.front() != '/') {
    return invalid_argument("request target must start with '/'");
  }
  bhttp::request<bhttp::string_body> req;
  req.method(wire::to_verb(request.method));
  req.target(request.target);
  req.version(11);
  wire::set_headers(req.base(), request.headers);
  if (req.find(bhttp::field::host) == req.end()) req.set(bhttp::field::host, to.key());
  req.body() = std::move(request.body);
  req.keep_alive(true);
  req.prepare_payload();
  return req;
}

// Takes a pooled connection or opens one, writes `req`, and reads the response header into
// `parser` (constructed by `make_parser` for each attempt). Retries once on a fresh connection
// when a pooled one turns out to have been closed by the upstream.
template <typename Parser, typename MakeParser>
net::awaitable<ClientResult<std::unique_ptr<Conn>>> send_and_read_header(
    Client::Pool& pool, const Endpoint& to, bhttp::request<bhttp::string_body>& req,
    std::unique_ptr<Parser>& parser, MakeParser make_parser, SteadyTime deadline) {
  const PoolKey pooled = client_internal::pool_key(co_await net::this_coro::executor, to);
  const std::string& key = pooled.endpoint;
  // The head and the body go out in one gathered write, the same bytes on every attempt.
  const std::string head = wire::serialize_head(req.base());
  const std::array<net::const_buffer, 2> request_bytes{net::buffer(head), net::buffer(req.body())};
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<Conn> conn = attempt == 0 ? pool.take(pooled) : nullptr;
    const bool reused = conn != nullptr;
    if (reused) {
      pool.reuses.fetch_add(1, std::memory_order_relaxed);
    } else {
      auto opened = co_await connect(pool, to, deadline);
      if (!opened.ok()) co_return opened.error();
      conn = std::move(opened.value());
    }
    // A cancellation that arrived while no wait was pending (between two of them) is only
    // recorded in the coroutine's state: look before each wait, or it would be missed.
    if (co_await caller_cancelled()) {
      conn->close();
      co_return ClientError{cancelled("upstream " + key + ": cancelled"), true};
    }
    const beast::error_code wec = co_await io::write(conn->stream, conn->deadline, request_bytes,
                                                     pool.options.write_timeout, deadline);
    if (wec) {
      conn->close();
      if (reused && stale_connection_error(wec)) {
        pool.stale_retries.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      co_return ClientError{exchange_status(wec, "sending the request", to), true};
    }
    parser = make_parser();
    if (co_await caller_cancelled()) {
      conn->close();
      co_return ClientError{cancelled("upstream " + key + ": cancelled"), true};
    }
    conn->deadline.arm(pool.options.response_timeout, deadline);
    auto [header_ec, read] =
        co_await bhttp::async_read_header(conn->stream, conn->buffer, *parser, use_nothrow);
    if (const beast::error_code rec = conn->deadline.disarm(header_ec)) {
      const bool before_first_byte = !parser->got_some() && conn->buffer.size() == 0;
      conn->close();
      if (reused && before_first_byte && stale_connection_error(rec)) {
        pool.stale_retries.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      co_return ClientError{exchange_status(rec, "waiting for the response", to),
                            before_first_byte};
    }
    co_return std::move(conn);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Endpoint

std::string Endpoint::key() const {
  std::string out;
  if (host.find(':') != std::string::npos) {
    out = "[" + host + "]";
  } else {
    out = host;
  }
  out += ':';
  out += std::to_string(port);
  return out;
}

Result<Endpoint> parse_endpoint(std::string_view text) {
  std::string_view rest = text;
  Endpoint e;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
    e.tls = true;
  } else if (rest.find("://") != std::string_view::npos) {
    return invalid_argument("unsupported URL scheme in '" + std::string(text) + "'");
  }
  rest = rest.substr(0, rest.find('/'));
  std::string_view port_text;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return invalid_argument("expected [v6]:port in '" + std::string(text) + "'");
    }
    e.host.assign(rest.substr(1, close - 1));
    port_text = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) {
      return invalid_argument("expected host:port in '" + std::string(text) + "'");
    }
    e.host.assign(rest.substr(0, colon));
    port_text = rest.substr(colon + 1);
  }
  if (e.host.empty()) return invalid_argument("empty host in '" + std::string(text) + "'");
  uint32_t port = 0;
  if (port_text.empty() || port_text.size() > 5) {
    return invalid_argument("bad port in '" + std::string(text) + "'");
  }
  for (char c : port_text) {
    if (c < '0' || c > '9') return invalid_argument("bad port in '" + std::string(text) + "'");
    port = port * 10 + static_cast<uint32_t>(c - '0');
  }
  if (port == 0 || port > 65535) return invalid_argument("bad port in '" + std::string(text) + "'");
  e.port = static_cast<uint16_t>(port);
  return e;
}

// ---------------------------------------------------------------------------------------------
// ClientStream

struct ClientStream::State {
  std::shared_ptr<Client::Pool> pool;
  std::unique_ptr<Conn> conn;
  std::unique_ptr<bhttp::response_parser<bhttp::buffer_body>> parser;
  Endpoint endpoint;
  int status = 0;
  Headers headers;
  bool done = false;
  bool keep_alive = false;
  std::optional<Status> pending_error;  // a parse error found after a piece was read
  std::array<char, client_internal::kStreamBufferBytes> buffer;

  // The body is complete: the connection goes back to the pool when the upstream keeps it.
  void complete() {
    done = true;
    if (!conn) return;
    if (keep_alive && conn->buffer.size() == 0) {
      pool->give_back(std::move(conn));
    } else {
      conn->close();
      conn.reset();
    }
  }

  void drop() {
    if (!conn) return;
    conn->close();
    conn.reset();
  }
};

ClientStream::ClientStream(std::unique_ptr<State> state) : state_(std::move(state)) {}
ClientStream::ClientStream(ClientStream&&) noexcept = default;
ClientStream& ClientStream::operator=(ClientStream&& other) noexcept {
  if (this != &other) {
    if (state_) state_->drop();
    state_ = std::move(other.state_);
  }
  return *this;
}
ClientStream::~ClientStream() {
  if (state_) state_->drop();
}

int ClientStream::status() const {
  return state_->status;
}
const Headers& ClientStream::headers() const {
  return state_->headers;
}
bool ClientStream::done() const {
  return state_->done;
}
bool ClientStream::buffered() const {
  const State& s = *state_;
  return s.done || s.parser->is_done() || (s.conn && s.conn->buffer.size() > 0);
}
void ClientStream::close() {
  state_->drop();
}

net::awaitable<Result<std::string_view>> ClientStream::read(SteadyTime deadline) {
  State& s = *state_;
  if (s.done) co_return std::string_view();
  if (!s.conn) co_return cancelled("upstream " + s.endpoint.key() + ": stream closed");
  if (co_await caller_cancelled()) {
    s.drop();
    co_return cancelled("upstream " + s.endpoint.key() + ": cancelled");
  }
  if (s.pending_error) {
    const Status error = *s.pending_error;
    s.pending_error.reset();
    s.drop();
    co_return error;
  }
  // Every chunk already received goes into a piece (up to the buffer), not one chunk per call: a
  // relay that fell behind catches up with one write instead of one per chunk. (Beast's eager
  // mode would do this inside async_read_some, but then waits for the socket when the received
  // bytes end inside a chunk header.) A parse error is reported with the next read, after the
  // piece's bytes.
  const auto take_buffered = [&s] {
    beast::error_code more;
    if (!wire::parse_buffered(*s.parser, s.conn->buffer, /*header_only=*/false, more) && more) {
      s.pending_error = exchange_status(more, "reading the response body", s.endpoint);
    }
  };
  auto& body = s.parser->get().body();
  body.data = s.buffer.data();
  body.size = s.buffer.size();
  // What arrived with the header or the previous piece is served without a read (Beast's
  // async_read_some would post its completion for it: one more event-loop turn).
  take_buffered();
  for (;;) {
    const size_t got = s.buffer.size() - s.parser->get().body().size;
    if (s.parser->is_done()) s.complete();
    if (got > 0 || s.done) co_return std::string_view(s.buffer.data(), got);
    if (s.pending_error) {
      const Status error = *s.pending_error;
      s.pending_error.reset();
      s.drop();
      co_return error;
    }
    s.conn->deadline.arm(s.pool->options.read_timeout, deadline);
    auto [read_ec, n] =
        co_await bhttp::async_read_some(s.conn->stream, s.conn->buffer, *s.parser, use_nothrow);
    beast::error_code ec = s.conn->deadline.disarm(read_ec);
    if (ec == bhttp::error::need_buffer) ec = {};  // the piece filled our buffer: not an error
    if (ec) {
      s.drop();
      co_return exchange_status(ec, "reading the response body", s.endpoint);
    }
    take_buffered();
  }
}

// ---------------------------------------------------------------------------------------------
// Client

Client::Client(ClientOptions options) : pool_(std::make_shared<Pool>(options)) {}

Client::~Client() {
  pool_->clear();
}

const ClientOptions& Client::options() const {
  return pool_->options;
}

ClientStats Client::stats() const {
  ClientStats s;
  s.connects = pool_->connects.load(std::memory_order_relaxed);
  s.reuses = pool_->reuses.load(std::memory_order_relaxed);
  s.stale_retries = pool_->stale_retries.load(std::memory_order_relaxed);
  s.idle = pool_->idle_count.load(std::memory_order_relaxed);
  return s;
}

net::awaitable<ClientResult<Response>> Client::request(const Endpoint& to, Request request,
                                                      SteadyTime deadline) {
  Pool& pool = *pool_;
  if (co_await caller_cancelled()) co_return ClientError{cancelled("request cancelled"), true};
  const bool head = request.method == Method::kHead;
  auto req = build_request(to, request);
  if (!req.ok()) co_return ClientError{req.status(), true};
  using Parser = bhttp::response_parser<bhttp::string_body>;
  std::unique_ptr<Parser> parser;
  auto sent = co_await send_and_read_header(pool, to, req.value(), parser, [&] {
    auto p = std::make_unique<Parser>();
    p->header_limit(static_cast<std::uint32_t>(pool.options.max_header_bytes));
    p->body_limit(static_cast<std::uint64_t>(pool.options.max_body_bytes));
    p->skip(head);
    return p;
  }, deadline);
  if (!sent.ok()) co_return sent.error();
  std::unique_ptr<Conn> conn = std::move(sent.value());
  beast::error_code buffered_ec;
  if (!wire::parse_buffered(*parser, conn->buffer, /*header_only=*/false, buffered_ec) &&
      buffered_ec) {
    conn->close();
    co_return ClientError{exchange_status(buffered_ec, "reading the response body", to), false};
  }
  while (!parser->is_done()) {
    conn->deadline.arm(pool.options.read_timeout, deadline);
    auto [read_ec, n] =
        co_await bhttp::async_read_some(conn->stream, conn->buffer, *parser, use_nothrow);
    if (const beast::error_code ec = conn->deadline.disarm(read_ec)) {
      conn->close();
      co_return ClientError{exchange_status(ec, "reading the response body", to), false};
    }
  }
  auto& msg = parser->get();
  Response response;
  response.status = static_cast<int>(msg.result_int());
  wire::copy_headers(msg.base(), response.headers);
  const bool keep_alive = msg.keep_alive();
  response.body = std::move(msg.body());
  if (keep_alive && conn->buffer.size() == 0) {
    pool.give_back(std::move(conn));
  } else {
    conn->close();
  }
  co_return response;
}

net::awaitable<ClientResult<ClientStream>> Client::stream(const Endpoint& to, Request request,
                                                          SteadyTime deadline) {
  Pool& pool = *pool_;
  if (co_await caller_cancelled()) co_return ClientError{cancelled("request cancelled"), true};
  const bool head = request.method == Method::kHead;
  auto req = build_request(to, request);
  if (!req.ok()) co_return ClientError{req.status(), true};
  using Parser = bhttp::response_parser<bhttp::buffer_body>;
  // Default-initialised: its 8 KiB read buffer is not zero-filled first (value initialisation,
  // make_unique's, cost 3 % of a proxied request's instructions).
  auto state = std::make_unique_for_overwrite<ClientStream::State>();
  auto sent = co_await send_and_read_header(pool, to, req.value(), state->parser, [&] {
    auto p = std::make_unique<Parser>();
    p->header_limit(static_cast<std::uint32_t>(pool.options.max_header_bytes));
    p->body_limit(boost::none);  // a stream is bounded in time (read_timeout), not in size
    p->skip(head);
    return p;
  }, deadline);
  if (!sent.ok()) co_return sent.error();
  state->pool = pool_;
  state->conn = std::move(sent.value());
  state->endpoint = to;
  const auto& msg = state->parser->get();
  state->status = static_cast<int>(msg.result_int());
  wire::copy_headers(msg.base(), state->headers);
  state->keep_alive = msg.keep_alive();
  if (state->parser->is_done()) state->complete();  // no body (204, HEAD, Content-Length: 0)
  co_return ClientStream(std::move(state));
}

}  // namespace infera::http
