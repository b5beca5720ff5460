#include "infera/http/server.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>

#include "infera/common/check.h"
#include "infera/common/log.h"
#include "infera/http/error.h"
#include "infera/http/io.h"
#include "infera/http/net.h"
#include "infera/http/stream.h"
#include "infera/http/wire.h"

namespace infera::http {

// ---------------------------------------------------------------------------------------------
// Connection and exchange state (named namespace: ResponseWriter::State refers to it).
namespace server_internal {

// First read of a request: room for the headers and a typical body (a 1,000-token prompt is
// 5-7 KiB), so that one recvmsg takes both; the buffer keeps its capacity between requests.
constexpr size_t kReadBytes = size_t{16} * 1024;
constexpr size_t kMaxIdleBufferBytes = size_t{16} * 1024;  // shrink a keep-alive buffer beyond this
constexpr size_t kMaxLingerBytes = size_t{1024} * 1024;    // drained after an error answer, at most
constexpr int kAcceptBurst = 64;                           // connections taken per accept-loop turn
constexpr std::chrono::seconds kForceCloseWait{5};         // after the drain bound of shutdown()

struct Connection {
  Connection(tcp::socket s, uint64_t connection_id)
      : stream(std::move(s)),
        deadline(stream.socket().get_executor(), stream.socket()),
        id(connection_id) {}

  // Strand only.
  void close() {
    stream.close();
    deadline.stop();
  }
  // Strand only, and only where no read or write of the stream is pending: over TLS, says
  // close_notify first (a body that ends with the connection is then known to be whole).
  void close_gracefully() {
    stream.send_close_notify();
    close();
  }
  tcp::socket& socket() { return stream.socket(); }

  // Executor: the loop thread this connection was given at accept (its own io_context, run by
  // that one thread, so everything on it is serialised as a strand would: "strand only" below).
  Stream stream;              // the socket, and TLS over it when the server has a TLS context
  Deadline deadline;          // strand only: bounds the connection's waits (http/deadline.h)
  beast::flat_buffer buffer;  // bytes read and not yet parsed (may hold a pipelined request)
  const uint64_t id;
  bool busy = false;         // strand only: a request is being read or served
  bool client_gone = false;  // strand only: EOF/reset seen while the handler ran, or a failed write
  bool in_handler = false;   // strand only: the route's handler is running
  bool peer_closed = false;  // strand only: EOF/reset seen by the watch after the handler ended
  bool watching = false;     // strand only: the client-gone peek is pending on the socket
  char peeked = 0;           // the watch's one-byte peek buffer (never consumed)
  // Bound to the session coroutine: emitted (terminal) when the client leaves while the handler
  // runs, it reaches the handler's pending operation.
  net::cancellation_signal handler_cancel;
};

}  // namespace server_internal

using server_internal::Connection;

namespace {

// The origin to allow for a request whose Origin header is `origin`: itself when `allowed` lists
// it or "*"; "" otherwise (no header, or not allowed).
std::string_view cors_origin(const std::vector<std::string>& allowed, std::string_view origin) {
  if (origin.empty() || origin.size() > 256) return {};
  for (const std::string& a : allowed) {
    if (a == "*" || a == origin) return origin;
  }
  return {};
}

void add_cors_headers(Headers& headers, std::string_view origin) {
  if (origin.empty()) return;
  headers.push_back({"Access-Control-Allow-Origin", std::string(origin)});
  headers.push_back({"Access-Control-Expose-Headers", "X-Request-Id, Retry-After"});
  headers.push_back({"Vary", "Origin"});
}

// The headers a preflight may ask for, echoed when they are plain header names (letters,
// digits, '-', '_', separated by commas and spaces) and short; else the ones clients send.
std::string preflight_headers(std::string_view requested) {
  const bool plain = requested.size() <= 1024 &&
                     std::all_of(requested.begin(), requested.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
                              c == ',' || c == ' ';
                     });
  return plain && !requested.empty() ? std::string(requested)
                                     : std::string("authorization, content-type, x-request-id");
}

// The answer to a CORS preflight: 204 with what the origin may do, or 403.
Response preflight_response(std::string_view origin, std::string_view requested_headers) {
  if (origin.empty()) {
    return error_response(permission_denied("this origin is not allowed (--allowed-origins)"));
  }
  Response r;
  r.status = 204;
  add_cors_headers(r.headers, origin);
  r.headers.push_back({"Access-Control-Allow-Methods", "GET, POST, OPTIONS"});
  r.headers.push_back({"Access-Control-Allow-Headers", preflight_headers(requested_headers)});
  r.headers.push_back({"Access-Control-Max-Age", "600"});
  return r;
}

}  // namespace

