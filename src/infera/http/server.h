// HTTP/1.1 server: a listener on host:port, one coroutine per connection with keep-alive, limits
// (header and body bytes) and a deadline on every read and write, a route table of coroutine
// handlers that return a whole Response or stream one through a ResponseWriter, detection of
// clients that go away, and graceful shutdown. The composition root owns the Server and the
// EventLoop it runs on (destroy the server first). start/shutdown: a non-loop thread; port/stats:
// any thread. A handler runs on its connection's thread (its own io_context, see
// event_loop.h) and owns its ResponseWriter.
//
// A whole response:
//   Routes routes;
//   routes.add(Method::kGet, "/health", [](Request&, ResponseWriter&) -> net::awaitable<Response> {
//     co_return Response::text(200, "ok");
//   });
//
// A streamed response (SSE), with backpressure and client-disconnect handling:
//   routes.add(Method::kPost, "/v1/completions",
//              [&](Request& req, ResponseWriter& out) -> net::awaitable<Response> {
//     if (!(co_await out.write_head(200, kSseContentType)).ok())
//       co_return {};                                 // the client is already gone
//     for (const std::string& json : tokens) {
//       // Resumes once the socket took the bytes: a slow client slows this loop down.
//       if (!(co_await out.write(sse_event(json))).ok()) co_return {};  // gone or too slow
//     }
//     co_await out.write(kSseDone);
//     co_return {};  // ignored once streaming started; the stream is finished for the handler
//   });
//   INFERA_ASSIGN_OR_RETURN(auto server, Server::start(loop, options, std::move(routes)));
//
// Client disconnect: while a handler runs, the server watches the request socket (a pending
// one-byte peek, no coroutine). If the client closes it, writer.client_gone() becomes true and
// the handler is cancelled (Asio terminal cancellation, through the connection coroutine's
// cancellation slot): its pending cancellable co_await (a Client read or connect, a timer, a
// write) completes with operation_aborted, which the Client reports as kCancelled. A proxy
// handler therefore releases its upstream without extra code; it should then return promptly.
// Asio delivers the signal once: Client calls made afterwards fail at once with kCancelled, but
// a handler's own later waits (timers) are not cancelled again, so loops check client_gone().
// Over TLS (ServerOptions::tls) the watch peeks the TCP connection under TLS: a client that
// closes or resets it is seen as above, and so is one that sends TLS's close_notify (an alert
// record) before its FIN.
// Exceptions never leave a handler's coroutine: one that throws is logged and answered with 500,
// or, once its stream has started, the connection is closed without the final chunk (the client
// sees a truncated body, never a complete-looking one).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"
#include "infera/http/awaitable.h"
#include "infera/http/event_loop.h"
#include "infera/http/message.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace infera::http {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;                        // 0: an ephemeral port, read back with Server::port()
  size_t max_header_bytes = size_t{16} * 1024;      // request line + headers; beyond: 431
  size_t max_body_bytes = size_t{8} * 1024 * 1024;  // beyond: 413
  // From a connection's first byte (or its accept) to the end of the request headers: a client
  // trickling bytes (slow-loris) is cut off by this deadline, not by a per-read timer.
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};   // the whole request body
  std::chrono::milliseconds write_timeout{30'000};  // each write of a response or chunk
  std::chrono::milliseconds idle_timeout{60'000};   // keep-alive wait for the next request
  // After an error answer the server stops sending and drains the client's unread bytes for at
  // most this long before closing, so the client reads the answer instead of a TCP reset.
  std::chrono::milliseconds linger_timeout{1'000};
  int socket_send_buffer_bytes = 0;  // SO_SNDBUF of each connection; 0: kernel default
  // CORS: browser origins allowed to call this server ("*" or exact "scheme://host[:port]").
  // A request from one gets Access-Control-Allow-Origin (its origin) on its answer, streamed or
  // not; a preflight (OPTIONS with Access-Control-Request-Method) is answered here, 204 for an
  // allowed origin and 403 otherwise. Empty: no CORS headers, and OPTIONS is routed as any
  // method (405).
  std::vector<std::string> allowed_origins;
  // TLS (tls.h, make_tls_server_context): when set, every accepted connection completes a TLS
  // handshake, within header_timeout of its accept, before its first request; that deadline
  // then also bounds the request's headers. A peer that fails the handshake (a plain-HTTP
  // client, an untrusting client, garbage) is closed and counted in
  // ServerStats::tls_handshake_failures. Null: plain HTTP. Shared read-only by the connections.
  std::shared_ptr<boost::asio::ssl::context> tls;
};

// Streams one response. Owned by the handler it is given to; only that handler's coroutine may
// call it. Every method returns kCancelled once the client is gone and kDeadlineExceeded when a
// write took longer than write_timeout (the connection is then closed).
class ResponseWriter {
 public:
  struct State;  // the server's side of the exchange (server.cc)
  explicit ResponseWriter(State& state) : state_(state) {}
  ResponseWriter(const ResponseWriter&) = delete;
  ResponseWriter& operator=(const ResponseWriter&) = delete;

  // Sets the status line and headers; they are sent with the first body bytes (or by finish()),
  // in the same write. The body follows with write() (chunked encoding).
  // GCC 12 cannot compile a braced header list inside a co_await expression ("array used as
  // initializer"): build the Headers in a variable first, or use the Content-Type overload.
  net::awaitable<Status> write_head(int status, Headers headers);
  net::awaitable<Status> write_head(int status, std::string_view content_type);
  // Sends `bytes` as one chunk and resumes once the socket accepted them (backpressure). Empty
  // bytes send nothing. Only after write_head(). `last` also ends the body, as finish() would,
  // in the same write.
  net::awaitable<Status> write(std::string_view bytes, bool last = false);
  // Sends a pending head now, for a handler that wants the client to see the status before its
  // first body bytes exist. Nothing to send: returns at once.
  net::awaitable<Status> flush();
  // Ends the body. Optional: a handler that returns after write_head() is finished for it.
  net::awaitable<Status> finish();

  bool started() const;
  bool finished() const;
  // The client went away (closed or reset its connection, or a write to it failed).
  bool client_gone() const;

 private:
  State& state_;
};

using Handler = std::function<net::awaitable<Response>(Request& request, ResponseWriter& writer)>;

// The route table, filled before Server::start and immutable afterwards. Paths are matched
// without the query string. An exact route wins over a prefix route; among prefix routes the
// longest prefix wins. A path that matches no route is 404; a path that matches with another
// method only is 405.
class Routes {
 public:
  Routes& add(Method method, std::string path, Handler handler);
  // Every path starting with `prefix`, e.g. "/v1/admin/cache-view/" (the handler reads the rest
  // from request.path()).
  Routes& add_prefix(Method method, std::string prefix, Handler handler);

  // The handler for (method, path), or null; `path_known` (optional) tells whether the path
  // matches a route of another method.
  const Handler* find(Method method, std::string_view path, bool* path_known = nullptr) const;

 private:
  struct Entry {
    Method method;
    std::string path;
    bool prefix;
    Handler handler;
  };
  std::vector<Entry> entries_;
};

struct ServerStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_open = 0;
  uint64_t requests = 0;            // requests read completely and dispatched
  uint64_t rejected_requests = 0;   // answered by the transport: 400, 404, 405, 413, 431, ...
  uint64_t client_disconnects = 0;  // clients that left while their handler ran
  uint64_t tls_handshake_failures = 0;  // connections closed because their handshake failed
};

class Server {
 public:
  // Binds, listens and starts accepting on `loop`. A bind or listen failure is an error (for a
  // strict startup: one clear line, non-zero exit).
  static Result<std::unique_ptr<Server>> start(EventLoop& loop, ServerOptions options,
                                               Routes routes);
  ~Server();  // shutdown(0) unless already shut down
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const { return port_; }
  const std::string& host() const;
  ServerStats stats() const;

  // Graceful shutdown: stop accepting, close idle keep-alive connections, let requests and
  // streams in flight finish for up to `drain`, then close what remains (their handlers are
  // cancelled) and wait for it. Blocks; idempotent. From a non-loop thread (e.g. main after
  // SIGTERM).
  void shutdown(std::chrono::milliseconds drain);

  struct Impl;

 private:
  explicit Server(std::shared_ptr<Impl> impl, uint16_t port);
  std::shared_ptr<Impl> impl_;
  uint16_t port_;
};

}  // namespace infera::http