struct ResponseWriter::State {
  Connection& conn;
  const ServerOptions& options;
  const std::atomic<bool>& draining;  // the server's: a draining server ends keep-alive
  bool keep_alive;  // as the client asked and the server allows; fixed by write_head
  bool chunked;     // HTTP/1.1; a 1.0 client gets the body until EOF
  bool started = false;
  bool finished = false;
  bool failed = false;         // a write failed: the connection is closed
  bool handler_threw = false;  // a started stream is then cut, not finished: a truncated body
  // The status line and headers of write_head(), sent with the first body bytes (or by finish()):
  // one send instead of two, and the client is woken once.
  std::string pending_head;
  std::string_view cors_origin;  // the request's allowed origin (cors_origin()); "": none

  Status after_write(beast::error_code ec) {
    if (!ec) return ok_status();
    failed = true;
    conn.client_gone = true;
    conn.close();
    if (ec == beast::error::timeout) return deadline_exceeded("write to client timed out");
    return cancelled("client disconnected");
  }
};

bool ResponseWriter::started() const {
  return state_.started;
}
bool ResponseWriter::finished() const {
  return state_.finished;
}
bool ResponseWriter::client_gone() const {
  return state_.conn.client_gone;
}

net::awaitable<Status> ResponseWriter::write_head(int status, Headers headers) {
  State& s = state_;
  INFERA_CHECK(!s.started);
  INFERA_CHECK(status >= 100 && status <= 999);
  s.started = true;
  if (s.conn.client_gone || s.failed) co_return cancelled("client disconnected");
  bhttp::response<bhttp::empty_body> res;
  res.version(11);
  res.result(static_cast<unsigned>(status));
  if (res.result() == bhttp::status::unknown) res.reason(wire::reason_phrase(status));
  add_cors_headers(headers, s.cors_origin);
  wire::set_headers(res.base(), headers);
  s.keep_alive = s.keep_alive && !s.draining.load();
  res.keep_alive(s.keep_alive);
  if (s.chunked) res.chunked(true);
  s.pending_head = wire::serialize_head(res.base());
  co_return ok_status();
}

net::awaitable<Status> ResponseWriter::write_head(int status, std::string_view content_type) {
  Headers headers;
  headers.push_back(Header{"Content-Type", std::string(content_type)});
  co_return co_await write_head(status, std::move(headers));
}

net::awaitable<Status> ResponseWriter::write(std::string_view bytes, bool last) {
  State& s = state_;
  INFERA_CHECK(s.started && !s.finished);
  if (last) s.finished = true;
  if (s.conn.client_gone || s.failed) co_return cancelled("client disconnected");
  if (bytes.empty() && !last) co_return ok_status();
  // Gathered into one write: the pending head, the chunk ("<hex size>\r\n" <bytes> "\r\n"; an
  // HTTP/1.0 body goes as is), the last chunk.
  std::array<net::const_buffer, 5> buffers;
  size_t count = 0;
  if (!s.pending_head.empty()) buffers[count++] = net::buffer(s.pending_head);
  std::array<char, 24> size_line{};
  if (!bytes.empty()) {
    if (s.chunked) {
      static constexpr char kHex[] = "0123456789abcdef";
      size_t len = bytes.size();
      size_t pos = size_line.size() - 2;
      size_line[pos] = '\r';
      size_line[pos + 1] = '\n';
      do {
        size_line[--pos] = kHex[len & 0xF];
        len >>= 4;
      } while (len != 0);
      buffers[count++] = net::buffer(size_line.data() + pos, size_line.size() - pos);
    }
    buffers[count++] = net::buffer(bytes.data(), bytes.size());
    if (s.chunked) buffers[count++] = net::buffer("\r\n", 2);
  }
  if (last && s.chunked) buffers[count++] = net::buffer("0\r\n\r\n", 5);
  if (count == 0) co_return ok_status();  // an HTTP/1.0 body ending with nothing left to send
  const beast::error_code ec =
      co_await io::write(s.conn.stream, s.conn.deadline,
                         std::span<const net::const_buffer>(buffers.data(), count),
                         s.options.write_timeout);
  s.pending_head.clear();
  co_return s.after_write(ec);
}

net::awaitable<Status> ResponseWriter::flush() {
  State& s = state_;
  INFERA_CHECK(s.started);
  if (s.conn.client_gone || s.failed) co_return cancelled("client disconnected");
  if (s.pending_head.empty()) co_return ok_status();
  const beast::error_code ec = co_await io::write(
      s.conn.stream, s.conn.deadline, net::buffer(s.pending_head), s.options.write_timeout);
  s.pending_head.clear();
  co_return s.after_write(ec);
}

net::awaitable<Status> ResponseWriter::finish() {
  State& s = state_;
  INFERA_CHECK(s.started);
  if (s.finished) co_return ok_status();
  co_return co_await write(std::string_view(), true);
}

// ---------------------------------------------------------------------------------------------
// Routes

Routes& Routes::add(Method method, std::string path, Handler handler) {
  INFERA_CHECK(handler != nullptr);
  for (const Entry& e : entries_)
    INFERA_CHECK(!(e.method == method && !e.prefix && e.path == path));
  entries_.push_back(Entry{method, std::move(path), false, std::move(handler)});
  return *this;
}

Routes& Routes::add_prefix(Method method, std::string prefix, Handler handler) {
  INFERA_CHECK(handler != nullptr);
  for (const Entry& e : entries_)
    INFERA_CHECK(!(e.method == method && e.prefix && e.path == prefix));
  entries_.push_back(Entry{method, std::move(prefix), true, std::move(handler)});
  return *this;
}

const Handler* Routes::find(Method method, std::string_view path, bool* path_known) const {
  const Entry* best = nullptr;
  bool known = false;
  for (const Entry& e : entries_) {
    const bool match = e.prefix ? path.starts_with(e.path) : path == e.path;
    if (!match) continue;
    known = true;
    if (e.method != method) continue;
    if (best == nullptr || (best->prefix && (!e.prefix || e.path.size() > best->path.size()))) {
      best = &e;
    }
  }
  if (path_known != nullptr) *path_known = known;
  return best != nullptr ? &best->handler : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Server

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Impl(EventLoop& event_loop, ServerOptions server_options, Routes route_table)
      : loop(event_loop),
        options(std::move(server_options)),
        limits{options.max_header_bytes, options.max_body_bytes},
        routes(std::move(route_table)),
        acceptor(loop.context().get_executor()) {}

  net::awaitable<void> accept_loop();
  void start_session(tcp::socket socket);
  // `self` keeps the server state alive for as long as the connection's coroutine frame exists.
  net::awaitable<void> session(std::shared_ptr<Impl> self, std::shared_ptr<Connection> conn);
  // The TLS handshake of a new connection, within `deadline`; false when it failed (counted).
  net::awaitable<bool> handshake(Connection& conn, Deadline::Clock::time_point deadline);
  net::awaitable<bool> serve_one(const std::shared_ptr<Connection>& conn_ptr);
  net::awaitable<Response> run_handler(const Handler& handler, Request& request,
                                       ResponseWriter& writer, ResponseWriter::State& state);
  static void watch_client(const std::shared_ptr<Connection>& conn);
  net::awaitable<bool> write_response(Connection& conn, Response response, bool keep_alive,
                                      unsigned version, bool head = false);
  net::awaitable<void> reject(Connection& conn, const RequestError& error);
  void remove(uint64_t id);

  EventLoop& loop;
  const ServerOptions options;
  const RequestLimits limits;
  const Routes routes;
  tcp::acceptor acceptor;  // on the loop's first thread
  std::atomic<bool> draining{false};

  std::mutex mu;
  std::condition_variable all_closed;
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> connections;  // guarded by mu
  uint64_t next_id = 0;                                                   // guarded by mu
  bool shut_down = false;                                                 // guarded by mu

  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> rejected{0};
  std::atomic<uint64_t> disconnects{0};
  std::atomic<uint64_t> tls_failures{0};
};

namespace {

// The peer has closed its side of `socket` (its FIN arrived, whatever bytes precede it), without
// reading or waiting.
bool peer_hung_up(tcp::socket& socket) {
  pollfd p{socket.native_handle(), POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// Over TLS, the watch's bytes while a handler runs: the client's closing alert (close_notify,
// or a fatal one), or its FIN behind them. An alert is a record of type 21 in TLS 1.2; in TLS
// 1.3 every record looks like application data (23), and an alert's is exactly 19 bytes (the
// 2-byte alert, its inner type, a 16-byte AEAD tag: RFC 8446 section 5.2), smaller than any
// request. (A pipelined request whose start OpenSSL already buffered could in theory look like
// one; pipelining clients are rare, and the only cost is that request.)
bool tls_peer_closing(tcp::socket& socket) {
  std::array<unsigned char, 5> h{};
  const ssize_t n = ::recv(socket.native_handle(), h.data(), h.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(h.size())) {
    const unsigned length = (unsigned{h[3]} << 8) | h[4];
    if (h[0] == 21 || (h[0] == 23 && length == 19)) return true;
  }
  return peer_hung_up(socket);
}

// Every co_spawn of the server completes here: an exception is a bug worth a log line, never a
// crash of the process.
void log_escaped(const std::exception_ptr& e, std::string_view where) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    INFERA_LOG(kError, "http").msg("exception escaped").kv("where", where).kv("what", ex.what());
  } catch (...) {
    INFERA_LOG(kError, "http").msg("unknown exception escaped").kv("where", where);
  }
}

}  // namespace

net::awaitable<void> Server::Impl::accept_loop() {
  for (;;) {
    auto [ec, socket] =
        co_await acceptor.async_accept(loop.next_context().get_executor(), use_nothrow);
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      INFERA_LOG(kWarn, "http").msg("accept failed").kv("error", ec.message());
      // Out of descriptors and the like: back off instead of spinning.
      net::steady_timer backoff(acceptor.get_executor(), std::chrono::milliseconds(50));
      co_await backoff.async_wait(use_nothrow);
      continue;
    }
    start_session(std::move(socket));
    // Take what else waits in the backlog now (the acceptor is non-blocking: would_block ends
    // the burst). Under load each async accept waits a whole turn of the event loop's ready
    // handlers, so one connection per turn lets the backlog, and clients' connect times, grow.
    for (int i = 0; i < server_internal::kAcceptBurst; ++i) {
      tcp::socket more(loop.next_context().get_executor());
      beast::error_code more_ec;
      acceptor.accept(more, more_ec);
      if (more_ec) break;
      start_session(std::move(more));
    }
  }
}

void Server::Impl::start_session(tcp::socket socket) {
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  socket.non_blocking(true, ignored);  // io::write sends at once when the socket takes it all
  if (options.socket_send_buffer_bytes > 0) {
    socket.set_option(net::socket_base::send_buffer_size(options.socket_send_buffer_bytes),
                      ignored);
  }
  std::shared_ptr<Connection> conn;
  {
    std::lock_guard lock(mu);
    conn = std::make_shared<Connection>(std::move(socket), ++next_id);
    connections.emplace(conn->id, conn);
  }
  accepted.fetch_add(1, std::memory_order_relaxed);
  if (options.tls) conn->stream.start_tls(*options.tls);
  auto executor = conn->socket().get_executor();
  // The session's cancellation slot is the connection's: the client-gone watch cancels the
  // handlers through it (asio keeps one cancellation state per spawned coroutine, shared by the
  // coroutines it awaits). The completion holds the connection: the state refers to its signal
  // until the spawned coroutine's last step.
  auto slot = conn->handler_cancel.slot();
  net::co_spawn(executor, session(shared_from_this(), conn),
                net::bind_cancellation_slot(slot, [conn](const std::exception_ptr& e) {
                  log_escaped(e, "connection");
                }));
}

void Server::Impl::remove(uint64_t id) {
  std::lock_guard lock(mu);
  connections.erase(id);
  if (connections.empty()) all_closed.notify_all();
}

net::awaitable<void> Server::Impl::session(std::shared_ptr<Impl> self,
                                           std::shared_ptr<Connection> conn) {
  (void)self;
  // Cancellation (client gone) reaches a handler as operation_aborted results of its pending
  // operation, never as an exception thrown at its next co_await.
  co_await net::this_coro::throw_if_cancelled(false);
  bool first = true;
  // A new connection has header_timeout, from its accept, for its TLS handshake and its first
  // request's headers; a kept-alive one idle_timeout to start the next request.
  const Deadline::Clock::time_point first_deadline =
      Deadline::Clock::now() + options.header_timeout;
  try {
    if (conn->stream.is_tls() && !co_await handshake(*conn, first_deadline)) {
      conn->close();
      remove(conn->id);
      co_return;
    }
    for (;;) {
      conn->busy = false;
      if (draining.load()) break;
      if (conn->buffer.size() == 0) {
        if (conn->buffer.capacity() > server_internal::kMaxIdleBufferBytes) {
          conn->buffer.shrink_to_fit();
        }
        if (first) {
          conn->deadline.arm(first_deadline);
        } else {
          conn->deadline.arm(options.idle_timeout);
        }
        auto [ec, n] = co_await conn->stream.async_read_some(
            conn->buffer.prepare(server_internal::kReadBytes), use_nothrow);
        if (conn->deadline.disarm(ec)) break;  // EOF, idle timeout, or closed by shutdown
        conn->buffer.commit(n);
      }
      first = false;
      conn->busy = true;
      if (!co_await serve_one(conn) || conn->peer_closed) break;
    }
  } catch (const std::exception& e) {
    // Allocation failure or a Beast precondition: close this connection, keep the server.
    INFERA_LOG(kError, "http").msg("connection failed").kv("what", e.what());
  }
  conn->close_gracefully();
  remove(conn->id);
}

net::awaitable<bool> Server::Impl::handshake(Connection& conn,
                                             Deadline::Clock::time_point deadline) {
  conn.deadline.arm(deadline);
  auto [hec] = co_await conn.stream.tls().async_handshake(net::ssl::stream_base::server,
                                                          use_nothrow);
  const beast::error_code ec = conn.deadline.disarm(hec);
  if (!ec) co_return true;
  // A plain-HTTP client ("http request"), a client that does not trust the certificate, a
  // scanner, or one too slow: its connection, never the server's concern beyond a count.
  tls_failures.fetch_add(1, std::memory_order_relaxed);
  INFERA_LOG(kDebug, "http")
      .msg("TLS handshake failed")
      .kv("connection", conn.id)
      .kv("error", ec == beast::error::timeout
                       ? std::string("TLS: handshake not completed in time")
                       : tls_error_text(ec, conn.stream.tls().native_handle()));
  co_return false;
}

net::awaitable<bool> Server::Impl::serve_one(const std::shared_ptr<Connection>& conn_ptr) {
  Connection& conn = *conn_ptr;
  wire::RequestParser parser;
  wire::configure(parser, limits);
  {
    // A header already read whole (the usual case: the session's first read takes 16 KiB) is
    // parsed here; only a partial one waits for more bytes.
    beast::error_code ec;
    size_t header_bytes = 0;
    if (!wire::parse_buffered(parser, conn.buffer, /*header_only=*/true, ec, &header_bytes) &&
        !ec) {
      conn.deadline.arm(options.header_timeout);
      auto [rec, n] =
          co_await bhttp::async_read_header(conn.stream, conn.buffer, parser, use_nothrow);
      ec = conn.deadline.disarm(rec);
      header_bytes = n;
    }
    std::optional<RequestError> error;
    if (ec) {
      error = wire::classify_request_error(ec, true);
    } else {
      error = wire::validate_request_header(parser, header_bytes, limits);
      if (!error) parser.eager(true);
    }
    if (ec || error) {
      if (error) co_await reject(conn, *error);
      co_return false;
    }
  }
  beast::error_code body_ec;
  if (!parser.is_done() && !wire::parse_buffered(parser, conn.buffer, false, body_ec) &&
      body_ec) {
    const std::optional<RequestError> error = wire::classify_request_error(body_ec, false);
    if (error) co_await reject(conn, *error);
    co_return false;
  }
  if (!parser.is_done()) {
    const auto& header = parser.get();
    if (header.version() == 11 && iequals(header[bhttp::field::expect], "100-continue")) {
      const beast::error_code ec = co_await io::write(
          conn.stream, conn.deadline,
          net::buffer(std::string_view("HTTP/1.1 100 Continue\r\n\r\n")), options.write_timeout);
      if (ec) co_return false;
    }
    conn.deadline.arm(options.body_timeout);
    auto [rec, n] = co_await bhttp::async_read(conn.stream, conn.buffer, parser, use_nothrow);
    if (const beast::error_code ec = conn.deadline.disarm(rec)) {
      const std::optional<RequestError> error = wire::classify_request_error(ec, false);
      if (error) co_await reject(conn, *error);
      co_return false;
    }
  }
  const bool keep_alive = parser.get().keep_alive();
  const unsigned version = parser.get().version();
  const bool head = parser.get().method() == bhttp::verb::head;
  Request request = wire::take_request(parser);
  requests.fetch_add(1, std::memory_order_relaxed);

  const std::string origin(options.allowed_origins.empty()
                               ? std::string_view()
                               : cors_origin(options.allowed_origins, request.header("Origin")));
  if (!options.allowed_origins.empty() && request.method == Method::kOptions &&
      !request.header("Access-Control-Request-Method").empty()) {
    co_return co_await write_response(
        conn, preflight_response(origin, request.header("Access-Control-Request-Headers")),
        keep_alive && !draining.load(), version, head);
  }
  bool path_known = false;
  const Handler* handler = routes.find(request.method, request.path(), &path_known);
  if (handler == nullptr) {
    rejected.fetch_add(1, std::memory_order_relaxed);
    Response r;
    if (path_known) {
      r = error_response(unimplemented(std::string("method ") +
                                       std::string(method_name(request.method)) +
                                       " is not allowed on this path"),
                         {.origin = ErrorOrigin::kRequestHeader});
    } else {
      r = error_response(not_found("no route for " + std::string(request.path())));
    }
    add_cors_headers(r.headers, origin);
    co_return co_await write_response(conn, std::move(r), keep_alive && !draining.load(), version,
                                      head);
  }

  // HTTP/1.0 has no chunked encoding: a streamed body then ends with the connection.
  const bool chunked = version == 11;
  ResponseWriter::State state{conn, options, draining, keep_alive && chunked, chunked};
  state.cors_origin = origin;
  ResponseWriter writer(state);
  // Run the handler while watching the socket: a client that leaves cancels the handler.
  conn.in_handler = true;
  watch_client(conn_ptr);
  Response response = co_await run_handler(*handler, request, writer, state);
  conn.in_handler = false;
  if (conn.client_gone) {
    disconnects.fetch_add(1, std::memory_order_relaxed);
    co_return false;
  }
  if (writer.started()) {
    if (state.handler_threw) co_return false;  // cut: the client must not take it as complete
    if (!state.failed && !state.finished) (void)co_await writer.finish();
    co_return !state.failed && state.keep_alive && !draining.load();
  }
  add_cors_headers(response.headers, origin);
  co_return co_await write_response(conn, std::move(response), keep_alive && !draining.load(),
                                    version, head);
}

net::awaitable<Response> Server::Impl::run_handler(const Handler& handler, Request& request,
                                                   ResponseWriter& writer,
                                                   ResponseWriter::State& state) {
  bool failed = false;
  try {
    co_return co_await handler(request, writer);
  } catch (const std::exception& e) {
    INFERA_LOG(kError, "http").msg("handler threw").kv("path", request.path()).kv("what", e.what());
    failed = true;
  } catch (...) {
    INFERA_LOG(kError, "http").msg("handler threw").kv("path", request.path());
    failed = true;
  }
  INFERA_CHECK(failed);
  state.handler_threw = true;
  co_return error_response(internal_error("request handler failed"));
}

// The client-gone watch: a one-byte peek (nothing is consumed: the next request's bytes stay
// in the socket for the session's own read), started when a handler starts and left pending
// when it ends. It completes on the socket's next readiness: EOF or a reset while the handler
// runs (or a close by shutdown()) means the client left, and the handler is cancelled; bytes
// mean a pipelined request, and the watch ends (nothing more can be learnt without reading
// them). A watch still pending when the next handler starts serves that one too. EOF seen after
// the handler ended ends the connection once its answer is written (peer_closed; closed now if
// the session already waits for a next request): Asio's epoll reactor reports readiness once
// (edge-triggered, and an empty peek turns its speculative reads off), so the session's own
// next read would wait for the idle timeout in CLOSE-WAIT. No coroutine and no timer: a plain
// completion handler on the connection's thread.
void Server::Impl::watch_client(const std::shared_ptr<Connection>& conn) {
  if (conn->watching) return;
  conn->watching = true;
  conn->socket().async_receive(
      net::buffer(&conn->peeked, 1), tcp::socket::message_peek,
      [conn](beast::error_code ec, size_t /*bytes*/) {
        conn->watching = false;
        // Over TLS, a client that leaves first sends its close_notify: bytes.
        if (!ec && conn->in_handler && conn->stream.is_tls() && tls_peer_closing(conn->socket())) {
          ec = net::error::eof;
        }
        if (!ec) return;
        if (!conn->in_handler) {
          conn->peer_closed = true;
          if (!conn->busy) conn->close();
          return;
        }
        conn->client_gone = true;
        conn->handler_cancel.emit(net::cancellation_type::terminal);
      });
}

net::awaitable<bool> Server::Impl::write_response(Connection& conn, Response response,
                                                  bool keep_alive, unsigned version, bool head) {
  INFERA_CHECK(response.status >= 100 && response.status <= 999);
  bhttp::response<bhttp::string_body> res;
  res.version(version == 10 ? 10 : 11);
  res.result(static_cast<unsigned>(response.status));
  if (res.result() == bhttp::status::unknown) res.reason(wire::reason_phrase(response.status));
  wire::set_headers(res.base(), response.headers);
  res.body() = std::move(response.body);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  // The head and the body in one gathered write (HEAD: the GET answer's Content-Length, no body).
  const std::string head_bytes = wire::serialize_head(res.base());
  const std::array<net::const_buffer, 2> buffers{
      net::buffer(head_bytes), head ? net::const_buffer() : net::buffer(res.body())};
  const beast::error_code ec =
      co_await io::write(conn.stream, conn.deadline, buffers, options.write_timeout);
  co_return !ec && keep_alive;
}

net::awaitable<void> Server::Impl::reject(Connection& conn, const RequestError& error) {
  rejected.fetch_add(1, std::memory_order_relaxed);
  // A read deadline already closed the socket (Beast's timeout): nothing can be answered.
  if (error.status.code() == StatusCode::kDeadlineExceeded) co_return;
  Response answer = error_response(error.status, {.origin = error.origin});
  co_await write_response(conn, std::move(answer), /*keep_alive=*/false, 11);
  // Lingering close: stop sending (over TLS, close_notify first), then read and drop what the
  // client still sends (its body; TLS records unread) for a bounded time, so that its read of
  // our answer is not cut by a reset.
  beast::error_code ec;
  conn.stream.send_close_notify();
  conn.socket().shutdown(tcp::socket::shutdown_send, ec);
  conn.deadline.arm(options.linger_timeout);
  size_t drained = 0;
  std::array<char, 4096> sink;
  while (drained < server_internal::kMaxLingerBytes) {
    auto [rec, n] = co_await conn.socket().async_read_some(net::buffer(sink), use_nothrow);
    if (rec) break;
    drained += n;
  }
  conn.deadline.disarm({});
}

Result<std::unique_ptr<Server>> Server::start(EventLoop& loop, ServerOptions options,
                                              Routes routes) {
  auto impl = std::make_shared<Impl>(loop, std::move(options), std::move(routes));
  const ServerOptions& opt = impl->options;
  beast::error_code ec;
  net::ip::address address = net::ip::make_address(opt.host, ec);
  if (ec) {
    tcp::resolver resolver(loop.context());
    auto results = resolver.resolve(opt.host, std::to_string(opt.port), ec);
    if (ec || results.empty()) {
      return invalid_argument("cannot resolve listen host '" + opt.host + "'");
    }
    address = results.begin()->endpoint().address();
  }
  const tcp::endpoint endpoint(address, opt.port);
  tcp::acceptor& acceptor = impl->acceptor;
  const std::string where = opt.host + ":" + std::to_string(opt.port);
  if (acceptor.open(endpoint.protocol(), ec); ec) {
    return unavailable("cannot open a socket for " + where + ": " + ec.message());
  }
  acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (acceptor.bind(endpoint, ec); ec) {
    return unavailable("cannot bind " + where + ": " + ec.message());
  }
  if (acceptor.listen(net::socket_base::max_listen_connections, ec); ec) {
    return unavailable("cannot listen on " + where + ": " + ec.message());
  }
  acceptor.non_blocking(true, ec);  // the accept loop's bursts; async_accept is unaffected
  const uint16_t port = acceptor.local_endpoint(ec).port();
  net::co_spawn(acceptor.get_executor(), impl->accept_loop(),
                [self = impl](const std::exception_ptr& e) { log_escaped(e, "accept loop"); });
  INFERA_LOG(kInfo, "http").msg("listening").kv("host", opt.host).kv("port", port);
  return std::unique_ptr<Server>(new Server(std::move(impl), port));
}

Server::Server(std::shared_ptr<Impl> impl, uint16_t port) : impl_(std::move(impl)), port_(port) {}

Server::~Server() {
  shutdown(std::chrono::milliseconds(0));
}

const std::string& Server::host() const {
  return impl_->options.host;
}

ServerStats Server::stats() const {
  ServerStats s;
  s.connections_accepted = impl_->accepted.load(std::memory_order_relaxed);
  s.requests = impl_->requests.load(std::memory_order_relaxed);
  s.rejected_requests = impl_->rejected.load(std::memory_order_relaxed);
  s.client_disconnects = impl_->disconnects.load(std::memory_order_relaxed);
  s.tls_handshake_failures = impl_->tls_failures.load(std::memory_order_relaxed);
  std::lock_guard lock(impl_->mu);
  s.connections_open = impl_->connections.size();
  return s;
}

void Server::shutdown(std::chrono::milliseconds drain) {
  Impl& impl = *impl_;
  {
    std::lock_guard lock(impl.mu);
    if (impl.shut_down) return;
    impl.shut_down = true;
  }
  INFERA_CHECK(!impl.loop.in_loop_thread());
  // A stopped loop runs nothing more: the connections die with it, there is nothing to wait for.
  const bool loop_running = !impl.loop.context().stopped();
  // Ordering: `draining` is set before any close is posted, and every connection checks it on
  // its strand before it waits for a new request, so none can slip back into an idle wait.
  impl.draining.store(true);
  net::post(impl.acceptor.get_executor(), [self = impl_] {
    beast::error_code ec;
    self->acceptor.close(ec);
  });
  auto close_all = [&impl](bool idle_only) {
    std::lock_guard lock(impl.mu);
    for (const auto& entry : impl.connections) {
      std::shared_ptr<Connection> conn = entry.second;  // not a structured binding: clang 14
      net::post(conn->socket().get_executor(), [conn, idle_only] {
        if (!idle_only || !conn->busy) conn->close();
      });
    }
  };
  close_all(/*idle_only=*/true);
  if (!loop_running) return;
  std::unique_lock lock(impl.mu);
  const auto deadline = std::chrono::steady_clock::now() + drain;
  if (!impl.all_closed.wait_until(lock, deadline, [&] { return impl.connections.empty(); })) {
    INFERA_LOG(kWarn, "http")
        .msg("drain bound reached; closing connections")
        .kv("open", impl.connections.size());
    lock.unlock();
    close_all(/*idle_only=*/false);
    lock.lock();
    if (!impl.all_closed.wait_for(lock, server_internal::kForceCloseWait,
                                  [&] { return impl.connections.empty(); })) {
      INFERA_LOG(kError, "http")
          .msg("connections still open after close")
          .kv("open", impl.connections.size());
    }
  }
}

}  // namespace infera::http
